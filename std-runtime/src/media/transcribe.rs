//! Voice to text: an OpenAI-compatible `POST {base}/audio/transcriptions`
//! (OpenAI's Whisper API, a local whisper.cpp or faster-whisper server),
//! sent with ureq as `multipart/form-data` (`file`, `model`,
//! `response_format=json`, optionally `language`); the answer's `text` is
//! the transcript.

use super::service::{error_message, post_to_service};
use super::settings::TranscriptionSettings;
use crate::http::describe;
use crate::http::multipart::Form;
use crate::redact::redact_url;

/// The longest answer read (a transcript is a few KB).
const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// Why audio could not be transcribed. Messages carry no key, and URLs are
/// shown with credentials masked.
#[derive(Debug, thiserror::Error)]
pub enum TranscribeError {
    /// The server could not be reached or the exchange broke.
    #[error("the transcription service at {url} could not be reached: {message}")]
    Network {
        /// The endpoint, masked.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server answered with an error status.
    #[error("the transcription service answered HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The answer is not a transcription.
    #[error("the transcription service answered something unexpected: {0}")]
    Protocol(String),
    /// Nothing was heard.
    #[error("the transcription is empty (no speech was recognised)")]
    Empty,
}

/// Sends audio to the configured endpoint.
#[derive(Clone, Debug)]
pub struct Transcriber {
    settings: TranscriptionSettings,
    url: String,
}

impl Transcriber {
    /// A transcriber for `settings`. Does no IO.
    pub fn new(settings: TranscriptionSettings) -> Self {
        let url = format!(
            "{}/audio/transcriptions",
            settings.base_url.trim().trim_end_matches('/')
        );
        Transcriber { settings, url }
    }

    /// The endpoint, credentials masked (for messages).
    pub fn shown_url(&self) -> String {
        redact_url(&self.url).into_owned()
    }

    /// The transcript of `audio` (a file named `file_name` of type
    /// `media_type`, e.g. `voice.ogg`, `audio/ogg`).
    pub fn transcribe(
        &self,
        audio: &[u8],
        file_name: &str,
        media_type: &str,
    ) -> Result<String, TranscribeError> {
        let mut form = Form::new()
            .file("file", file_name, media_type, audio.to_vec())
            .text("model", &self.settings.model)
            .text("response_format", "json");
        if let Some(language) = &self.settings.language {
            form = form.text("language", language);
        }
        let body = form.finish();
        // The process's one HTTP agent (`crate::http`), with this
        // service's deadline.
        let network = |e: ureq::Error| TranscribeError::Network {
            url: self.shown_url(),
            message: describe(&e),
        };
        let mut response = post_to_service(
            &self.url,
            self.settings.timeout,
            self.settings.api_key.as_ref(),
            &body.content_type,
            &body.bytes,
        )
        .map_err(network)?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(network)?;
        if !(200..300).contains(&status) {
            return Err(TranscribeError::Status {
                status,
                message: error_message(&text),
            });
        }
        let answer: serde_json::Value = serde_json::from_str(&text).map_err(|_| {
            TranscribeError::Protocol(format!(
                "not JSON: {}",
                text.chars().take(200).collect::<String>()
            ))
        })?;
        let transcript = answer
            .get("text")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| TranscribeError::Protocol("no \"text\" in the answer".into()))?
            .trim();
        if transcript.is_empty() {
            return Err(TranscribeError::Empty);
        }
        Ok(transcript.to_owned())
    }
}
