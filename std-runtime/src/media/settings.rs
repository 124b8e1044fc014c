//! Settings for what users send besides text (SPEC X6): whether the model
//! sees images, which model describes them when it does not, and where
//! voice is transcribed. `config` loads them; the media code owns them.

use std::fmt;
use std::time::Duration;

use crate::redact::redact_url;
use crate::secret::Secret;

/// The transcription model when `[transcription] model` is not set
/// (OpenAI's; whisper.cpp and faster-whisper servers accept any name).
pub const DEFAULT_TRANSCRIPTION_MODEL: &str = "whisper-1";
/// How long one transcription may take (`[transcription] timeout_secs`).
pub const DEFAULT_TRANSCRIPTION_TIMEOUT: Duration = Duration::from_secs(120);

/// Images and voice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MediaSettings {
    /// Whether the chat model accepts images (`[provider] vision`,
    /// `HERMES_VISION`); `None`: decided by the model's family
    /// ([`super::vision::model_sees_images`]).
    pub vision: Option<bool>,
    /// The model (on the same provider) that describes images for a chat
    /// model that cannot see them (`[provider] vision_model`,
    /// `HERMES_VISION_MODEL`).
    pub vision_model: Option<String>,
    /// Where voice messages are transcribed; `None`: nowhere configured.
    pub transcription: Option<TranscriptionSettings>,
    /// Where answers are spoken (`[tts]`); `None`: nowhere configured.
    pub tts: Option<super::tts::TtsSettings>,
}

/// An OpenAI-compatible `POST /audio/transcriptions` endpoint: OpenAI, or a
/// local whisper.cpp / faster-whisper server.
#[derive(Clone, PartialEq, Eq)]
pub struct TranscriptionSettings {
    /// The base URL (`…/v1`); `[transcription] base_url`,
    /// `HERMES_TRANSCRIPTION_BASE_URL`.
    pub base_url: String,
    /// The key, if the server wants one (`[transcription] api_key`,
    /// `HERMES_TRANSCRIPTION_API_KEY`; `OPENAI_API_KEY` for OpenAI's own
    /// endpoint).
    pub api_key: Option<Secret>,
    /// The model (`[transcription] model`, `HERMES_TRANSCRIPTION_MODEL`;
    /// default [`DEFAULT_TRANSCRIPTION_MODEL`]).
    pub model: String,
    /// A language hint (ISO 639-1, `[transcription] language`); `None` lets
    /// the server detect it.
    pub language: Option<String>,
    /// One transcription's deadline (`[transcription] timeout_secs`).
    pub timeout: Duration,
}

impl fmt::Debug for TranscriptionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TranscriptionSettings")
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("language", &self.language)
            .field("timeout", &self.timeout)
            .finish()
    }
}
