//! Loads the media settings ([`MediaSettings`], owned by [`crate::media`]):
//! whether the model sees images, which model describes them when it does
//! not, and where voice is transcribed (SPEC X6).

use std::time::Duration;

use super::resolve::Resolver;
use super::{ConfigError, Origin, validate_url};
use crate::media::settings::{
    DEFAULT_TRANSCRIPTION_MODEL, DEFAULT_TRANSCRIPTION_TIMEOUT, MediaSettings,
    TranscriptionSettings,
};
use crate::media::tts::{
    AudioFormat, DEFAULT_TTS_MAX_CHARS, DEFAULT_TTS_MODEL, DEFAULT_TTS_TIMEOUT, DEFAULT_TTS_VOICE,
    TtsSettings,
};
use crate::secret::Secret;

pub(super) fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Invalid {
            key: name.to_owned(),
            message: format!("'{value}' is not true or false"),
        }),
    }
}

/// Reads the media settings; records where each came from in `origins`.
pub(super) fn load(
    resolver: &Resolver<'_>,
    origins: &mut std::collections::BTreeMap<&'static str, Origin>,
) -> Result<MediaSettings, ConfigError> {
    let vision = match resolver.var("HERMES_VISION") {
        Some((v, o)) => {
            origins.insert("vision", o);
            Some(parse_bool("HERMES_VISION", v)?)
        }
        None => resolver.toml_bool("provider", "vision")?.inspect(|_| {
            origins.insert("vision", Origin::ConfigFile("provider.vision"));
        }),
    };
    let vision_model = match resolver.var("HERMES_VISION_MODEL") {
        Some((v, o)) => {
            origins.insert("vision_model", o);
            Some(v.trim().to_owned())
        }
        None => resolver
            .toml_str("provider", "vision_model")?
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| {
                origins.insert("vision_model", Origin::ConfigFile("provider.vision_model"));
                m.to_owned()
            }),
    };
    let base_url = match resolver.var("HERMES_TRANSCRIPTION_BASE_URL") {
        Some((v, o)) => Some((v.trim().to_owned(), o)),
        None => resolver
            .toml_str("transcription", "base_url")?
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| (u.to_owned(), Origin::ConfigFile("transcription.base_url"))),
    };
    let transcription = match base_url {
        None => None,
        Some((base_url, origin)) => {
            validate_url(&base_url, origin)?;
            origins.insert("transcription_base_url", origin);
            let openai = base_url.contains("api.openai.com");
            let api_key = match resolver.var("HERMES_TRANSCRIPTION_API_KEY") {
                Some((k, _)) => Some(k.trim().to_owned()),
                None => match resolver.toml_str("transcription", "api_key")? {
                    Some(k) => Some(k.trim().to_owned()),
                    // A vendor's key goes only to that vendor.
                    None if openai => resolver
                        .var("OPENAI_API_KEY")
                        .map(|(k, _)| k.trim().to_owned()),
                    None => None,
                },
            }
            .filter(|k| !k.is_empty());
            let model = match resolver.var("HERMES_TRANSCRIPTION_MODEL") {
                Some((m, _)) => m.trim().to_owned(),
                None => resolver
                    .toml_str("transcription", "model")?
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .unwrap_or(DEFAULT_TRANSCRIPTION_MODEL)
                    .to_owned(),
            };
            let language = resolver
                .toml_str("transcription", "language")?
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned);
            let timeout = match resolver.toml_int("transcription", "timeout_secs")? {
                Some(0) => {
                    return Err(resolver.type_error("transcription", "timeout_secs", "at least 1"));
                }
                Some(n) => Duration::from_secs(u64::from(n)),
                None => DEFAULT_TRANSCRIPTION_TIMEOUT,
            };
            Some(TranscriptionSettings {
                base_url,
                api_key: api_key.map(Secret::from),
                model,
                language,
                timeout,
            })
        }
    };
    let tts = load_tts(resolver, origins)?;
    Ok(MediaSettings {
        vision,
        vision_model,
        transcription,
        tts,
    })
}

/// `[tts]` (and `HERMES_TTS_*`); `None` without a base URL.
fn load_tts(
    resolver: &Resolver<'_>,
    origins: &mut std::collections::BTreeMap<&'static str, Origin>,
) -> Result<Option<TtsSettings>, ConfigError> {
    let base_url = match resolver.var("HERMES_TTS_BASE_URL") {
        Some((v, o)) => Some((v.trim().to_owned(), o)),
        None => resolver
            .toml_str("tts", "base_url")?
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| (u.to_owned(), Origin::ConfigFile("tts.base_url"))),
    };
    let Some((base_url, origin)) = base_url else {
        return Ok(None);
    };
    validate_url(&base_url, origin)?;
    origins.insert("tts_base_url", origin);
    let api_key = match resolver.var("HERMES_TTS_API_KEY") {
        Some((k, _)) => Some(k.trim().to_owned()),
        None => match resolver.toml_str("tts", "api_key")? {
            Some(k) => Some(k.trim().to_owned()),
            // A vendor's key goes only to that vendor.
            None if base_url.contains("api.openai.com") => resolver
                .var("OPENAI_API_KEY")
                .map(|(k, _)| k.trim().to_owned()),
            None => None,
        },
    }
    .filter(|k| !k.is_empty());
    let text = |key: &str, default: &str| -> Result<String, ConfigError> {
        Ok(resolver
            .toml_str("tts", key)?
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .unwrap_or(default)
            .to_owned())
    };
    let format = match resolver.toml_str("tts", "format")? {
        None => AudioFormat::default(),
        Some(name) => AudioFormat::parse(name).ok_or_else(|| {
            resolver.type_error("tts", "format", "one of opus, mp3, aac, flac, wav")
        })?,
    };
    let max_chars = match resolver.toml_int("tts", "max_chars")? {
        Some(0) => return Err(resolver.type_error("tts", "max_chars", "at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => DEFAULT_TTS_MAX_CHARS,
    };
    let timeout = match resolver.toml_int("tts", "timeout_secs")? {
        Some(0) => return Err(resolver.type_error("tts", "timeout_secs", "at least 1")),
        Some(n) => Duration::from_secs(u64::from(n)),
        None => DEFAULT_TTS_TIMEOUT,
    };
    Ok(Some(TtsSettings {
        base_url,
        api_key: api_key.map(Secret::from),
        model: text("model", DEFAULT_TTS_MODEL)?,
        voice: text("voice", DEFAULT_TTS_VOICE)?,
        format,
        max_chars,
        timeout,
    }))
}
