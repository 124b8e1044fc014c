//! The Signal adapter's settings: `SIGNAL_*` variables, else `[signal]` in
//! `config.toml`.

use std::collections::HashSet;

use hermes_platform_kit::settings::{SettingError, Sources};

/// Settings for [`crate::SignalAdapter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalConfig {
    /// The daemon's base URL (`SIGNAL_HTTP_URL`), e.g. `http://127.0.0.1:8080`.
    pub http_url: String,
    /// The bot's account (`SIGNAL_ACCOUNT`), `+` and digits.
    pub account: String,
    /// Who may talk to the bot (`SIGNAL_ALLOWED_USERS`): numbers or UUIDs.
    /// The runner's allow-list decides; kept here for `--check`.
    pub allowed_users: HashSet<String>,
    /// Where scheduled jobs go (`SIGNAL_HOME_CHANNEL`): a number, a UUID or
    /// `group.<groupId>`.
    pub home_channel: Option<String>,
    /// In groups, answer only messages that mention the bot
    /// (`SIGNAL_REQUIRE_MENTION`, default true).
    pub require_mention: bool,
}

/// A Signal setting that cannot work; names the setting.
#[derive(Debug, thiserror::Error)]
pub enum SignalConfigError {
    /// A setting with a value of the wrong shape.
    #[error("{key}: {problem}")]
    Bad {
        /// The variable or `signal.key`.
        key: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// The URL is set but not the account (or the other way round).
    #[error("{0}")]
    Incomplete(String),
}

fn bad(key: &str, problem: impl Into<String>) -> SignalConfigError {
    SignalConfigError::Bad {
        key: key.to_owned(),
        problem: problem.into(),
    }
}

impl From<SettingError> for SignalConfigError {
    fn from(e: SettingError) -> Self {
        bad(&e.key, e.message)
    }
}

/// Whether `s` is a phone number as Signal writes it (`+` and digits).
pub fn is_number(s: &str) -> bool {
    s.len() > 4 && s.starts_with('+') && s[1..].chars().all(|c| c.is_ascii_digit())
}

/// Whether `s` is a UUID (Signal's ACI: 8-4-4-4-12 hex digits).
pub fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

impl SignalConfig {
    /// The settings from the variables, then `[signal]` of `file`; `None`
    /// when neither the URL nor the account is set (Signal disabled).
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
    ) -> Option<Result<Self, SignalConfigError>> {
        let sources = Sources::new(env, file, "signal");
        let pick = |var, key| sources.pick(var, key);
        let url = pick("SIGNAL_HTTP_URL", "http_url");
        let account = pick("SIGNAL_ACCOUNT", "account");
        if url.is_none() && account.is_none() {
            return None;
        }
        let build = || -> Result<Self, SignalConfigError> {
            let (Some(url), Some(account)) = (url, account) else {
                return Err(SignalConfigError::Incomplete(
                    "Signal needs both SIGNAL_HTTP_URL (the signal-cli daemon, e.g. http://127.0.0.1:8080) and SIGNAL_ACCOUNT (the bot's number, +15551234567)".to_owned(),
                ));
            };
            let http_url = url.string()?;
            if !(http_url.starts_with("http://") || http_url.starts_with("https://")) {
                return Err(bad(
                    &url.key,
                    format!("{http_url:?} must start with http:// (signal-cli's daemon --http)"),
                ));
            }
            let account_key = account.key.clone();
            let account = account.string()?;
            if !is_number(&account) {
                return Err(bad(
                    &account_key,
                    format!(
                        "{account:?} is not a number as Signal writes it (+ and digits, e.g. +15551234567)"
                    ),
                ));
            }
            let mut config = SignalConfig {
                http_url: http_url.trim_end_matches('/').to_owned(),
                account,
                allowed_users: HashSet::new(),
                home_channel: None,
                require_mention: true,
            };
            if let Some(v) = pick("SIGNAL_ALLOWED_USERS", "allowed_users") {
                // An empty item (`[""]`) means no one, as it always has.
                for user in v.list("strings")?.into_iter().filter(|u| !u.is_empty()) {
                    if !(is_number(&user) || is_uuid(&user) || user == "*") {
                        return Err(bad(
                            &v.key,
                            format!("{user:?} is neither a number (+15551234567) nor a UUID"),
                        ));
                    }
                    config.allowed_users.insert(user);
                }
            }
            if let Some(v) = pick("SIGNAL_HOME_CHANNEL", "home_channel") {
                let home = v.string()?;
                config.home_channel = Some(home).filter(|h| !h.is_empty());
            }
            if let Some(v) = pick("SIGNAL_REQUIRE_MENTION", "require_mention") {
                config.require_mention = v.boolean()?;
            }
            Ok(config)
        };
        Some(build())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn from(pairs: &[(&str, &str)], file: &str) -> Option<Result<SignalConfig, SignalConfigError>> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let file: toml::Table = toml::from_str(file).unwrap();
        SignalConfig::from_sources(
            &move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            },
            &file,
        )
    }

    #[test]
    fn disabled_unless_set_and_incomplete_settings_are_named() {
        assert!(from(&[], "").is_none());
        let e = from(&[("SIGNAL_HTTP_URL", "http://127.0.0.1:8080")], "")
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("SIGNAL_ACCOUNT"), "{e}");
        let e = from(
            &[
                ("SIGNAL_HTTP_URL", "127.0.0.1:8080"),
                ("SIGNAL_ACCOUNT", "+15550001"),
            ],
            "",
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("SIGNAL_HTTP_URL"), "{e}");
        let e = from(
            &[
                ("SIGNAL_HTTP_URL", "http://h"),
                ("SIGNAL_ACCOUNT", "15550001"),
            ],
            "",
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("SIGNAL_ACCOUNT"), "{e}");
    }

    #[test]
    fn variables_win_over_the_section_and_users_are_checked() {
        let c = from(
            &[("SIGNAL_ACCOUNT", "+15550001")],
            "[signal]\nhttp_url = \"http://127.0.0.1:8080/\"\naccount = \"+1999\"\nallowed_users = [\"+15550002\", \"0b7c2f1e-9d3a-4c5b-8e6f-1a2b3c4d5e6f\"]\nrequire_mention = false\nhome_channel = \"+15550002\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.http_url, "http://127.0.0.1:8080");
        assert_eq!(c.account, "+15550001");
        assert_eq!(c.allowed_users.len(), 2);
        assert!(!c.require_mention);
        assert_eq!(c.home_channel.as_deref(), Some("+15550002"));
        let e = from(
            &[
                ("SIGNAL_HTTP_URL", "http://h"),
                ("SIGNAL_ACCOUNT", "+15550001"),
                ("SIGNAL_ALLOWED_USERS", "alice"),
            ],
            "",
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("SIGNAL_ALLOWED_USERS"), "{e}");
        let e = from(
            &[
                ("SIGNAL_HTTP_URL", "http://h"),
                ("SIGNAL_ACCOUNT", "+15550001"),
                ("SIGNAL_REQUIRE_MENTION", "maybe"),
            ],
            "",
        )
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("SIGNAL_REQUIRE_MENTION"), "{e}");
    }
}
