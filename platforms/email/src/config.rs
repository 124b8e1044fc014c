//! The Email adapter's settings: hermes-agent's `EMAIL_*` variable names and
//! the `[email]` section of `config.toml` (a variable wins over the key),
//! validated before anything connects. Every error names the setting.

use std::time::Duration;

use hermes_platform_kit::settings::{Setting, SettingError, Sources};
use hermes_runtime::secret::Secret;

/// How a connection to the mail server is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (IMAPS 993, SMTPS 465). The default.
    Tls,
    /// A plain connection upgraded with STARTTLS before logging in (143, 587).
    StartTls,
    /// No encryption: only to a loopback address (a local relay, tests).
    None,
}

/// One server: IMAP or SMTP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// TLS, STARTTLS or none.
    pub security: Security,
}

/// Settings for [`super::EmailAdapter`]. The password is a [`Secret`]:
/// `Debug` masks it.
#[derive(Clone, Debug)]
pub struct EmailConfig {
    /// The bot's address (`EMAIL_ADDRESS`), also its IMAP and SMTP login.
    pub address: String,
    /// The mailbox password (`EMAIL_PASSWORD`). Never logged.
    pub password: Secret,
    /// Where mail is read (`EMAIL_IMAP_HOST`, `_PORT`, `_SECURITY`).
    pub imap: Endpoint,
    /// Where answers are sent (`EMAIL_SMTP_HOST`, `_PORT`, `_SECURITY`).
    pub smtp: Endpoint,
    /// Senders who are answered (`EMAIL_ALLOWED_USERS` and
    /// `GATEWAY_ALLOWED_USERS`), compared without regard to case and kept
    /// as written (the runner's allow-list has them so). Nobody else gets
    /// anything: answering strangers is how mail loops and backscatter start.
    pub allowed: Vec<String>,
    /// How often the mailbox is checked when the server has no IDLE, and
    /// how often an IDLE is renewed (`EMAIL_POLL_INTERVAL`, seconds).
    pub poll_interval: Duration,
    /// Use IMAP IDLE where the server offers it (otherwise poll).
    pub idle: bool,
    /// Where scheduled jobs' answers go (`EMAIL_HOME_ADDRESS`).
    pub home_address: Option<String>,
    /// The folder read.
    pub mailbox: String,
    /// Extra trusted root certificates (PEM) for a private server's own
    /// certificate. Not read from the environment.
    pub extra_roots_pem: Option<Vec<u8>>,
}

/// An Email setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("email: {key}: {message}")]
pub struct EmailConfigError {
    /// The variable (`EMAIL_IMAP_HOST`) or key (`email.imap_host`) at fault.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> EmailConfigError {
    EmailConfigError {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// Whether `host` is this machine: `localhost` or a loopback address. Only
/// these may be reached without encryption.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A plausible mail address: one `@`, something on both sides, no spaces.
fn check_address(key: &str, address: &str) -> Result<String, EmailConfigError> {
    let ok = address.split('@').count() == 2
        && !address.starts_with('@')
        && !address.ends_with('@')
        && !address
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ',' | ':'));
    if !ok {
        return Err(err(
            key,
            format!("{address:?} is not a mail address (like hermes@example.org)"),
        ));
    }
    Ok(address.to_owned())
}

impl From<SettingError> for EmailConfigError {
    fn from(e: SettingError) -> Self {
        err(&e.key, e.message)
    }
}

/// Addresses: a comma-separated string or a TOML list, each checked
/// (empty items dropped).
fn addresses(setting: &Setting<'_>) -> Result<Vec<String>, EmailConfigError> {
    setting
        .list("addresses")?
        .iter()
        .filter(|s| !s.is_empty())
        .map(|a| check_address(&setting.key, a))
        .collect()
}

fn read_security(setting: &Setting<'_>) -> Result<Security, EmailConfigError> {
    match setting.string()?.to_ascii_lowercase().as_str() {
        "" | "tls" => Ok(Security::Tls),
        "starttls" => Ok(Security::StartTls),
        "none" => Ok(Security::None),
        other => Err(err(
            &setting.key,
            format!("`{other}` is not tls, starttls or none"),
        )),
    }
}

impl EmailConfig {
    /// The settings from `env` and the `[email]` table of `file`: `None`
    /// when no address is set (Email disabled), an error for any value that
    /// cannot work — among them `none` security towards a host that is not
    /// a loopback address.
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
    ) -> Option<Result<Self, EmailConfigError>> {
        let sources = Sources::new(env, file, "email");
        let pick = |var, key| sources.pick(var, key);
        let address = pick("EMAIL_ADDRESS", "address")?;
        let build = || -> Result<Self, EmailConfigError> {
            let address = check_address(&address.key, &address.string()?)?.to_ascii_lowercase();
            let password = pick("EMAIL_PASSWORD", "password")
                .ok_or_else(|| err("EMAIL_PASSWORD", "is needed with EMAIL_ADDRESS"))?;
            let password = Secret::new(password.string()?);
            let endpoint = |proto: &str,
                            host: (&'static str, &'static str),
                            port: (&'static str, &'static str),
                            security: (&'static str, &'static str),
                            defaults: [u16; 3]|
             -> Result<Endpoint, EmailConfigError> {
                let host_setting = pick(host.0, host.1).ok_or_else(|| {
                    err(
                        host.0,
                        format!("is needed with EMAIL_ADDRESS (the {proto} server)"),
                    )
                })?;
                let host = host_setting.string()?;
                if host.is_empty() || host.contains(char::is_whitespace) {
                    return Err(err(
                        &host_setting.key,
                        format!("{host:?} is not a host name"),
                    ));
                }
                let security = match pick(security.0, security.1) {
                    Some(v) => {
                        let s = read_security(&v)?;
                        if s == Security::None && !is_loopback(&host) {
                            return Err(err(
                                &v.key,
                                format!(
                                    "`none` sends the password and mail unencrypted, so it is \
                                     only allowed to a loopback address, not to {host}; use tls \
                                     or starttls"
                                ),
                            ));
                        }
                        s
                    }
                    None => Security::Tls,
                };
                let default = match security {
                    Security::Tls => defaults[0],
                    Security::StartTls => defaults[1],
                    Security::None => defaults[2],
                };
                let port = match pick(port.0, port.1) {
                    Some(v) => u16::try_from(v.number(65_535)?).unwrap_or(default),
                    None => default,
                };
                Ok(Endpoint {
                    host,
                    port,
                    security,
                })
            };
            let imap = endpoint(
                "IMAP",
                ("EMAIL_IMAP_HOST", "imap_host"),
                ("EMAIL_IMAP_PORT", "imap_port"),
                ("EMAIL_IMAP_SECURITY", "imap_security"),
                [993, 143, 143],
            )?;
            let smtp = endpoint(
                "SMTP",
                ("EMAIL_SMTP_HOST", "smtp_host"),
                ("EMAIL_SMTP_PORT", "smtp_port"),
                ("EMAIL_SMTP_SECURITY", "smtp_security"),
                [465, 587, 25],
            )?;
            let mut allowed = match pick("EMAIL_ALLOWED_USERS", "allowed_users") {
                Some(v) => addresses(&v)?,
                None => Vec::new(),
            };
            if let Some(everywhere) = env("GATEWAY_ALLOWED_USERS") {
                // Ids of other platforms share that list; only addresses count.
                allowed.extend(
                    everywhere
                        .split(',')
                        .map(str::trim)
                        .filter(|a| a.contains('@') && check_address("", a).is_ok())
                        .map(str::to_owned),
                );
            }
            let poll_interval = match pick("EMAIL_POLL_INTERVAL", "poll_interval") {
                Some(v) => Duration::from_secs(v.number(86_400)?),
                None => Duration::from_secs(60),
            };
            let home_address = match pick("EMAIL_HOME_ADDRESS", "home_address") {
                Some(v) => Some(check_address(&v.key, &v.string()?)?.to_ascii_lowercase()),
                None => None,
            };
            Ok(EmailConfig {
                address,
                password,
                imap,
                smtp,
                allowed,
                poll_interval,
                idle: true,
                home_address,
                mailbox: "INBOX".to_owned(),
                extra_roots_pem: None,
            })
        };
        Some(build())
    }

    /// The allowed sender `address` is, in the spelling the allow-list has,
    /// or `None` for a stranger.
    pub fn allowed_sender(&self, address: &str) -> Option<&str> {
        let address = address.trim();
        self.allowed
            .iter()
            .find(|a| a.eq_ignore_ascii_case(address))
            .map(String::as_str)
    }

    /// The domain of the bot's address (for Message-IDs and EHLO).
    pub fn domain(&self) -> &str {
        self.address
            .rsplit_once('@')
            .map_or("localhost", |(_, d)| d)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(
        toml_src: &str,
        env: &[(&str, &str)],
    ) -> Option<Result<EmailConfig, EmailConfigError>> {
        let file: toml::Table = toml_src.parse().unwrap();
        // The last of a name wins, so a test can override a base value.
        let lookup = |k: &str| {
            env.iter()
                .rev()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        };
        EmailConfig::from_sources(&lookup, &file)
    }

    const BASE: &[(&str, &str)] = &[
        ("EMAIL_ADDRESS", "Hermes@Example.org"),
        ("EMAIL_PASSWORD", "hunter2"),
        ("EMAIL_IMAP_HOST", "imap.example.org"),
        ("EMAIL_SMTP_HOST", "smtp.example.org"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = BASE.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn off_without_an_address_and_defaults_with_one() {
        assert!(parse("", &[]).is_none());
        let c = parse("", BASE).unwrap().unwrap();
        assert_eq!(c.address, "hermes@example.org");
        assert_eq!((c.imap.port, c.imap.security), (993, Security::Tls));
        assert_eq!((c.smtp.port, c.smtp.security), (465, Security::Tls));
        assert_eq!(c.domain(), "example.org");
        assert!(
            !format!("{c:?}").contains("hunter2"),
            "the password is never shown"
        );
        let c = parse(
            "",
            &with(&[
                ("EMAIL_IMAP_SECURITY", "starttls"),
                ("EMAIL_SMTP_SECURITY", "STARTTLS"),
                ("EMAIL_ALLOWED_USERS", "Alice@Example.org, bob@example.org"),
                ("GATEWAY_ALLOWED_USERS", "12345,carol@example.org"),
                ("EMAIL_POLL_INTERVAL", "15"),
                ("EMAIL_HOME_ADDRESS", "owner@example.org"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((c.imap.port, c.smtp.port), (143, 587));
        assert_eq!(
            c.allowed_sender("ALICE@example.org"),
            Some("Alice@Example.org")
        );
        assert!(c.allowed_sender("carol@example.org").is_some());
        assert!(c.allowed_sender("mallory@example.org").is_none());
        assert_eq!(c.poll_interval, Duration::from_secs(15));
        assert_eq!(c.home_address.as_deref(), Some("owner@example.org"));
    }

    #[test]
    fn no_encryption_only_to_loopback() {
        let e = parse("", &with(&[("EMAIL_IMAP_SECURITY", "none")]))
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "EMAIL_IMAP_SECURITY");
        assert!(e.message.contains("loopback"), "{e}");
        let c = parse(
            "",
            &with(&[
                ("EMAIL_IMAP_HOST", "127.0.0.1"),
                ("EMAIL_IMAP_SECURITY", "none"),
                ("EMAIL_SMTP_HOST", "localhost"),
                ("EMAIL_SMTP_SECURITY", "none"),
                ("EMAIL_SMTP_PORT", "2525"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((c.imap.port, c.smtp.port), (143, 2525));
        assert!(is_loopback("[::1]") && !is_loopback("10.0.0.1"));
    }

    #[test]
    fn the_email_section_and_errors_naming_the_setting() {
        let file = "[email]\naddress = \"bot@example.org\"\npassword = \"p\"\nimap_host = \"127.0.0.1\"\n\
                    imap_port = 1143\nimap_security = \"none\"\nsmtp_host = \"smtp.example.org\"\n\
                    allowed_users = [\"a@example.org\"]\npoll_interval = 5";
        let c = parse(file, &[]).unwrap().unwrap();
        assert_eq!((c.imap.port, c.imap.security), (1143, Security::None));
        assert_eq!(c.allowed, ["a@example.org"]);
        let c = parse(file, &[("EMAIL_IMAP_PORT", "2143")])
            .unwrap()
            .unwrap();
        assert_eq!(c.imap.port, 2143, "a variable wins over the key");
        for (extra, key) in [
            (("EMAIL_ALLOWED_USERS", "alice"), "EMAIL_ALLOWED_USERS"),
            (("EMAIL_IMAP_PORT", "0"), "EMAIL_IMAP_PORT"),
            (("EMAIL_SMTP_SECURITY", "ssl3"), "EMAIL_SMTP_SECURITY"),
            (("EMAIL_POLL_INTERVAL", "soon"), "EMAIL_POLL_INTERVAL"),
        ] {
            let e = parse("", &with(&[extra])).unwrap().unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
        let e = parse("", &[("EMAIL_ADDRESS", "a@b.c")])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.key, "EMAIL_PASSWORD");
        let e = parse("", &BASE[..3]).unwrap().unwrap_err();
        assert_eq!(e.key, "EMAIL_SMTP_HOST");
    }

    #[test]
    fn debug_masks_the_password_from_either_source() {
        const PASSWORD: &str = "correct-horse-battery-staple";
        let from_env = parse("", &with(&[("EMAIL_PASSWORD", PASSWORD)]))
            .unwrap()
            .unwrap();
        let file = format!(
            "[email]\naddress = \"bot@example.org\"\npassword = \"{PASSWORD}\"\n\
             imap_host = \"imap.example.org\"\nsmtp_host = \"smtp.example.org\""
        );
        let from_file = parse(&file, &[]).unwrap().unwrap();
        for c in [from_env, from_file] {
            assert_eq!(c.password.expose(), PASSWORD);
            for shown in [format!("{c:?}"), format!("{c:#?}")] {
                assert!(!shown.contains("horse-battery"), "{shown}");
                assert!(shown.contains("example.org"), "{shown}");
            }
        }
    }
}
