//! The Discord settings: `DISCORD_*` variables and the `[discord]` section of
//! `config.toml` (a variable wins over the key), validated before anything
//! connects. Every error names the variable or key to fix.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use hermes_platform_kit::settings::{Setting, SettingError, Sources};
use hermes_runtime::secret::Secret;

/// The production REST base; the Gateway URL comes from `GET /gateway/bot`.
pub const DEFAULT_API_URL: &str = "https://discord.com/api/v10";

/// The Discord settings, with the timings tests shorten.
#[derive(Clone)]
pub struct DiscordConfig {
    /// The bot token (`DISCORD_BOT_TOKEN`). Never logged (a [`Secret`]).
    pub token: Secret,
    /// The REST base (`DISCORD_API_URL`), without a trailing slash.
    pub api_url: String,
    /// User ids allowed to talk to the bot (`DISCORD_ALLOWED_USERS`); the
    /// runner's allow-list enforces them, listed here for `--check`.
    pub allowed_users: Vec<String>,
    /// In a server channel, answer only messages that mention the bot or
    /// reply to it (`DISCORD_REQUIRE_MENTION`, default true). DMs always.
    pub require_mention: bool,
    /// Channels (or threads) where no mention is needed
    /// (`DISCORD_FREE_RESPONSE_CHANNELS`).
    pub free_response_channels: HashSet<String>,
    /// Where scheduled output goes (`DISCORD_HOME_CHANNEL`), if set.
    pub home_channel: Option<String>,
    /// How long opening the WebSocket, or one REST exchange, may take.
    pub connect_timeout: Duration,
    /// First reconnect delay after a failed connection; doubles (with
    /// jitter) up to `reconnect_max`.
    pub reconnect_base: Duration,
    /// Cap of the reconnect delay.
    pub reconnect_max: Duration,
    /// After INVALID_SESSION Discord asks for a wait of 1–5 s before the
    /// next IDENTIFY: the low and high end of that random wait.
    pub invalid_session_wait: (Duration, Duration),
    /// The longest rate-limit wait (`retry_after`) worth waiting out for one
    /// request; a longer one fails the request instead of hanging it.
    pub max_retry_after: Duration,
    /// How often a REST request is tried on 5xx or network errors.
    pub max_attempts: u32,
}

impl DiscordConfig {
    /// The production defaults with `token`.
    pub fn new(token: impl Into<String>) -> Self {
        DiscordConfig {
            token: Secret::new(token),
            api_url: DEFAULT_API_URL.to_owned(),
            allowed_users: Vec::new(),
            require_mention: true,
            free_response_channels: HashSet::new(),
            home_channel: None,
            connect_timeout: Duration::from_secs(15),
            reconnect_base: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(60),
            invalid_session_wait: (Duration::from_secs(1), Duration::from_secs(5)),
            max_retry_after: Duration::from_secs(300),
            max_attempts: 4,
        }
    }
}

impl fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &self.token)
            .field("api_url", &self.api_url)
            .field("allowed_users", &self.allowed_users)
            .field("require_mention", &self.require_mention)
            .field("free_response_channels", &self.free_response_channels)
            .field("home_channel", &self.home_channel)
            .finish_non_exhaustive()
    }
}

/// A Discord setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("discord: {key}: {message}")]
pub struct DiscordConfigError {
    /// The variable (`DISCORD_API_URL`) or key (`discord.api_url`) at fault.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> DiscordConfigError {
    DiscordConfigError {
        key: key.to_owned(),
        message: message.into(),
    }
}

impl From<SettingError> for DiscordConfigError {
    fn from(e: SettingError) -> Self {
        err(&e.key, e.message)
    }
}

/// Snowflake ids: a comma-separated string, or a TOML list of strings or
/// integers.
fn ids(setting: &Setting<'_>) -> Result<Vec<String>, DiscordConfigError> {
    let items = setting.list_with_numbers("ids")?;
    for id in &items {
        check_snowflake(&setting.key, id)?;
    }
    Ok(items)
}

/// Discord ids are decimal numbers ("snowflakes"); a name or a mention
/// there would never match anything.
fn check_snowflake(key: &str, id: &str) -> Result<(), DiscordConfigError> {
    if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(
            key,
            format!(
                "{id:?} is not a Discord id (a number such as 123456789012345678; \
                 Discord's developer mode shows it under \"Copy ID\")"
            ),
        ));
    }
    Ok(())
}

impl DiscordConfig {
    /// The settings from `env` and the `[discord]` table of `file`: `None`
    /// when no bot token is set (Discord disabled), an error for any value
    /// that cannot work.
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
    ) -> Option<Result<Self, DiscordConfigError>> {
        let sources = Sources::new(env, file, "discord");
        let pick = |var, key| sources.pick(var, key);
        let token = pick("DISCORD_BOT_TOKEN", "bot_token")?;
        let build = || -> Result<Self, DiscordConfigError> {
            let token_key = token.key.clone();
            let token = token.string()?;
            if token.is_empty()
                || token
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '/')
            {
                return Err(err(
                    &token_key,
                    "is not a bot token (the Developer Portal's Bot page shows it; no spaces)",
                ));
            }
            let mut config = DiscordConfig::new(token);
            if let Some(v) = pick("DISCORD_API_URL", "api_url") {
                let url = v.string()?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(err(
                        &v.key,
                        format!("{url:?} must start with http:// or https://"),
                    ));
                }
                config.api_url = url.trim_end_matches('/').to_owned();
            }
            if let Some(v) = pick("DISCORD_ALLOWED_USERS", "allowed_users") {
                config.allowed_users = ids(&v)?;
            }
            if let Some(v) = pick("DISCORD_REQUIRE_MENTION", "require_mention") {
                config.require_mention = v.boolean()?;
            }
            if let Some(v) = pick("DISCORD_FREE_RESPONSE_CHANNELS", "free_response_channels") {
                config.free_response_channels = ids(&v)?.into_iter().collect();
            }
            if let Some(v) = pick("DISCORD_HOME_CHANNEL", "home_channel") {
                let id = v.string()?;
                check_snowflake(&v.key, &id)?;
                config.home_channel = Some(id);
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

    fn parse(
        toml_src: &str,
        env: &[(&str, &str)],
    ) -> Option<Result<DiscordConfig, DiscordConfigError>> {
        let file: toml::Table = toml_src.parse().unwrap();
        let lookup = |k: &str| {
            env.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        };
        DiscordConfig::from_sources(&lookup, &file)
    }

    #[test]
    fn no_token_means_discord_is_off() {
        assert!(parse("", &[]).is_none());
        assert!(parse("", &[("DISCORD_BOT_TOKEN", "  ")]).is_none());
        assert!(parse("[discord]\nrequire_mention = false", &[]).is_none());
    }

    #[test]
    fn defaults_and_every_setting_from_the_environment() {
        let c = parse("", &[("DISCORD_BOT_TOKEN", "abc.def.ghi")])
            .unwrap()
            .unwrap();
        assert_eq!(c.api_url, DEFAULT_API_URL);
        assert!(c.require_mention, "mentions are required by default");
        assert!(c.free_response_channels.is_empty() && c.home_channel.is_none());
        let c = parse(
            "",
            &[
                ("DISCORD_BOT_TOKEN", "abc.def.ghi"),
                ("DISCORD_API_URL", "http://127.0.0.1:9/api/v10/"),
                ("DISCORD_ALLOWED_USERS", "111, 222"),
                ("DISCORD_REQUIRE_MENTION", "false"),
                ("DISCORD_FREE_RESPONSE_CHANNELS", "333,444"),
                ("DISCORD_HOME_CHANNEL", "555"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.api_url, "http://127.0.0.1:9/api/v10");
        assert_eq!(c.allowed_users, ["111", "222"]);
        assert!(!c.require_mention);
        assert!(c.free_response_channels.contains("444"));
        assert_eq!(c.home_channel.as_deref(), Some("555"));
        assert!(
            !format!("{c:?}").contains("abc.def.ghi"),
            "the token is never shown"
        );
    }

    #[test]
    fn the_discord_section_and_the_environment_winning() {
        let file = "[discord]\nbot_token = \"t.o.k\"\nallowed_users = [111, \"222\"]\n\
                    require_mention = false\nfree_response_channels = \"9\"\nhome_channel = \"8\"";
        let c = parse(file, &[]).unwrap().unwrap();
        assert_eq!(c.token.expose(), "t.o.k");
        assert_eq!(c.allowed_users, ["111", "222"]);
        assert!(!c.require_mention);
        assert_eq!(c.home_channel.as_deref(), Some("8"));
        let c = parse(
            file,
            &[
                ("DISCORD_REQUIRE_MENTION", "yes"),
                ("DISCORD_BOT_TOKEN", "e.n.v"),
            ],
        )
        .unwrap()
        .unwrap();
        assert!(c.require_mention);
        assert_eq!(c.token.expose(), "e.n.v");
    }

    #[test]
    fn errors_name_the_setting() {
        let token = ("DISCORD_BOT_TOKEN", "abc");
        let e = parse("", &[token, ("DISCORD_API_URL", "discord.com")])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "DISCORD_API_URL");
        let e = parse("", &[token, ("DISCORD_ALLOWED_USERS", "1,@bob")])
            .unwrap()
            .unwrap_err();
        assert!(
            e.key == "DISCORD_ALLOWED_USERS" && e.message.contains("@bob"),
            "{e}"
        );
        let e = parse("", &[token, ("DISCORD_REQUIRE_MENTION", "maybe")])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "DISCORD_REQUIRE_MENTION");
        let e = parse("", &[token, ("DISCORD_HOME_CHANNEL", "#general")])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "DISCORD_HOME_CHANNEL");
        let e = parse("[discord]\nrequire_mention = \"no\"", &[token])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "discord.require_mention");
        let e = parse("", &[("DISCORD_BOT_TOKEN", "has space")])
            .unwrap()
            .unwrap_err();
        assert!(
            !e.to_string().contains("has space"),
            "the token is never echoed: {e}"
        );
    }
}
