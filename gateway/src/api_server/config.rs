//! The API server's settings: hermes-agent's variable names
//! (`API_SERVER_*`, so its users can switch) over the `[api_server]`
//! section of `config.toml`; a variable wins over the file.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hermes_runtime::secret::Secret;

/// hermes-agent's port.
pub const DEFAULT_PORT: u16 = 8642;
/// The model id `GET /v1/models` lists and requests must name.
pub const DEFAULT_MODEL_NAME: &str = "hermes-agent";
/// Runs at once before `429`.
pub const DEFAULT_MAX_CONCURRENT: usize = 4;

/// Settings of [`super::ApiServer`]. Limits and timings are fields so tests
/// can shorten them.
#[derive(Clone)]
pub struct ApiServerConfig {
    /// Where it listens (`API_SERVER_HOST`, `API_SERVER_PORT`).
    pub listen: SocketAddr,
    /// The bearer key every request must carry (`API_SERVER_KEY`). Never
    /// logged (a [`Secret`]); compared in constant time.
    pub key: Secret,
    /// The one model id served (`API_SERVER_MODEL_NAME`).
    pub model_name: String,
    /// Browser origins allowed to call it (`API_SERVER_CORS_ORIGINS`,
    /// comma-separated; `*` for any). Empty: no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// Agent runs at once (`API_SERVER_MAX_CONCURRENT`); one more is `429`.
    pub max_concurrent: usize,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// The most messages one request may carry.
    pub max_messages: usize,
    /// Deadline for a request's head.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// Connections served at once (the next accept waits).
    pub max_connections: usize,
    /// How long stopping waits for requests in flight.
    pub shutdown_grace: Duration,
    /// How long a streamed answer waits for its first event before the
    /// response head goes out: an upstream failure before then is a `502`,
    /// after it an error event in the stream.
    pub stream_head_wait: Duration,
    /// Spending caps (`[limits]`, issue 44): a request's model calls count
    /// against `unattended_account` — the key's holder, the owner by
    /// default — like cron jobs and webhooks.
    pub limits: hermes_runtime::spending::SpendingLimits,
}

impl std::fmt::Debug for ApiServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerConfig")
            .field("listen", &self.listen)
            .field("key", &self.key)
            .field("model_name", &self.model_name)
            .field("cors_origins", &self.cors_origins)
            .field("max_concurrent", &self.max_concurrent)
            .finish_non_exhaustive()
    }
}

impl ApiServerConfig {
    /// Production defaults with `key`.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_PORT),
            key: Secret::new(key),
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            cors_origins: Vec::new(),
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            max_body_bytes: 4 * 1024 * 1024,
            max_messages: 1000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(3),
            stream_head_wait: Duration::from_secs(5),
            limits: hermes_runtime::spending::SpendingLimits::default(),
        }
    }

    /// Reads the settings from `[api_server]` of `file` and the variables
    /// `var` gives; `Ok(None)` when the server is not enabled.
    pub fn from_sources(
        file: &toml::Table,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ApiServerConfigError> {
        let table = match file.get("api_server") {
            None => toml::Table::new(),
            Some(toml::Value::Table(t)) => t.clone(),
            Some(_) => return Err(invalid("[api_server]", "must be a section")),
        };
        // A variable, else the file's key as text.
        let get = |name: &str, key: &str| -> Result<Option<String>, ApiServerConfigError> {
            if let Some(v) = var(name).filter(|v| !v.trim().is_empty()) {
                return Ok(Some(v.trim().to_owned()));
            }
            match table.get(key) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.trim().to_owned())),
                Some(toml::Value::Integer(n)) => Ok(Some(n.to_string())),
                Some(toml::Value::Boolean(b)) => Ok(Some(b.to_string())),
                Some(toml::Value::Array(items)) => Ok(Some(
                    items
                        .iter()
                        .filter_map(toml::Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                )),
                Some(_) => Err(invalid(
                    &format!("[api_server] {key}"),
                    "has a value of the wrong kind",
                )),
            }
        };
        let enabled = match get("API_SERVER_ENABLED", "enabled")? {
            None => false,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(invalid(
                        "API_SERVER_ENABLED ([api_server] enabled)",
                        "must be true or false",
                    ));
                }
            },
        };
        if !enabled {
            return Ok(None);
        }
        let key = get("API_SERVER_KEY", "key")?.unwrap_or_default();
        if key.is_empty() {
            return Err(invalid(
                "API_SERVER_KEY ([api_server] key)",
                "is required when the API server is enabled (also on 127.0.0.1): every request must send `Authorization: Bearer <key>`",
            ));
        }
        let mut config = Self::new(key);
        let host = get("API_SERVER_HOST", "host")?.unwrap_or_else(|| "127.0.0.1".to_owned());
        let ip: IpAddr = host.parse().map_err(|_| {
            invalid(
                "API_SERVER_HOST ([api_server] host)",
                &format!("'{host}' is not an IP address (e.g. 127.0.0.1 or 0.0.0.0)"),
            )
        })?;
        let port = match get("API_SERVER_PORT", "port")? {
            None => DEFAULT_PORT,
            Some(p) => p.parse::<u16>().map_err(|_| {
                invalid(
                    "API_SERVER_PORT ([api_server] port)",
                    &format!("'{p}' is not a port number (0-65535)"),
                )
            })?,
        };
        config.listen = SocketAddr::new(ip, port);
        if let Some(name) = get("API_SERVER_MODEL_NAME", "model_name")? {
            config.model_name = name;
        }
        if let Some(origins) = get("API_SERVER_CORS_ORIGINS", "cors_origins")? {
            config.cors_origins = origins
                .split(',')
                .map(|o| o.trim().trim_end_matches('/').to_owned())
                .filter(|o| !o.is_empty())
                .collect();
        }
        if let Some(n) = get("API_SERVER_MAX_CONCURRENT", "max_concurrent")? {
            config.max_concurrent =
                n.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    invalid(
                        "API_SERVER_MAX_CONCURRENT ([api_server] max_concurrent)",
                        &format!("'{n}' must be a whole number of at least 1"),
                    )
                })?;
        }
        Ok(Some(config))
    }
}

fn invalid(name: &str, problem: &str) -> ApiServerConfigError {
    ApiServerConfigError(format!("{name} {problem}"))
}

/// A setting of the API server that cannot work; the message names it (and
/// never contains the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("API server: {0}")]
pub struct ApiServerConfigError(pub String);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(file: &str, vars: &[(&str, &str)]) -> Result<Option<ApiServerConfig>, String> {
        let file: toml::Table = file.parse().unwrap();
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let var = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        ApiServerConfig::from_sources(&file, &var).map_err(|e| e.to_string())
    }

    #[test]
    fn off_unless_enabled_and_defaults_when_on() {
        assert!(parse("", &[("API_SERVER_KEY", "k")]).unwrap().is_none());
        let c = parse(
            "",
            &[("API_SERVER_ENABLED", "true"), ("API_SERVER_KEY", "k")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:8642".parse().unwrap());
        assert_eq!(c.model_name, "hermes-agent");
        assert_eq!(c.max_concurrent, 4);
        assert!(c.cors_origins.is_empty());
        // The README's limits.
        assert_eq!(c.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(c.max_messages, 1000);
    }

    #[test]
    fn the_file_is_read_and_variables_win() {
        let file = "[api_server]\nenabled = true\nkey = \"file-key\"\nhost = \"0.0.0.0\"\nport = 9000\n\
                    model_name = \"board\"\ncors_origins = [\"http://a:3000\", \"http://b/\"]\nmax_concurrent = 2\n";
        let c = parse(file, &[]).unwrap().unwrap();
        assert_eq!(c.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(c.key.expose(), "file-key");
        assert_eq!(c.model_name, "board");
        assert_eq!(c.cors_origins, vec!["http://a:3000", "http://b"]);
        assert_eq!(c.max_concurrent, 2);
        let c = parse(
            file,
            &[("API_SERVER_PORT", "9001"), ("API_SERVER_KEY", "env-key")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.listen.port(), 9001);
        assert_eq!(c.key.expose(), "env-key");
    }

    #[test]
    fn bad_values_name_the_setting_and_never_the_key() {
        let on = [
            ("API_SERVER_ENABLED", "true"),
            ("API_SERVER_KEY", "sk-secret-1"),
        ];
        let with = |extra: (&'static str, &'static str)| {
            let mut v = on.to_vec();
            v.push(extra);
            parse("", &v).unwrap_err()
        };
        for (extra, needle) in [
            (("API_SERVER_PORT", "http"), "API_SERVER_PORT"),
            (("API_SERVER_HOST", "localhost:1"), "API_SERVER_HOST"),
            (
                ("API_SERVER_MAX_CONCURRENT", "0"),
                "API_SERVER_MAX_CONCURRENT",
            ),
        ] {
            let e = with(extra);
            assert!(e.contains(needle), "{needle}: {e}");
            assert!(!e.contains("sk-secret-1"), "{e}");
        }
        let e = parse("", &[("API_SERVER_ENABLED", "maybe")]).unwrap_err();
        assert!(e.contains("API_SERVER_ENABLED"), "{e}");
        let e = parse("", &[("API_SERVER_ENABLED", "true")]).unwrap_err();
        assert!(
            e.contains("API_SERVER_KEY") && e.contains("required"),
            "{e}"
        );
        let c = parse("", &on).unwrap().unwrap();
        assert!(!format!("{c:?}").contains("sk-secret-1"));
    }
}
