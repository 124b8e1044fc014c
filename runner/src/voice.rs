//! Spoken replies: when the gateway answers aloud (`[gateway]
//! voice_replies`, `voice_text`, and `/voice` per chat).
//!
//! The speech itself is `hermes_runtime::media::tts` (`[tts]`); sending it
//! is the adapter's `send_file` with [`FileKind::Voice`] (Telegram
//! `sendVoice`, a Discord attachment). The runner's part —
//! the reply, then the voice note, and one short line if speech fails —
//! is `runner/voice.rs`.
//!
//! [`FileKind::Voice`]: crate::adapter::FileKind::Voice

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::GatewayConfigError;
use crate::event::MessageType;

/// When answers are spoken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VoiceMode {
    /// A voice note gets a spoken reply; a typed message a typed one.
    #[default]
    Auto,
    /// Every answer is spoken.
    Always,
    /// No answer is spoken.
    Off,
}

impl VoiceMode {
    /// The spelling of config and `/voice`.
    pub const fn as_str(self) -> &'static str {
        match self {
            VoiceMode::Auto => "auto",
            VoiceMode::Always => "always",
            VoiceMode::Off => "off",
        }
    }

    /// Parses a config value or a `/voice` argument (`on` is `always`).
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(VoiceMode::Auto),
            "always" | "on" => Some(VoiceMode::Always),
            "off" | "never" => Some(VoiceMode::Off),
            _ => None,
        }
    }

    /// Whether the answer to a message of `kind` is spoken.
    pub fn speaks(self, kind: MessageType) -> bool {
        match self {
            VoiceMode::Always => true,
            VoiceMode::Off => false,
            VoiceMode::Auto => kind == MessageType::Voice,
        }
    }
}

/// `[gateway] voice_replies` and `voice_text`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoiceSettings {
    /// When answers are spoken, unless a chat chose otherwise with
    /// `/voice` (`voice_replies`, `GATEWAY_VOICE_REPLIES`; default auto).
    pub replies: VoiceMode,
    /// Whether a spoken reply is also sent as text (`voice_text`; default
    /// true: for reading, searching, and what cannot be heard).
    pub text: bool,
}

impl Default for VoiceSettings {
    fn default() -> Self {
        VoiceSettings {
            replies: VoiceMode::Auto,
            text: true,
        }
    }
}

impl VoiceSettings {
    /// The `[gateway]` keys this reads.
    pub const KEYS: &'static [&'static str] = &["voice_replies", "voice_text"];

    /// Reads `voice_replies` and `voice_text` of the `[gateway]` table;
    /// `GATEWAY_VOICE_REPLIES` in `env` overrides the first.
    pub fn from_sources(
        table: &toml::Table,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, GatewayConfigError> {
        let mut settings = VoiceSettings::default();
        let replies = match env
            .get("GATEWAY_VOICE_REPLIES")
            .filter(|v| !v.trim().is_empty())
        {
            Some(v) => Some(("GATEWAY_VOICE_REPLIES", v.as_str())),
            None => match table.get("voice_replies") {
                None => None,
                Some(toml::Value::String(s)) => Some(("gateway.voice_replies", s.as_str())),
                Some(_) => {
                    return Err(GatewayConfigError {
                        key: "gateway.voice_replies".into(),
                        message: "must be \"auto\", \"always\" or \"off\"".into(),
                    });
                }
            },
        };
        if let Some((key, value)) = replies {
            settings.replies = VoiceMode::parse(value).ok_or_else(|| GatewayConfigError {
                key: key.into(),
                message: format!(
                    "`{value}` is not a voice mode{}; use \"auto\", \"always\" or \"off\"",
                    hermes_runtime::config::suggestion(value, ["auto", "always", "off"])
                ),
            })?;
        }
        match table.get("voice_text") {
            None => {}
            Some(toml::Value::Boolean(b)) => settings.text = *b,
            Some(_) => {
                return Err(GatewayConfigError {
                    key: "gateway.voice_text".into(),
                    message: "must be true or false".into(),
                });
            }
        }
        Ok(settings)
    }
}

/// Told when speech failed; the answer went out as text.
pub const VOICE_FAILED: &str = "(No voice reply this time: the speech service failed.)";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn load(toml_text: &str, env: &[(&str, &str)]) -> Result<VoiceSettings, GatewayConfigError> {
        let table: toml::Table = toml::from_str(toml_text).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        VoiceSettings::from_sources(&table, &env)
    }

    #[test]
    fn modes_and_their_errors() {
        assert_eq!(load("", &[]).unwrap(), VoiceSettings::default());
        let s = load("voice_replies = \"always\"\nvoice_text = false", &[]).unwrap();
        assert_eq!((s.replies, s.text), (VoiceMode::Always, false));
        let s = load(
            "voice_replies = \"always\"",
            &[("GATEWAY_VOICE_REPLIES", "off")],
        )
        .unwrap();
        assert_eq!(s.replies, VoiceMode::Off);
        let e = load("voice_replies = \"alwyas\"", &[]).unwrap_err();
        assert!(e.to_string().contains("always"), "{e}");
        assert!(load("voice_text = \"no\"", &[]).is_err());
        assert!(VoiceMode::Auto.speaks(MessageType::Voice));
        assert!(!VoiceMode::Auto.speaks(MessageType::Text));
        assert!(VoiceMode::Always.speaks(MessageType::Text));
        assert!(!VoiceMode::Off.speaks(MessageType::Voice));
    }
}
