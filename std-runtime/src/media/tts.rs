//! Text to speech: an OpenAI-compatible `POST {base}/audio/speech` (OpenAI,
//! or a local openedai-speech / Kokoro-FastAPI / LocalAI server), sent
//! through the process's one HTTP agent ([`crate::http`]) with a deadline.
//! The answer's body is the audio, returned byte for byte.
//!
//! What is spoken is not the Markdown answer itself: [`spoken_text`] drops
//! code blocks and URLs, strips the Markdown markup, and keeps the head of a
//! long answer up to `max_chars`, cut at the end of a sentence.

use std::fmt;
use std::time::Duration;

use crate::redact::redact_url;
use crate::secret::Secret;

use super::service::{error_message, post_to_service};
use crate::http::describe;

/// The speech model when `[tts] model` is not set (OpenAI's).
pub const DEFAULT_TTS_MODEL: &str = "tts-1";
/// The voice when `[tts] voice` is not set (one of OpenAI's).
pub const DEFAULT_TTS_VOICE: &str = "alloy";
/// How much of an answer is spoken, in characters (`[tts] max_chars`).
pub const DEFAULT_TTS_MAX_CHARS: usize = 1500;
/// One synthesis's deadline (`[tts] timeout_secs`).
pub const DEFAULT_TTS_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest audio accepted from the service (a few minutes of Opus is
/// well under a megabyte; Telegram takes voice notes up to 50 MB).
const MAX_AUDIO_BYTES: u64 = 20 * 1024 * 1024;

/// The audio format asked of the service (`[tts] format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AudioFormat {
    /// Opus in an Ogg container: what Telegram plays as a voice note.
    #[default]
    Opus,
    /// MP3.
    Mp3,
    /// AAC.
    Aac,
    /// FLAC.
    Flac,
    /// WAV.
    Wav,
}

impl AudioFormat {
    /// The names `[tts] format` accepts.
    pub const NAMES: &'static [&'static str] = &["opus", "mp3", "aac", "flac", "wav"];

    /// Parses a `[tts] format` value.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "opus" | "ogg" => AudioFormat::Opus,
            "mp3" => AudioFormat::Mp3,
            "aac" => AudioFormat::Aac,
            "flac" => AudioFormat::Flac,
            "wav" => AudioFormat::Wav,
            _ => return None,
        })
    }

    /// The `response_format` of the request.
    pub fn api_name(self) -> &'static str {
        match self {
            AudioFormat::Opus => "opus",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Aac => "aac",
            AudioFormat::Flac => "flac",
            AudioFormat::Wav => "wav",
        }
    }

    /// The MIME type of the audio.
    pub fn media_type(self) -> &'static str {
        match self {
            AudioFormat::Opus => "audio/ogg",
            AudioFormat::Mp3 => "audio/mpeg",
            AudioFormat::Aac => "audio/aac",
            AudioFormat::Flac => "audio/flac",
            AudioFormat::Wav => "audio/wav",
        }
    }

    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            AudioFormat::Opus => "ogg",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Aac => "aac",
            AudioFormat::Flac => "flac",
            AudioFormat::Wav => "wav",
        }
    }

    /// Whether chat apps play it as a voice note (Ogg/Opus); other formats
    /// go out as audio files.
    pub fn is_voice_note(self) -> bool {
        self == AudioFormat::Opus
    }
}

/// `[tts]`: an OpenAI-compatible speech endpoint. Loaded and checked by
/// [`crate::config`]; the key is shown only masked.
#[derive(Clone, PartialEq, Eq)]
pub struct TtsSettings {
    /// The base URL (`…/v1`); `[tts] base_url`, `HERMES_TTS_BASE_URL`.
    pub base_url: String,
    /// The key, if the service wants one (`[tts] api_key`,
    /// `HERMES_TTS_API_KEY`; `OPENAI_API_KEY` for OpenAI's own endpoint).
    pub api_key: Option<Secret>,
    /// The model (`[tts] model`; default [`DEFAULT_TTS_MODEL`]).
    pub model: String,
    /// The voice (`[tts] voice`; default [`DEFAULT_TTS_VOICE`]).
    pub voice: String,
    /// The audio format (`[tts] format`; default Opus in Ogg).
    pub format: AudioFormat,
    /// How many characters of an answer are spoken (`[tts] max_chars`).
    pub max_chars: usize,
    /// One synthesis's deadline (`[tts] timeout_secs`).
    pub timeout: Duration,
}

impl fmt::Debug for TtsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtsSettings")
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("voice", &self.voice)
            .field("format", &self.format)
            .field("max_chars", &self.max_chars)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why no speech was made. Messages carry no key; URLs are masked.
#[derive(Debug, thiserror::Error)]
pub enum TtsError {
    /// The service could not be reached or the exchange broke.
    #[error("the speech service at {url} could not be reached: {message}")]
    Network {
        /// The endpoint, masked.
        url: String,
        /// What failed.
        message: String,
    },
    /// The service answered with an error status.
    #[error("the speech service answered HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// The service's message.
        message: String,
    },
    /// The answer is not audio.
    #[error("the speech service answered something that is not audio: {0}")]
    Protocol(String),
}

/// Speech made by the service.
#[derive(Clone, PartialEq, Eq)]
pub struct Speech {
    /// The audio, as the service sent it.
    pub audio: Vec<u8>,
    /// Its format.
    pub format: AudioFormat,
}

impl fmt::Debug for Speech {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Speech")
            .field("audio", &self.audio.len())
            .field("format", &self.format)
            .finish()
    }
}

/// Turns text into speech at the configured endpoint.
#[derive(Clone)]
pub struct Speaker {
    settings: TtsSettings,
    url: String,
}

impl fmt::Debug for Speaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry credentials: shown masked, like the settings.
        f.debug_struct("Speaker")
            .field("settings", &self.settings)
            .field("url", &self.shown_url())
            .finish()
    }
}

impl Speaker {
    /// A speaker for `settings`. Does no IO.
    pub fn new(settings: TtsSettings) -> Self {
        let url = format!(
            "{}/audio/speech",
            settings.base_url.trim().trim_end_matches('/')
        );
        Speaker { settings, url }
    }

    /// The settings.
    pub fn settings(&self) -> &TtsSettings {
        &self.settings
    }

    /// The endpoint, credentials masked (for messages).
    pub fn shown_url(&self) -> String {
        redact_url(&self.url).into_owned()
    }

    /// Speech of `text` (already made speakable: [`spoken_text`]).
    pub fn speak(&self, text: &str) -> Result<Speech, TtsError> {
        let body = serde_json::json!({
            "model": self.settings.model,
            "input": text,
            "voice": self.settings.voice,
            "response_format": self.settings.format.api_name(),
        })
        .to_string();
        let network = |e: ureq::Error| TtsError::Network {
            url: self.shown_url(),
            message: describe(&e),
        };
        let mut response = post_to_service(
            &self.url,
            self.settings.timeout,
            self.settings.api_key.as_ref(),
            "application/json",
            body.as_bytes(),
        )
        .map_err(network)?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let audio = response
            .body_mut()
            .with_config()
            .limit(MAX_AUDIO_BYTES)
            .read_to_vec()
            .map_err(network)?;
        if !(200..300).contains(&status) {
            return Err(TtsError::Status {
                status,
                message: error_message(&String::from_utf8_lossy(&audio)),
            });
        }
        // An error page or a JSON error with status 200 must not go out as
        // a voice note.
        if audio.is_empty() || content_type.starts_with("application/json") {
            return Err(TtsError::Protocol(if audio.is_empty() {
                "an empty body".into()
            } else {
                error_message(&String::from_utf8_lossy(&audio))
            }));
        }
        if self.settings.format == AudioFormat::Opus && !audio.starts_with(b"OggS") {
            return Err(TtsError::Protocol(
                "not an Ogg stream although Opus was asked for".into(),
            ));
        }
        Ok(Speech {
            audio,
            format: self.settings.format,
        })
    }

    /// `hermes doctor`: asks for a short sentence; says how much audio came.
    pub fn check(&self) -> Result<String, TtsError> {
        let speech = self.speak("Hermes speech check.")?;
        Ok(format!(
            "speech service at {} ({} voice {}, {} bytes of {})",
            self.shown_url(),
            self.settings.model,
            self.settings.voice,
            speech.audio.len(),
            self.settings.format.api_name()
        ))
    }
}

/// What of a Markdown `answer` is read aloud: fenced code blocks and URLs
/// dropped (a link keeps its text), inline code, emphasis, headings, quote
/// marks, list bullets and table bars stripped, whitespace collapsed; then
/// at most `max_chars` characters, cut after the last sentence that fits
/// (else at a space). The flag says whether anything was cut.
pub fn spoken_text(answer: &str, max_chars: usize) -> (String, bool) {
    let mut lines = Vec::new();
    let mut in_fence = false;
    for line in answer.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || line.starts_with("    ") || line.starts_with('\t') {
            continue;
        }
        let bare = trimmed
            .trim_start_matches('#')
            .trim_start_matches('>')
            .trim_start();
        let bare = ["- ", "* ", "+ "]
            .iter()
            .find_map(|b| bare.strip_prefix(b))
            .unwrap_or(bare);
        if bare.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
            // A table rule, a horizontal rule, an empty line.
            lines.push(String::new());
            continue;
        }
        if bare.starts_with('|') {
            // A table row: its cells, as a list.
            let cells: Vec<String> = bare
                .split('|')
                .map(|c| strip_inline(c.trim()))
                .filter(|c| !c.trim().is_empty())
                .collect();
            lines.push(cells.join(", "));
            continue;
        }
        lines.push(strip_inline(bare));
    }
    // Paragraphs end in a pause: a line break becomes a sentence end when
    // the line had none.
    let mut text = String::new();
    for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        if !text.is_empty() {
            if !text.ends_with(['.', '!', '?', ':', ';', ',']) {
                text.push('.');
            }
            text.push(' ');
        }
        text.push_str(line);
    }
    let text = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" .", ".")
        .replace(" ,", ",");
    cut_at_sentence(&text, max_chars)
}

/// One line without links' URLs, bare URLs, and inline markup.
fn strip_inline(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        // `[text](url)` → text.
        if c == '['
            && let Some(close) = rest.find("](")
            && let Some(end) = rest[close..].find(')')
        {
            out.push_str(&rest[1..close]);
            rest = &rest[close + end + 1..];
            continue;
        }
        if rest.starts_with("http://") || rest.starts_with("https://") || rest.starts_with("www.") {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            rest = &rest[end..];
            continue;
        }
        if !matches!(c, '*' | '_' | '`' | '~' | '<' | '>') {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// At most `max` characters of `text`, ending after a sentence when one
/// ends in the second half of the cut, else at a space.
fn cut_at_sentence(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_owned(), false);
    }
    let end = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    let sentence = head
        .char_indices()
        .filter(|&(i, c)| {
            matches!(c, '.' | '!' | '?') && head[i + c.len_utf8()..].starts_with(' ')
                || (matches!(c, '.' | '!' | '?') && i + c.len_utf8() == head.len())
        })
        .map(|(i, c)| i + c.len_utf8())
        .next_back()
        .filter(|&i| i * 2 >= head.len());
    let cut = sentence.unwrap_or_else(|| head.rfind(' ').unwrap_or(head.len()));
    (head[..cut].trim_end().to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_blocks_urls_and_markup_are_not_read_aloud() {
        let answer = "# Result\n\nRun **this** with `cargo`:\n\n```sh\ncargo build --release\n```\n\n\
                      - see [the docs](https://example.com/docs) or https://x.y/z\n\
                      | a | b |\n|---|---|\n| 1 | 2 |\n\n    indented code\nDone!";
        let (spoken, cut) = spoken_text(answer, 1000);
        assert!(!cut);
        assert_eq!(
            spoken,
            "Result. Run this with cargo: see the docs or. a, b. 1, 2. Done!"
        );
        assert!(!spoken.contains("cargo build"));
        assert!(!spoken.contains("http"));
        assert!(!spoken.contains("indented"));
    }

    #[test]
    fn a_long_answer_is_cut_after_its_last_whole_sentence() {
        let answer = "First sentence here. Second one is here too! Third goes on and on and on";
        let (spoken, cut) = spoken_text(answer, 50);
        assert!(cut);
        assert_eq!(spoken, "First sentence here. Second one is here too!");
        let (spoken, cut) = spoken_text("no sentence ends anywhere in this text", 20);
        assert!(cut);
        assert_eq!(spoken, "no sentence ends");
    }

    #[test]
    fn the_key_is_masked_in_debug() {
        let s = TtsSettings {
            base_url: "https://user:pw@tts.example/v1".into(),
            api_key: Some("sk-secret-0123456789".into()),
            model: DEFAULT_TTS_MODEL.into(),
            voice: DEFAULT_TTS_VOICE.into(),
            format: AudioFormat::default(),
            max_chars: 10,
            timeout: DEFAULT_TTS_TIMEOUT,
        };
        let shown = format!("{s:?} {:?}", Speaker::new(s.clone()));
        assert!(!shown.contains("sk-secret-0123456789"), "{shown}");
        assert!(!shown.contains("pw@"), "{shown}");
    }
}
