//! The webhook listener's settings: `[webhooks]` (`port`, `host`) and one
//! `[webhooks.NAME]` table per route, with `WEBHOOK_HOST` and
//! `WEBHOOK_PORT` winning over the file. The listener is on when a port is
//! set; a route must name how its sender proves itself (`secret` for
//! GitHub-style HMAC signatures, or `token` for a bearer token).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hermes_runtime::cron::Target;
use hermes_runtime::secret::Secret;

/// Events a route accepts per minute unless it says otherwise.
pub const DEFAULT_RATE_LIMIT: u32 = 60;
/// The largest body accepted (a larger one is `413`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 * 1024;
/// Route keys, for the did-you-mean of a typo.
const ROUTE_KEYS: &[&str] = &[
    "secret",
    "token",
    "deliver",
    "prompt",
    "no_agent",
    "rate_limit",
];

/// How a route's sender proves the request is theirs.
#[derive(Clone, Debug)]
pub enum RouteAuth {
    /// `X-Hub-Signature-256: sha256=HEX`, HMAC-SHA256 of the raw body.
    Hmac(Secret),
    /// `Authorization: Bearer TOKEN`.
    Bearer(Secret),
}

/// One `[webhooks.NAME]` route.
#[derive(Clone, Debug)]
pub struct Route {
    /// Its name, the last segment of `/hooks/NAME`.
    pub name: String,
    /// The signature check.
    pub auth: RouteAuth,
    /// Where the answer goes: a home channel (`telegram`) or `platform:chat`.
    pub deliver: String,
    /// The template (`{payload}`, `{payload.a.b}`); `None`: the default.
    pub prompt: Option<String>,
    /// Deliver the rendered template itself, no model call.
    pub no_agent: bool,
    /// Events accepted per minute.
    pub rate_limit: u32,
}

/// Settings of the webhook listener. Limits and timings are fields so tests
/// can shorten them.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Where it listens.
    pub listen: SocketAddr,
    /// The routes by name.
    pub routes: BTreeMap<String, Route>,
    /// The largest body.
    pub max_body_bytes: usize,
    /// Deadline for a request's head.
    pub header_timeout: Duration,
    /// Deadline for a request's body.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long stopping waits for requests in flight.
    pub shutdown_grace: Duration,
}

impl WebhookSettings {
    /// Defaults around `listen` and `routes`.
    pub fn new(listen: SocketAddr, routes: BTreeMap<String, Route>) -> Self {
        WebhookSettings {
            listen,
            routes,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 64,
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// A webhook setting that cannot work; the message names it (never a
/// secret's value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("webhooks: {0}")]
pub struct WebhookConfigError(pub String);

fn invalid(message: impl Into<String>) -> WebhookConfigError {
    WebhookConfigError(message.into())
}

/// Whether `name` can be a route's name (a URL path segment).
pub fn is_route_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Reads `[webhooks]` of `file` and the variables `var` gives; `Ok(None)`
/// when no port is set (the listener is off).
pub fn from_sources(
    file: &toml::Table,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<WebhookSettings>, WebhookConfigError> {
    let table = match file.get("webhooks") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t.clone(),
        Some(_) => return Err(invalid("[webhooks] must be a section")),
    };
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let port = match (var("WEBHOOK_PORT"), table.get("port")) {
        (Some(v), _) => Some(
            v.trim()
                .parse::<u16>()
                .map_err(|_| invalid(format!("WEBHOOK_PORT '{v}' is not a port number")))?,
        ),
        (None, Some(toml::Value::Integer(n))) => Some(
            u16::try_from(*n)
                .map_err(|_| invalid(format!("[webhooks] port {n} is not a port number")))?,
        ),
        (None, Some(_)) => return Err(invalid("[webhooks] port must be a number")),
        (None, None) => None,
    };
    let host = match (var("WEBHOOK_HOST"), table.get("host")) {
        (Some(v), _) => v.trim().to_owned(),
        (None, Some(toml::Value::String(s))) => s.trim().to_owned(),
        (None, Some(_)) => return Err(invalid("[webhooks] host must be a string")),
        (None, None) => Ipv4Addr::LOCALHOST.to_string(),
    };
    let ip: IpAddr = host.parse().map_err(|_| {
        invalid(format!(
            "WEBHOOK_HOST ([webhooks] host) '{host}' is not an IP address (e.g. 127.0.0.1)"
        ))
    })?;
    let mut routes = BTreeMap::new();
    for (name, value) in &table {
        match (name.as_str(), value) {
            ("port" | "host", _) => {}
            (_, toml::Value::Table(route)) => {
                routes.insert(name.clone(), route_of(name, route)?);
            }
            _ => {
                return Err(invalid(format!(
                    "unknown key '{name}' in [webhooks]; it takes port, host and one [webhooks.NAME] table per route"
                )));
            }
        }
    }
    let Some(port) = port else {
        if !routes.is_empty() {
            tracing::warn!("[webhooks] routes are configured but no port: the listener is off");
        }
        return Ok(None);
    };
    Ok(Some(WebhookSettings::new(
        SocketAddr::new(ip, port),
        routes,
    )))
}

fn route_of(name: &str, table: &toml::Table) -> Result<Route, WebhookConfigError> {
    let at = |key: &str| format!("[webhooks.{name}] {key}");
    if !is_route_name(name) {
        return Err(invalid(format!(
            "[webhooks.{name}]: a route name is 1 to 64 letters, digits, '-' or '_'"
        )));
    }
    for key in table.keys() {
        if !ROUTE_KEYS.contains(&key.as_str()) {
            return Err(invalid(format!(
                "unknown key '{key}' in [webhooks.{name}]{}; keys there are {}",
                hermes_runtime::config::suggestion(key, ROUTE_KEYS.iter().copied()),
                ROUTE_KEYS.join(", ")
            )));
        }
    }
    let text = |key: &str| -> Result<Option<String>, WebhookConfigError> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
            Some(_) => Err(invalid(format!("{} must be a non-empty string", at(key)))),
        }
    };
    let auth = match (text("secret")?, text("token")?) {
        (Some(secret), None) => RouteAuth::Hmac(Secret::new(secret)),
        (None, Some(token)) => RouteAuth::Bearer(Secret::new(token)),
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "[webhooks.{name}] has both secret and token; a route checks one of them"
            )));
        }
        (None, None) => {
            return Err(invalid(format!(
                "[webhooks.{name}] needs `secret` (HMAC-SHA256 signatures, as GitHub sends) or `token` (a bearer token): unsigned events are never accepted"
            )));
        }
    };
    let deliver = text("deliver")?.ok_or_else(|| {
        invalid(format!(
            "{} is required: a home channel (telegram) or platform:chat",
            at("deliver")
        ))
    })?;
    match Target::parse(&deliver) {
        Ok(Target::Home(_) | Target::Chat { .. } | Target::Local) => {}
        Ok(Target::Origin) => {
            return Err(invalid(format!(
                "{} cannot be origin: an event has no chat of its own",
                at("deliver")
            )));
        }
        Err(why) => return Err(invalid(format!("{}: {why}", at("deliver")))),
    }
    let no_agent = match table.get("no_agent") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(_) => return Err(invalid(format!("{} must be true or false", at("no_agent")))),
    };
    let rate_limit = match table.get("rate_limit") {
        None => DEFAULT_RATE_LIMIT,
        Some(toml::Value::Integer(n)) if *n >= 1 => u32::try_from(*n).unwrap_or(u32::MAX),
        Some(_) => {
            return Err(invalid(format!(
                "{} must be a whole number of at least 1 (events per minute)",
                at("rate_limit")
            )));
        }
    };
    Ok(Route {
        name: name.to_owned(),
        auth,
        deliver,
        prompt: text("prompt")?,
        no_agent,
        rate_limit,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read(
        text: &str,
        vars: &[(&str, &str)],
    ) -> Result<Option<WebhookSettings>, WebhookConfigError> {
        let file: toml::Table = toml::from_str(text).unwrap();
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        from_sources(&file, &|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_listener_is_off_without_a_port_and_a_variable_wins() {
        let routes = "[webhooks.ci]\nsecret = \"s\"\ndeliver = \"telegram\"\n";
        assert!(read(routes, &[]).unwrap().is_none());
        let on = read(
            &format!("[webhooks]\nport = 9000\n{routes}"),
            &[("WEBHOOK_PORT", "9100")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.listen.to_string(), "127.0.0.1:9100");
        let route = &on.routes["ci"];
        assert!(matches!(route.auth, RouteAuth::Hmac(_)));
        assert_eq!(route.rate_limit, DEFAULT_RATE_LIMIT);
    }

    #[test]
    fn a_route_without_a_check_or_with_a_bad_key_or_target_is_refused() {
        let e = read(
            "[webhooks]\nport = 1\n[webhooks.ci]\ndeliver = \"telegram\"\n",
            &[],
        );
        assert!(e.unwrap_err().0.contains("needs `secret`"));
        let e = read(
            "[webhooks]\nport = 1\n[webhooks.ci]\ntoken = \"t\"\ndeliver = \"telegram\"\nsecrett = \"x\"\n",
            &[],
        );
        assert!(e.unwrap_err().0.contains("did you mean 'secret'"));
        let e = read(
            "[webhooks]\nport = 1\n[webhooks.ci]\ntoken = \"t\"\ndeliver = \"origin\"\n",
            &[],
        );
        assert!(e.unwrap_err().0.contains("cannot be origin"));
        let e = read(
            "[webhooks]\nport = 1\n[webhooks.ci]\ntoken = \"t\"\ndeliver = \"telegram\"\nrate_limit = 0\n",
            &[],
        );
        assert!(e.unwrap_err().0.contains("rate_limit"));
    }
}
