//! The Slack settings: `SLACK_*` variables and the `[slack]` section of
//! `config.toml` (a variable wins over the key), checked before anything
//! connects. Every error names the variable or key to fix.

use std::fmt;
use std::time::Duration;

use hermes_platform_kit::settings::{Setting, SettingError, Sources};
use hermes_runtime::secret::Secret;

/// The production Web API base (`SLACK_API_URL` replaces it).
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// The Slack settings, with the timings tests shorten.
#[derive(Clone)]
pub struct SlackConfig {
    /// The bot token (`SLACK_BOT_TOKEN`, `xoxb-…`): the Web API.
    pub bot_token: Secret,
    /// The app-level token (`SLACK_APP_TOKEN`, `xapp-…`, scope
    /// `connections:write`): `apps.connections.open` only.
    pub app_token: Secret,
    /// The Web API base (`SLACK_API_URL`), without a trailing slash.
    pub api_url: String,
    /// Member ids allowed to talk to the bot (`SLACK_ALLOWED_USERS`); the
    /// runner's allow-list enforces them.
    pub allowed_users: Vec<String>,
    /// In channels, answer only messages that mention the bot
    /// (`SLACK_REQUIRE_MENTION`, default true). DMs always.
    pub require_mention: bool,
    /// Where scheduled output goes (`SLACK_HOME_CHANNEL`), if set.
    pub home_channel: Option<String>,
    /// How long one Web API exchange or opening the socket may take.
    pub connect_timeout: Duration,
    /// First reconnect delay after a failed connection; doubles up to
    /// `reconnect_max`.
    pub reconnect_base: Duration,
    /// Cap of the reconnect delay.
    pub reconnect_max: Duration,
    /// The longest `Retry-After` worth waiting out for one request.
    pub max_retry_after: Duration,
    /// How often a request is tried on 5xx or network errors.
    pub max_attempts: u32,
}

impl SlackConfig {
    /// The production defaults with the two tokens.
    pub fn new(bot_token: impl Into<String>, app_token: impl Into<String>) -> Self {
        SlackConfig {
            bot_token: Secret::new(bot_token),
            app_token: Secret::new(app_token),
            api_url: DEFAULT_API_URL.to_owned(),
            allowed_users: Vec::new(),
            require_mention: true,
            home_channel: None,
            connect_timeout: Duration::from_secs(15),
            reconnect_base: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(300),
            max_attempts: 4,
        }
    }
}

impl fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackConfig")
            .field("bot_token", &self.bot_token)
            .field("app_token", &self.app_token)
            .field("api_url", &self.api_url)
            .field("allowed_users", &self.allowed_users)
            .field("require_mention", &self.require_mention)
            .field("home_channel", &self.home_channel)
            .finish_non_exhaustive()
    }
}

/// A Slack setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("slack: {key}: {message}")]
pub struct SlackConfigError {
    /// The variable (`SLACK_APP_TOKEN`) or key (`slack.app_token`) at fault.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> SlackConfigError {
    SlackConfigError {
        key: key.to_owned(),
        message: message.into(),
    }
}

impl From<SettingError> for SlackConfigError {
    fn from(e: SettingError) -> Self {
        err(&e.key, e.message)
    }
}

/// Member ids: a comma-separated string or a TOML list, each checked.
fn member_ids(setting: &Setting<'_>) -> Result<Vec<String>, SlackConfigError> {
    let items = setting.list("member ids")?;
    for id in &items {
        check_id(
            &setting.key,
            id,
            "a member id such as U012AB3CD (profile → ⋮ → Copy member ID)",
        )?;
    }
    Ok(items)
}

/// Slack ids are upper-case letters and digits (`U012AB3CD`, `C0123`).
fn check_id(key: &str, id: &str, what: &str) -> Result<(), SlackConfigError> {
    if id.len() < 2
        || id.len() > 32
        || !id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Err(err(key, format!("{id:?} is not {what}")));
    }
    Ok(())
}

fn check_token(key: &str, token: &str, prefix: &str, what: &str) -> Result<(), SlackConfigError> {
    if !token.starts_with(prefix)
        || token
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(err(
            key,
            format!("is not {what} (it starts with `{prefix}`; no spaces)"),
        ));
    }
    Ok(())
}

impl SlackConfig {
    /// The settings from `env` and the `[slack]` table of `file`: `None`
    /// when neither token is set (Slack disabled), an error for any value
    /// that cannot work — one token without the other included.
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
    ) -> Option<Result<Self, SlackConfigError>> {
        let sources = Sources::new(env, file, "slack");
        let pick = |var, key| sources.pick(var, key);
        let bot = pick("SLACK_BOT_TOKEN", "bot_token");
        let app = pick("SLACK_APP_TOKEN", "app_token");
        if bot.is_none() && app.is_none() {
            return None;
        }
        let build = || -> Result<Self, SlackConfigError> {
            let bot = bot.ok_or_else(|| {
                err(
                    "SLACK_BOT_TOKEN",
                    "is not set, but SLACK_APP_TOKEN is: Slack needs both (OAuth & Permissions → Bot User OAuth Token, xoxb-…)",
                )
            })?;
            let app = app.ok_or_else(|| {
                err(
                    "SLACK_APP_TOKEN",
                    "is not set, but SLACK_BOT_TOKEN is: Socket Mode needs an app-level token (Basic Information → App-Level Tokens, scope connections:write, xapp-…)",
                )
            })?;
            let bot_token = bot.string()?;
            check_token(&bot.key, &bot_token, "xoxb-", "a bot token")?;
            let app_token = app.string()?;
            check_token(&app.key, &app_token, "xapp-", "an app-level token")?;
            let mut config = SlackConfig::new(bot_token, app_token);
            if let Some(setting) = pick("SLACK_API_URL", "api_url") {
                let url = setting.string()?;
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(err(
                        &setting.key,
                        "must be an http(s) URL such as https://slack.com/api",
                    ));
                }
                config.api_url = url.trim_end_matches('/').to_owned();
            }
            if let Some(setting) = pick("SLACK_ALLOWED_USERS", "allowed_users") {
                config.allowed_users = member_ids(&setting)?;
            }
            if let Some(setting) = pick("SLACK_REQUIRE_MENTION", "require_mention") {
                config.require_mention = setting.boolean()?;
            }
            if let Some(setting) = pick("SLACK_HOME_CHANNEL", "home_channel") {
                let channel = setting.string()?;
                if !channel.is_empty() {
                    check_id(
                        &setting.key,
                        &channel,
                        "a channel id such as C0123ABCD (channel details → bottom)",
                    )?;
                    config.home_channel = Some(channel);
                }
            }
            Ok(config)
        };
        Some(build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)], file: &str) -> Option<Result<SlackConfig, SlackConfigError>> {
        let table: toml::Table = toml::from_str(file).unwrap_or_default();
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        SlackConfig::from_sources(&env, &table)
    }

    #[test]
    fn nothing_set_means_disabled() {
        assert!(from(&[], "").is_none());
    }

    #[test]
    fn both_tokens_and_the_rest_from_variables_or_the_file() {
        let config = from(
            &[("SLACK_BOT_TOKEN", "xoxb-1-2-abc"), ("SLACK_ALLOWED_USERS", "U1, U2")],
            "[slack]\napp_token = \"xapp-1-A1-2-def\"\nrequire_mention = false\nhome_channel = \"C9\"\n",
        )
        .and_then(Result::ok)
        .map(|c| (c.allowed_users, c.require_mention, c.home_channel, c.api_url));
        assert_eq!(
            config,
            Some((
                vec!["U1".to_owned(), "U2".to_owned()],
                false,
                Some("C9".to_owned()),
                DEFAULT_API_URL.to_owned()
            ))
        );
    }

    #[test]
    fn bad_values_name_their_setting_and_keep_the_secret_out() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("SLACK_BOT_TOKEN", "xoxb-1")], "SLACK_APP_TOKEN"),
            (&[("SLACK_APP_TOKEN", "xapp-1")], "SLACK_BOT_TOKEN"),
            (
                &[
                    ("SLACK_BOT_TOKEN", "xoxp-user-secret"),
                    ("SLACK_APP_TOKEN", "xapp-1"),
                ],
                "SLACK_BOT_TOKEN",
            ),
            (
                &[("SLACK_BOT_TOKEN", "xoxb-1"), ("SLACK_APP_TOKEN", "xoxb-2")],
                "SLACK_APP_TOKEN",
            ),
            (
                &[
                    ("SLACK_BOT_TOKEN", "xoxb-1"),
                    ("SLACK_APP_TOKEN", "xapp-1"),
                    ("SLACK_ALLOWED_USERS", "@alice"),
                ],
                "SLACK_ALLOWED_USERS",
            ),
            (
                &[
                    ("SLACK_BOT_TOKEN", "xoxb-1"),
                    ("SLACK_APP_TOKEN", "xapp-1"),
                    ("SLACK_REQUIRE_MENTION", "maybe"),
                ],
                "SLACK_REQUIRE_MENTION",
            ),
            (
                &[
                    ("SLACK_BOT_TOKEN", "xoxb-1"),
                    ("SLACK_APP_TOKEN", "xapp-1"),
                    ("SLACK_HOME_CHANNEL", "#general"),
                ],
                "SLACK_HOME_CHANNEL",
            ),
            (
                &[
                    ("SLACK_BOT_TOKEN", "xoxb-1"),
                    ("SLACK_APP_TOKEN", "xapp-1"),
                    ("SLACK_API_URL", "slack.com"),
                ],
                "SLACK_API_URL",
            ),
        ];
        for (vars, key) in cases {
            let e = from(vars, "").and_then(Result::err);
            let e = e.map(|e| (e.key.clone(), e.to_string()));
            assert!(
                e.as_ref()
                    .is_some_and(|(k, text)| k == key && !text.contains("secret")),
                "{vars:?} → {e:?}"
            );
        }
    }
}
