//! Settings of the callback adapter, and reading them from the environment
//! with the names hermes-agent uses (so its users can switch).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hermes_core::Clock;
use hermes_runtime::secret::Secret;

use super::api::MessageFormat;
use super::crypto::{self, CryptoError};

/// The production qyapi endpoint.
pub const DEFAULT_API_URL: &str = "https://qyapi.weixin.qq.com";
/// The default listening port (hermes-agent's).
pub const DEFAULT_PORT: u16 = 8645;
/// The default callback path.
pub const DEFAULT_PATH: &str = "/wecom/callback";
/// The default replay window: how far a request's timestamp may be from now.
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(300);

/// The variables that must all be set (any one of them enables the adapter).
pub const REQUIRED_VARS: [&str; 5] = [
    "WECOM_CALLBACK_CORP_ID",
    "WECOM_CALLBACK_CORP_SECRET",
    "WECOM_CALLBACK_AGENT_ID",
    "WECOM_CALLBACK_TOKEN",
    "WECOM_CALLBACK_ENCODING_AES_KEY",
];

/// Settings of [`super::WecomCallbackAdapter`]. Timings are fields so tests
/// can shorten them. The app's secret, token and key are [`Secret`]s:
/// `Debug` masks them.
#[derive(Clone)]
pub struct WecomCallbackConfig {
    /// The corp id (`WECOM_CALLBACK_CORP_ID`), checked inside every message.
    pub corp_id: String,
    /// The app's secret (`WECOM_CALLBACK_CORP_SECRET`). Never logged.
    pub corp_secret: Secret,
    /// The app's agent id (`WECOM_CALLBACK_AGENT_ID`).
    pub agent_id: i64,
    /// The callback token (`WECOM_CALLBACK_TOKEN`). Never logged.
    pub token: Secret,
    /// The EncodingAESKey (`WECOM_CALLBACK_ENCODING_AES_KEY`). Never logged.
    pub encoding_aes_key: Secret,
    /// The listening address (`WECOM_CALLBACK_HOST`, `WECOM_CALLBACK_PORT`).
    pub listen: SocketAddr,
    /// The callback path (`WECOM_CALLBACK_PATH`).
    pub path: String,
    /// The qyapi base URL (`WECOM_CALLBACK_API_URL`).
    pub api_url: String,
    /// How far a request's timestamp may be from now
    /// (`WECOM_CALLBACK_REPLAY_WINDOW_SECS`); `None` = not checked.
    pub replay_window: Option<Duration>,
    /// `text` or `markdown` replies (`WECOM_CALLBACK_MESSAGE_FORMAT`).
    pub message_format: MessageFormat,
    /// The largest callback body accepted (callbacks are a few KB).
    pub max_body_bytes: usize,
    /// The largest media file `media/get` downloads.
    pub max_media_bytes: usize,
    /// How long a `MsgId` is remembered (WeCom retries for ~15 s).
    pub dedup_window: Duration,
    /// How many `MsgId`s are remembered.
    pub dedup_capacity: usize,
    /// One qyapi request's deadline.
    pub api_timeout: Duration,
    /// Attempts of a qyapi call that failed with busy/5xx/network errors.
    pub api_max_attempts: u32,
    /// The first retry delay of a qyapi call.
    pub api_backoff: Duration,
    /// Deadline for a request's head.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long stopping waits for callbacks in flight.
    pub shutdown_grace: Duration,
    /// The time source (token expiry, replay window).
    pub clock: Arc<dyn Clock>,
}

impl WecomCallbackConfig {
    /// Production defaults for everything but the app's credentials.
    pub fn new(
        corp_id: impl Into<String>,
        corp_secret: impl Into<Secret>,
        agent_id: i64,
        token: impl Into<Secret>,
        encoding_aes_key: impl Into<Secret>,
    ) -> Self {
        Self {
            corp_id: corp_id.into(),
            corp_secret: corp_secret.into(),
            agent_id,
            token: token.into(),
            encoding_aes_key: encoding_aes_key.into(),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DEFAULT_PORT),
            path: DEFAULT_PATH.to_owned(),
            api_url: DEFAULT_API_URL.to_owned(),
            replay_window: Some(DEFAULT_REPLAY_WINDOW),
            message_format: MessageFormat::Text,
            max_body_bytes: 64 * 1024,
            max_media_bytes: 20 * 1024 * 1024,
            dedup_window: Duration::from_secs(300),
            dedup_capacity: 4096,
            api_timeout: Duration::from_secs(20),
            api_max_attempts: 3,
            api_backoff: Duration::from_millis(500),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(3),
            clock: Arc::new(hermes_runtime::store::SystemClock),
        }
    }

    /// Checks everything that can be checked without the network.
    pub fn validate(&self) -> Result<(), WecomCallbackConfigError> {
        crypto::decode_key(self.encoding_aes_key.expose())
            .map_err(WecomCallbackConfigError::Key)?;
        let invalid = |name, problem: &str, value: &str| {
            Err(WecomCallbackConfigError::Invalid {
                name,
                problem: problem.to_owned(),
                value: value.to_owned(),
            })
        };
        if self.corp_id.is_empty() || self.corp_id.contains(char::is_whitespace) {
            return invalid(
                "WECOM_CALLBACK_CORP_ID",
                "must be the corp id (no spaces)",
                &self.corp_id,
            );
        }
        // WeCom's own rule for the token: 3–32 letters or digits.
        let token = self.token.expose();
        let token_ok =
            (3..=32).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_alphanumeric());
        if !token_ok {
            // The value is a secret: not shown.
            return invalid(
                "WECOM_CALLBACK_TOKEN",
                "must be the 3–32 letters or digits from the app's \"receive messages\" settings",
                "<redacted>",
            );
        }
        if self.corp_secret.is_empty() {
            return invalid("WECOM_CALLBACK_CORP_SECRET", "must not be empty", "");
        }
        if !(self.api_url.starts_with("http://") || self.api_url.starts_with("https://")) {
            return invalid(
                "WECOM_CALLBACK_API_URL",
                "must start with http:// or https://",
                &self.api_url,
            );
        }
        if !self.path.starts_with('/') || self.path.contains(['?', '#', ' ']) {
            return invalid(
                "WECOM_CALLBACK_PATH",
                "must be a path starting with /",
                &self.path,
            );
        }
        Ok(())
    }
}

/// Written out because the clock has no `Debug`; the secrets mask
/// themselves.
impl std::fmt::Debug for WecomCallbackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WecomCallbackConfig")
            .field("corp_id", &self.corp_id)
            .field("corp_secret", &self.corp_secret)
            .field("agent_id", &self.agent_id)
            .field("token", &self.token)
            .field("encoding_aes_key", &self.encoding_aes_key)
            .field("listen", &self.listen)
            .field("path", &self.path)
            .field("api_url", &self.api_url)
            .field("replay_window", &self.replay_window)
            .field("message_format", &self.message_format)
            .finish_non_exhaustive()
    }
}

/// A callback setting that cannot work. Found before anything listens; not
/// retryable: fix the environment.
#[derive(Debug, thiserror::Error)]
pub enum WecomCallbackConfigError {
    /// Some of the required variables are set, these are not.
    #[error(
        "wecom_callback: {} not set (WECOM_CALLBACK_CORP_ID, WECOM_CALLBACK_CORP_SECRET, WECOM_CALLBACK_AGENT_ID, WECOM_CALLBACK_TOKEN and WECOM_CALLBACK_ENCODING_AES_KEY are all needed)",
        .0.join(", ")
    )]
    Missing(Vec<&'static str>),
    /// The EncodingAESKey is unusable (the message names the variable).
    #[error("wecom_callback: {0}")]
    Key(CryptoError),
    /// A variable has a value that cannot work.
    #[error("wecom_callback: {name} {problem}, got {value:?}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// What it must be.
        problem: String,
        /// What it is (`<redacted>` for secrets).
        value: String,
    },
}

/// Reads the configuration: `None` when none of [`REQUIRED_VARS`] is set
/// (the adapter is off), an error naming the variable when something is
/// missing or invalid.
pub fn from_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Result<WecomCallbackConfig, WecomCallbackConfigError>> {
    let get = |k: &str| {
        env(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let values: Vec<Option<String>> = REQUIRED_VARS.iter().map(|k| get(k)).collect();
    if values.iter().all(Option::is_none) {
        return None;
    }
    Some(read(&get, values))
}

fn read(
    get: &dyn Fn(&str) -> Option<String>,
    values: Vec<Option<String>>,
) -> Result<WecomCallbackConfig, WecomCallbackConfigError> {
    let missing: Vec<&'static str> = REQUIRED_VARS
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| *k)
        .collect();
    if !missing.is_empty() {
        return Err(WecomCallbackConfigError::Missing(missing));
    }
    let mut it = values.into_iter().flatten();
    let (Some(corp_id), Some(secret), Some(agent), Some(token), Some(key)) =
        (it.next(), it.next(), it.next(), it.next(), it.next())
    else {
        return Err(WecomCallbackConfigError::Missing(REQUIRED_VARS.to_vec()));
    };
    let invalid = |name, problem: &str, value: &str| WecomCallbackConfigError::Invalid {
        name,
        problem: problem.to_owned(),
        value: value.to_owned(),
    };
    let agent_id: i64 = agent.parse().map_err(|_| {
        invalid(
            "WECOM_CALLBACK_AGENT_ID",
            "must be the app's numeric AgentId",
            &agent,
        )
    })?;
    let mut config = WecomCallbackConfig::new(corp_id, secret, agent_id, token, key);
    let host = match get("WECOM_CALLBACK_HOST") {
        None => config.listen.ip(),
        Some(h) if h.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| {
                invalid(
                    "WECOM_CALLBACK_HOST",
                    "must be an IP address to listen on (0.0.0.0, ::, 127.0.0.1, …)",
                    &h,
                )
            })?,
    };
    let port = match get("WECOM_CALLBACK_PORT") {
        None => DEFAULT_PORT,
        Some(p) => p
            .parse()
            .map_err(|_| invalid("WECOM_CALLBACK_PORT", "must be a port number (0–65535)", &p))?,
    };
    config.listen = SocketAddr::new(host, port);
    if let Some(path) = get("WECOM_CALLBACK_PATH") {
        config.path = path;
    }
    if let Some(url) = get("WECOM_CALLBACK_API_URL") {
        config.api_url = url;
    }
    if let Some(w) = get("WECOM_CALLBACK_REPLAY_WINDOW_SECS") {
        config.replay_window = match w.to_ascii_lowercase().as_str() {
            "off" | "false" | "none" => None,
            _ => Some(Duration::from_secs(
                w.parse::<u64>()
                    .ok()
                    .filter(|s| (1..=86_400).contains(s))
                    .ok_or_else(|| {
                        invalid(
                            "WECOM_CALLBACK_REPLAY_WINDOW_SECS",
                            "must be seconds (1–86400) or \"off\"",
                            &w,
                        )
                    })?,
            )),
        };
    }
    if let Some(f) = get("WECOM_CALLBACK_MESSAGE_FORMAT") {
        config.message_format = match f.to_ascii_lowercase().as_str() {
            "text" => MessageFormat::Text,
            "markdown" => MessageFormat::Markdown,
            _ => {
                return Err(invalid(
                    "WECOM_CALLBACK_MESSAGE_FORMAT",
                    "must be \"text\" or \"markdown\"",
                    &f,
                ));
            }
        };
    }
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    const FULL: [(&str, &str); 5] = [
        ("WECOM_CALLBACK_CORP_ID", "ww1436e0e65a779aee"),
        ("WECOM_CALLBACK_CORP_SECRET", "secret"),
        ("WECOM_CALLBACK_AGENT_ID", "1000002"),
        ("WECOM_CALLBACK_TOKEN", "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo"),
        ("WECOM_CALLBACK_ENCODING_AES_KEY", KEY),
    ];

    #[test]
    fn off_when_nothing_is_set_and_defaults_otherwise() {
        assert!(from_env(&env(&[])).is_none());
        let c = from_env(&env(&FULL)).unwrap().unwrap();
        assert_eq!(c.listen, "0.0.0.0:8645".parse().unwrap());
        assert_eq!(c.path, "/wecom/callback");
        assert_eq!(c.api_url, "https://qyapi.weixin.qq.com");
        assert_eq!(c.agent_id, 1000002);
        assert_eq!(c.replay_window, Some(Duration::from_secs(300)));
        assert_eq!(c.message_format, MessageFormat::Text);
        let d = format!("{c:?}");
        assert!(!d.contains(KEY) && !d.contains("hJqcu3"), "{d}");
    }

    #[test]
    fn debug_masks_the_secret_the_token_and_the_key() {
        const SECRET: &str = "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7sU9w";
        let pairs: Vec<(&str, &str)> = FULL
            .iter()
            .map(|&(k, v)| {
                (
                    k,
                    if k == "WECOM_CALLBACK_CORP_SECRET" {
                        SECRET
                    } else {
                        v
                    },
                )
            })
            .collect();
        let c = from_env(&env(&pairs)).unwrap().unwrap();
        assert_eq!(c.corp_secret.expose(), SECRET);
        let api = crate::api::ApiConfig {
            base_url: c.api_url.clone(),
            corp_id: c.corp_id.clone(),
            corp_secret: c.corp_secret.clone(),
            agent_id: c.agent_id,
            timeout: c.api_timeout,
            max_attempts: c.api_max_attempts,
            backoff: c.api_backoff,
            max_media_bytes: c.max_media_bytes,
        };
        for shown in [format!("{c:?}"), format!("{c:#?}"), format!("{api:?}")] {
            assert!(
                !shown.contains("gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5o"),
                "{shown}"
            );
            assert!(!shown.contains("cu3uJ9Tn2gXPmxx2w9kkCkCE2"), "{shown}");
            assert!(
                !shown.contains("Mrq68nTKduznJYO1A37W2oEgpkMUvkttR"),
                "{shown}"
            );
            assert!(shown.contains("ww1436e0e65a779aee"), "{shown}");
        }
    }

    #[test]
    fn overrides() {
        let mut pairs = FULL.to_vec();
        pairs.extend([
            ("WECOM_CALLBACK_HOST", "127.0.0.1"),
            ("WECOM_CALLBACK_PORT", "0"),
            ("WECOM_CALLBACK_API_URL", "http://127.0.0.1:9"),
            ("WECOM_CALLBACK_REPLAY_WINDOW_SECS", "off"),
            ("WECOM_CALLBACK_MESSAGE_FORMAT", "Markdown"),
            ("WECOM_CALLBACK_PATH", "/hooks/wecom"),
        ]);
        let c = from_env(&env(&pairs)).unwrap().unwrap();
        assert_eq!(c.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.replay_window, None);
        assert_eq!(c.message_format, MessageFormat::Markdown);
        assert_eq!(c.path, "/hooks/wecom");
        let pairs = [FULL.as_slice(), &[("WECOM_CALLBACK_HOST", "::")]].concat();
        let c = from_env(&env(&pairs)).unwrap().unwrap();
        assert!(c.listen.ip().is_unspecified() && c.listen.is_ipv6());
    }

    #[test]
    fn errors_name_the_variable() {
        let e = from_env(&env(&FULL[..2])).unwrap().unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("WECOM_CALLBACK_AGENT_ID, WECOM_CALLBACK_TOKEN, WECOM_CALLBACK_ENCODING_AES_KEY not set"),
            "{s}"
        );
        for (var, value, needle) in [
            (
                "WECOM_CALLBACK_ENCODING_AES_KEY",
                "tooshort",
                "43-character",
            ),
            ("WECOM_CALLBACK_AGENT_ID", "app", "WECOM_CALLBACK_AGENT_ID"),
            ("WECOM_CALLBACK_TOKEN", "has space!", "WECOM_CALLBACK_TOKEN"),
            ("WECOM_CALLBACK_HOST", "example.org", "WECOM_CALLBACK_HOST"),
            ("WECOM_CALLBACK_PORT", "99999", "WECOM_CALLBACK_PORT"),
            (
                "WECOM_CALLBACK_API_URL",
                "ftp://x",
                "WECOM_CALLBACK_API_URL",
            ),
            (
                "WECOM_CALLBACK_REPLAY_WINDOW_SECS",
                "0",
                "WECOM_CALLBACK_REPLAY_WINDOW_SECS",
            ),
            (
                "WECOM_CALLBACK_MESSAGE_FORMAT",
                "html",
                "WECOM_CALLBACK_MESSAGE_FORMAT",
            ),
            ("WECOM_CALLBACK_PATH", "callback", "WECOM_CALLBACK_PATH"),
        ] {
            let mut pairs: Vec<(&str, &str)> =
                FULL.iter().filter(|(k, _)| *k != var).copied().collect();
            pairs.push((var, value));
            let e = from_env(&env(&pairs)).unwrap().unwrap_err().to_string();
            assert!(e.contains(needle), "{var}: {e}");
            if var == "WECOM_CALLBACK_TOKEN" {
                assert!(!e.contains("has space"), "the token leaked: {e}");
            }
        }
    }
}
