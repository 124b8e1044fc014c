//! The environment hermes reads its settings from: a snapshot of the
//! variables ([`Environment`]), the names hermes reads ([`KNOWN_VARS`]) and
//! which of them carry its own credentials ([`is_hermes_credential`]) — what
//! the configuration loader, the sandbox and the MCP launcher all need,
//! without any of them reaching into another.

use std::collections::BTreeMap;
use std::fmt;

/// A snapshot of environment variables (the process's, or a test's).
/// `Debug` shows the names, never the values: the environment holds keys
/// and passwords of every kind, hermes's own and others'.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment(pub(crate) BTreeMap<String, String>);

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Environment")
            .field(&self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Environment {
    /// The current process environment (variables that are not UTF-8 are skipped).
    pub fn from_process() -> Self {
        Environment(std::env::vars().collect())
    }

    /// The process's variables among `names` (those that are UTF-8): for
    /// a caller that reads a few, without copying the whole environment.
    pub fn of_process(names: &[&str]) -> Self {
        // Inserted one by one: `collect` into a map sorts first, and that
        // sort's code for these pairs cost ≈ 4 KB of binary.
        let mut vars = BTreeMap::new();
        for &name in names {
            if let Ok(value) = std::env::var(name) {
                vars.insert(name.to_owned(), value);
            }
        }
        Environment(vars)
    }

    /// An environment made of `pairs`.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Environment(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// The value of `name`, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// All variables.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Environment variables hermes reads (from the process or `.env`). Names
/// with a prefix the configuration loader owns (`HERMES_`) must be in this
/// list. A platform's variables are those of its descriptor in
/// `hermes_gateway::platform`, whose tests fail when the two differ (this
/// list stays here: every command and the sandbox read it, gateway or not).
pub const KNOWN_VARS: &[&str] = &[
    "HERMES_HOME",
    "HERMES_BASE_URL",
    "HERMES_API_KEY",
    "HERMES_MODEL",
    "HERMES_MAX_ITERATIONS",
    "HERMES_TEXT_TOOL_CALLS",
    "HERMES_TOOLSETS",
    "HERMES_MEMORY_OWNER",
    "HERMES_LIMIT_USER_DAY_TOKENS",
    "HERMES_LIMIT_USER_MONTH_TOKENS",
    "HERMES_LIMIT_USER_DAY_USD",
    "HERMES_LIMIT_USER_MONTH_USD",
    "HERMES_LIMIT_BOT_DAY_USD",
    "HERMES_LIMIT_BOT_MONTH_USD",
    "HERMES_CONTEXT_LENGTH",
    "HERMES_COMPRESSION_MODEL",
    "HERMES_COMPRESS_THRESHOLD",
    "HERMES_FIRST_BYTE_TIMEOUT",
    "HERMES_CALL_TIMEOUT",
    "HERMES_DATABASE_URL",
    "HERMES_VISION",
    "HERMES_VISION_MODEL",
    "HERMES_TRANSCRIPTION_BASE_URL",
    "HERMES_TRANSCRIPTION_API_KEY",
    "HERMES_TRANSCRIPTION_MODEL",
    "HERMES_TTS_BASE_URL",
    "HERMES_TTS_API_KEY",
    "HERMES_REASONING_EFFORT",
    "HERMES_FALLBACK_MODEL",
    "HERMES_FALLBACK_BASE_URL",
    "HERMES_FALLBACK_API_KEY",
    "HERMES_FALLBACK_API",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "GATEWAY_ALLOWED_USERS",
    "GATEWAY_ALLOW_ALL_USERS",
    "GATEWAY_BUSY_MODE",
    "GATEWAY_GROUP_SESSIONS_PER_USER",
    "GATEWAY_IDLE_RESET_HOURS",
    "GATEWAY_DAILY_RESET_HOUR",
    "GATEWAY_UTC_OFFSET_MINUTES",
    "GATEWAY_MAX_WORKERS",
    "GATEWAY_AGENT_CACHE_SIZE",
    "GATEWAY_AGENT_CACHE_IDLE_SECS",
    "GATEWAY_DEDUP_WINDOW_SECS",
    "GATEWAY_DEDUP_CAPACITY",
    "GATEWAY_MAX_QUEUED",
    "GATEWAY_MAX_REPLY_MESSAGES",
    "GATEWAY_DEDUP_RETENTION_HOURS",
    "GATEWAY_LEASE_TTL_MS",
    "GATEWAY_STREAM_REPLIES",
    "GATEWAY_MAX_FILE_MB",
    "GATEWAY_VOICE_REPLIES",
    "MATRIX_HOMESERVER",
    "MATRIX_USER_ID",
    "MATRIX_PASSWORD",
    "MATRIX_ACCESS_TOKEN",
    "MATRIX_ALLOWED_USERS",
    "MATRIX_REQUIRE_MENTION",
    "MATRIX_ALLOWED_ROOMS",
    "MATRIX_HOME_ROOM",
    "SIGNAL_HTTP_URL",
    "SIGNAL_ACCOUNT",
    "SIGNAL_ALLOWED_USERS",
    "SIGNAL_HOME_CHANNEL",
    "SIGNAL_REQUIRE_MENTION",
    "EMAIL_ADDRESS",
    "EMAIL_PASSWORD",
    "EMAIL_IMAP_HOST",
    "EMAIL_IMAP_PORT",
    "EMAIL_IMAP_SECURITY",
    "EMAIL_SMTP_HOST",
    "EMAIL_SMTP_PORT",
    "EMAIL_SMTP_SECURITY",
    "EMAIL_ALLOWED_USERS",
    "EMAIL_POLL_INTERVAL",
    "EMAIL_HOME_ADDRESS",
    "GATEWAY_PAIRING",
    "GATEWAY_LOG_FORMAT",
    "GATEWAY_METRICS_PORT",
    "HERMES_LOG",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_ALLOWED_USERS",
    "TELEGRAM_API_URL",
    "TELEGRAM_GROUP_POLICY",
    "TELEGRAM_POLL_TIMEOUT",
    "DISCORD_BOT_TOKEN",
    "DISCORD_ALLOWED_USERS",
    "DISCORD_REQUIRE_MENTION",
    "DISCORD_FREE_RESPONSE_CHANNELS",
    "DISCORD_HOME_CHANNEL",
    "DISCORD_API_URL",
    "WECOM_BOT_ID",
    "WECOM_SECRET",
    "WECOM_ALLOWED_USERS",
    "WECOM_WS_URL",
    "WECOM_CALLBACK_AGENT_ID",
    "WECOM_CALLBACK_ALLOWED_USERS",
    "WECOM_CALLBACK_API_URL",
    "WECOM_CALLBACK_CORP_ID",
    "WECOM_CALLBACK_CORP_SECRET",
    "WECOM_CALLBACK_ENCODING_AES_KEY",
    "WECOM_CALLBACK_HOST",
    "WECOM_CALLBACK_MESSAGE_FORMAT",
    "WECOM_CALLBACK_PATH",
    "WECOM_CALLBACK_PORT",
    "WECOM_CALLBACK_REPLAY_WINDOW_SECS",
    "WECOM_CALLBACK_TOKEN",
    "WHATSAPP_ACCESS_TOKEN",
    "WHATSAPP_PHONE_NUMBER_ID",
    "WHATSAPP_APP_SECRET",
    "WHATSAPP_VERIFY_TOKEN",
    "WHATSAPP_ALLOWED_USERS",
    "WHATSAPP_API_URL",
    "WHATSAPP_WEBHOOK_HOST",
    "WHATSAPP_WEBHOOK_PORT",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_ALLOWED_USERS",
    "SLACK_HOME_CHANNEL",
    "SLACK_REQUIRE_MENTION",
    "SLACK_API_URL",
    "API_SERVER_ENABLED",
    "API_SERVER_HOST",
    "API_SERVER_PORT",
    "API_SERVER_KEY",
    "API_SERVER_MODEL_NAME",
    "API_SERVER_CORS_ORIGINS",
    "API_SERVER_MAX_CONCURRENT",
    "WEBHOOK_HOST",
    "WEBHOOK_PORT",
    "BRAVE_API_KEY",
    "TAVILY_API_KEY",
    "SEARXNG_URL",
    // Home channels of scheduled jobs' deliveries (SPEC Y2).
    "TELEGRAM_HOME_CHANNEL",
    "WECOM_HOME_CHANNEL",
    "DISCORD_HOME_CHANNEL",
    "WHATSAPP_HOME_CHANNEL",
];

/// Whether `name` is one of the variables hermes reads its own credentials
/// from: a key, token, secret or password, or a URL (which may carry a password, as
/// `HERMES_DATABASE_URL` and a `user:pass@` base URL do).
pub fn is_hermes_credential(name: &str) -> bool {
    KNOWN_VARS.contains(&name)
        && ["_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_URL"]
            .iter()
            .any(|end| name.ends_with(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_process_reads_the_named_variables_as_from_process_does() {
        let all = Environment::from_process();
        let named = ["PATH", "HOME", "HERMES_TEST_SURELY_UNSET_7F3A"];
        let some = Environment::of_process(&named);
        for name in named {
            assert_eq!(some.get(name), all.get(name), "{name}");
        }
        assert!(some.iter().all(|(k, _)| named.contains(&k)));
        assert!(some.get("HERMES_TEST_SURELY_UNSET_7F3A").is_none());
    }

    #[test]
    fn hermes_own_credentials_are_recognised() {
        for name in [
            "ANTHROPIC_API_KEY",
            "WECOM_SECRET",
            "WECOM_CALLBACK_TOKEN",
            "SEARXNG_URL",
            "MATRIX_ACCESS_TOKEN",
            // Found adding Matrix: a password variable did not end in one of
            // the credential suffixes, so `env_passthrough = ["MATRIX_*"]`
            // would have handed the bot's password to every command.
            "MATRIX_PASSWORD",
            "EMAIL_PASSWORD",
        ] {
            assert!(is_hermes_credential(name), "{name}");
        }
        for name in [
            "HERMES_MODEL",
            "EDITOR",
            "OPENAI_ORG_HINT",
            "GATEWAY_MAX_WORKERS",
        ] {
            assert!(!is_hermes_credential(name), "{name}");
        }
    }
}
