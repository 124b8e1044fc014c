//! The WhatsApp settings: `WHATSAPP_*` variables, else the `[whatsapp]`
//! section of `config.toml` (a variable wins). Checked once, naming the
//! setting at fault; no secret ever appears in an error or `Debug`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hermes_platform_kit::settings::Sources;
use hermes_runtime::secret::Secret;

/// The Graph API base, version included.
pub const DEFAULT_API_URL: &str = "https://graph.facebook.com/v21.0";
/// The webhook listener's default port.
pub const DEFAULT_PORT: u16 = 8650;
/// The webhook path Meta is given (behind the user's proxy or tunnel).
pub const WEBHOOK_PATH: &str = "/whatsapp";

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("whatsapp: {setting} {problem}")]
pub struct WhatsAppConfigError {
    /// The variable or `whatsapp.key` at fault.
    pub setting: String,
    /// What is wrong with it (never its value when it is a secret).
    pub problem: String,
}

/// Looks a setting up: the variable, else the section's key; gives the
/// name to blame and the value.
type Pick<'a> = dyn Fn(&str, &str) -> Option<(String, String)> + 'a;

fn err(setting: &str, problem: impl Into<String>) -> WhatsAppConfigError {
    WhatsAppConfigError {
        setting: setting.to_owned(),
        problem: problem.into(),
    }
}

/// Everything the adapter needs.
#[derive(Clone)]
pub struct WhatsAppConfig {
    /// The system user's (or temporary) access token for the Graph API.
    pub access_token: Secret,
    /// The business phone number's id (the `/{phone-number-id}/messages`
    /// path; not the phone number).
    pub phone_number_id: String,
    /// The Meta app's secret: webhooks are signed with it.
    pub app_secret: Secret,
    /// The token typed into the app's webhook settings, checked by the
    /// verification handshake.
    pub verify_token: Secret,
    /// `WHATSAPP_ALLOWED_USERS` (the runner enforces the allow-list; the
    /// adapter only uses it to decide who is told that a message kind is
    /// unreadable, so a stranger's sticker gets no answer).
    pub allowed_users: Vec<String>,
    /// The home channel (a phone number, digits only), for scheduled jobs.
    pub home_channel: Option<String>,
    /// The Graph API base including its version, no trailing slash.
    pub api_url: String,
    /// Where the webhook listener binds.
    pub listen: SocketAddr,
    /// The largest webhook body accepted.
    pub max_body_bytes: usize,
    /// Deadline for a request head.
    pub header_timeout: Duration,
    /// Deadline for a request body.
    pub body_timeout: Duration,
    /// Webhook connections served at once.
    pub max_connections: usize,
    /// How long stopping waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Each Graph request's deadline.
    pub api_timeout: Duration,
    /// The first wait after a rate limit (130429) or a transient failure;
    /// doubled each time up to [`Self::max_backoff`].
    pub backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// How long a message is retried while the rate limit (130429) lasts.
    pub rate_limit_patience: Duration,
    /// Attempts at a request that failed for a transient reason (network,
    /// 5xx) before giving up.
    pub max_attempts: u32,
    /// How long a send to a user who has not written within 24 hours (as
    /// far as this process knows) waits for the message's status webhook,
    /// so a 131047 reported there fails the send.
    pub status_wait: Duration,
    /// The largest media file downloaded.
    pub max_media_bytes: u64,
    /// How long a message id is remembered against webhook retries (the
    /// gateway's inbox remembers it durably besides).
    pub dedup_window: Duration,
    /// How many message ids are remembered at most.
    pub dedup_capacity: usize,
}

impl std::fmt::Debug for WhatsAppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppConfig")
            .field("phone_number_id", &self.phone_number_id)
            .field("api_url", &self.api_url)
            .field("listen", &self.listen)
            .field("home_channel", &self.home_channel)
            .finish_non_exhaustive()
    }
}

impl WhatsAppConfig {
    /// Settings with the defaults around the four required values.
    pub fn new(
        access_token: &str,
        phone_number_id: &str,
        app_secret: &str,
        verify_token: &str,
    ) -> Self {
        WhatsAppConfig {
            access_token: Secret::new(access_token),
            phone_number_id: phone_number_id.to_owned(),
            app_secret: Secret::new(app_secret),
            verify_token: Secret::new(verify_token),
            allowed_users: Vec::new(),
            home_channel: None,
            api_url: DEFAULT_API_URL.to_owned(),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT),
            max_body_bytes: 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 64,
            shutdown_grace: Duration::from_secs(5),
            api_timeout: Duration::from_secs(30),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            rate_limit_patience: Duration::from_secs(30 * 60),
            max_attempts: 5,
            status_wait: Duration::from_secs(15),
            max_media_bytes: 100 * 1024 * 1024,
            dedup_window: Duration::from_secs(48 * 3600),
            dedup_capacity: 10_000,
        }
    }

    /// The settings from the variables and `[whatsapp]` (`file`), or `None`
    /// when WhatsApp is not set up (no access token anywhere).
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
    ) -> Option<Result<Self, WhatsAppConfigError>> {
        let sources = Sources::new(env, file, "whatsapp");
        // Every value read as text: the validator names a wrong type, and
        // the checks below give the same "is not …" error for it.
        let pick = |var: &str, key: &str| {
            sources
                .pick(var, key)
                .map(|setting| (setting.key.clone(), setting.text()))
        };
        let (_, token) = pick("WHATSAPP_ACCESS_TOKEN", "access_token")?;
        Some(Self::build(&pick, token))
    }

    fn build(pick: &Pick<'_>, token: String) -> Result<Self, WhatsAppConfigError> {
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(
                "WHATSAPP_ACCESS_TOKEN",
                "is not an access token (no spaces; Meta's app dashboard → WhatsApp → API Setup)",
            ));
        }
        let required = |var: &str, key: &str, what: &str| {
            pick(var, key)
                .ok_or_else(|| err(var, format!("is missing: {what}")))
                .map(|(_, v)| v)
        };
        let phone_number_id = required(
            "WHATSAPP_PHONE_NUMBER_ID",
            "phone_number_id",
            "the business number's id from WhatsApp → API Setup",
        )?;
        if phone_number_id.is_empty() || !phone_number_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(
                "WHATSAPP_PHONE_NUMBER_ID",
                "must be the phone number's id (digits only, not the number itself)",
            ));
        }
        let app_secret = required(
            "WHATSAPP_APP_SECRET",
            "app_secret",
            "the app secret (App settings → Basic) that signs webhooks",
        )?;
        let verify_token = required(
            "WHATSAPP_VERIFY_TOKEN",
            "verify_token",
            "the token you type into the app's webhook settings",
        )?;
        let mut config = Self::new(&token, &phone_number_id, &app_secret, &verify_token);
        if let Some((key, url)) = pick("WHATSAPP_API_URL", "api_url") {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(err(
                    &key,
                    format!("{url:?} must start with http:// or https://"),
                ));
            }
            config.api_url = url.trim_end_matches('/').to_owned();
        }
        if let Some((key, home)) = pick("WHATSAPP_HOME_CHANNEL", "home_channel") {
            if !is_phone(&home) {
                return Err(err(
                    &key,
                    "must be a phone number as WhatsApp writes it: digits only, country code first",
                ));
            }
            config.home_channel = Some(home);
        }
        if let Some((key, users)) = pick("WHATSAPP_ALLOWED_USERS", "allowed_users") {
            for user in hermes_runtime::config::split_list(&users) {
                let user = user.trim_matches(|c| c == '"' || c == '[' || c == ']' || c == ' ');
                if user != "*" && !user.is_empty() && !is_phone(user) {
                    return Err(err(
                        &key,
                        format!(
                            "{user:?} is not a phone number as WhatsApp writes it (digits only, no +)"
                        ),
                    ));
                }
                if !user.is_empty() {
                    config.allowed_users.push(user.to_owned());
                }
            }
        }
        let host = match pick("WHATSAPP_WEBHOOK_HOST", "webhook_host") {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some((key, h)) => h
                .parse::<IpAddr>()
                .map_err(|_| err(&key, format!("{h:?} is not an IP address")))?,
        };
        let port = match pick("WHATSAPP_WEBHOOK_PORT", "webhook_port") {
            None => DEFAULT_PORT,
            Some((key, p)) => p
                .parse::<u16>()
                .map_err(|_| err(&key, format!("{p:?} is not a port number")))?,
        };
        config.listen = SocketAddr::new(host, port);
        Ok(config)
    }
}

/// A phone number as the Cloud API writes it (`wa_id`, `from`): digits,
/// country code first, no `+`.
pub fn is_phone(s: &str) -> bool {
    (6..=20).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    const BASE: &[(&str, &str)] = &[
        ("WHATSAPP_ACCESS_TOKEN", "EAAGtoken"),
        ("WHATSAPP_PHONE_NUMBER_ID", "106540352242922"),
        ("WHATSAPP_APP_SECRET", "appsecret"),
        ("WHATSAPP_VERIFY_TOKEN", "verify-me"),
    ];

    #[test]
    fn not_configured_without_a_token_and_defaults_otherwise() {
        let empty = toml::Table::new();
        assert!(WhatsAppConfig::from_sources(&env_of(&[]), &empty).is_none());
        let c = WhatsAppConfig::from_sources(&env_of(BASE), &empty)
            .unwrap()
            .unwrap();
        assert_eq!(c.api_url, DEFAULT_API_URL);
        assert_eq!(c.listen, "127.0.0.1:8650".parse().unwrap());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("EAAGtoken") && !shown.contains("appsecret"),
            "{shown}"
        );
    }

    #[test]
    fn the_section_is_read_and_a_variable_wins() {
        let file: toml::Table = toml::from_str(
            "[whatsapp]\naccess_token = \"t\"\nphone_number_id = \"123456\"\napp_secret = \"s\"\n\
             verify_token = \"v\"\nwebhook_port = 9001\nhome_channel = \"15551234567\"\n",
        )
        .unwrap();
        let c = WhatsAppConfig::from_sources(&env_of(&[]), &file)
            .unwrap()
            .unwrap();
        assert_eq!(c.listen.port(), 9001);
        assert_eq!(c.home_channel.as_deref(), Some("15551234567"));
        let c = WhatsAppConfig::from_sources(&env_of(&[("WHATSAPP_WEBHOOK_PORT", "9002")]), &file)
            .unwrap()
            .unwrap();
        assert_eq!(c.listen.port(), 9002);
    }

    #[test]
    fn bad_values_name_their_setting_and_never_a_secret() {
        let empty = toml::Table::new();
        for (var, value, needle) in [
            (
                "WHATSAPP_PHONE_NUMBER_ID",
                "+1 555",
                "WHATSAPP_PHONE_NUMBER_ID",
            ),
            ("WHATSAPP_API_URL", "graph.facebook.com", "http://"),
            ("WHATSAPP_WEBHOOK_PORT", "http", "WHATSAPP_WEBHOOK_PORT"),
            (
                "WHATSAPP_WEBHOOK_HOST",
                "localhost:1",
                "WHATSAPP_WEBHOOK_HOST",
            ),
            ("WHATSAPP_ALLOWED_USERS", "+15551234567", "digits only"),
            ("WHATSAPP_HOME_CHANNEL", "alice", "WHATSAPP_HOME_CHANNEL"),
        ] {
            let mut pairs: Vec<(&str, &str)> =
                BASE.iter().copied().filter(|(k, _)| *k != var).collect();
            pairs.push((var, value));
            let e = WhatsAppConfig::from_sources(&env_of(&pairs), &empty)
                .unwrap()
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{var}: {e}");
            assert!(!e.contains("appsecret") && !e.contains("EAAGtoken"), "{e}");
        }
        let missing: Vec<(&str, &str)> = BASE[..2].to_vec();
        let e = WhatsAppConfig::from_sources(&env_of(&missing), &empty)
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("WHATSAPP_APP_SECRET"), "{e}");
    }
}
