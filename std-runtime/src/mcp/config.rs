//! `[mcp.servers.NAME]` in `config.toml`: what to start or where to connect.
//!
//! ```toml
//! [mcp.servers.files]                 # stdio: a program hermes starts
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
//! env = { NOTES_TOKEN = "${NOTES_TOKEN}" }   # ${VAR}: from the environment or .env
//! cwd = "/srv"                        # default: the working directory
//!
//! [mcp.servers.remote]                # streamable HTTP
//! url = "https://mcp.example.com/mcp"
//! headers = { Authorization = "Bearer ${REMOTE_MCP_TOKEN}" }
//!
//! # Both kinds:
//! # timeout = 60          seconds a call may go without progress (default 60)
//! # max_call_time = 600   seconds a call may take at all (default 600)
//! # startup_timeout = 30  seconds to start and initialize (default 30)
//! # tools = ["echo"]      only these tools (default: all the server has)
//! # enabled = false       keep the entry but do not start it
//! ```
//!
//! Values in `env` and `headers` are secrets as far as hermes is concerned:
//! they never appear in `Debug` output, logs, `hermes mcp list`, or tool
//! results (a server's stderr is shown with them replaced by `***`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::env::Environment;

/// Default: a call that reports no progress for this long is given up.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default: no call takes longer than this, progress or not.
pub const DEFAULT_MAX_CALL_TIME: Duration = Duration::from_secs(600);
/// Default: starting a server and the `initialize` handshake.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach one server.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A program hermes starts, speaking JSON-RPC on its stdin/stdout.
    Stdio {
        /// The program (looked up in `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it (values expanded, secret).
        env: BTreeMap<String, String>,
        /// Where it runs (`None`: hermes's working directory).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint URL.
        url: String,
        /// Extra request headers (values expanded, secret).
        headers: BTreeMap<String, String>,
    },
}

/// One configured server.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The name in `[mcp.servers.NAME]`; tools are called `mcp_NAME_TOOL`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// A call with no progress for this long counts as hung.
    pub call_timeout: Duration,
    /// No call lasts longer than this.
    pub max_call_time: Duration,
    /// Starting plus the handshake.
    pub startup_timeout: Duration,
    /// Only these tools are offered (`None`: all).
    pub tools: Option<Vec<String>>,
}

impl ServerConfig {
    /// The configured secret values (env and header values), longest
    /// first, for redacting server output.
    pub fn secrets(&self) -> Vec<String> {
        let values: Vec<&String> = match &self.transport {
            Transport::Stdio { env, .. } => env.values().collect(),
            Transport::Http { headers, .. } => headers.values().collect(),
        };
        let mut out: Vec<String> = values
            .into_iter()
            // Short values ("1", "on") are settings, not secrets, and
            // replacing them would garble every line.
            .filter(|v| v.len() >= 6)
            .cloned()
            .collect();
        // Also the token alone when a header says "Bearer TOKEN".
        let tokens: Vec<String> = out
            .iter()
            .filter_map(|v| v.split_once(' ').map(|(_, t)| t.trim().to_owned()))
            .filter(|t| t.len() >= 6)
            .collect();
        out.extend(tokens);
        out.sort_by_key(|v| std::cmp::Reverse(v.len()));
        out.dedup();
        out
    }

    /// A one-line description without secrets: the command line or the URL.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut s = command.clone();
                for a in args {
                    s.push(' ');
                    s.push_str(a);
                }
                s
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }
}

/// Shows names, never the values of `env` or `headers`.
impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Transport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ServerConfig");
        d.field("name", &self.name)
            .field("transport", &self.transport);
        d.field("call_timeout", &self.call_timeout)
            .field("max_call_time", &self.max_call_time)
            .field("startup_timeout", &self.startup_timeout)
            .field("tools", &self.tools)
            .finish()
    }
}

/// Why `[mcp]` cannot be used; each message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[mcp.servers.{server}] {message}")]
pub struct McpConfigError {
    /// The server's name (or `*` for the section itself).
    pub server: String,
    /// What is wrong.
    pub message: String,
}

fn err(server: &str, message: impl Into<String>) -> McpConfigError {
    McpConfigError {
        server: server.to_owned(),
        message: message.into(),
    }
}

/// Headers the transport sets itself; a configured one would break the
/// protocol.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "mcp-session-id",
    "last-event-id",
    "mcp-protocol-version",
    "host",
];

/// Reads `[mcp.servers.*]` from the parsed `config.toml`; `${VAR}` in `env`
/// and `headers` values is taken from `env` (the process environment laid
/// over `.env`). Disabled servers are left out. Sorted by name.
pub fn parse(file: &toml::Table, env: &Environment) -> Result<Vec<ServerConfig>, McpConfigError> {
    let Some(section) = file.get("mcp") else {
        return Ok(Vec::new());
    };
    let section = section.as_table().ok_or_else(|| McpConfigError {
        server: "*".into(),
        message: "[mcp] must be a table".into(),
    })?;
    if let Some(unknown) = section.keys().find(|k| k.as_str() != "servers") {
        return Err(McpConfigError {
            server: "*".into(),
            message: format!("unknown key [mcp] {unknown}; servers go in [mcp.servers.NAME]"),
        });
    }
    let Some(servers) = section.get("servers") else {
        return Ok(Vec::new());
    };
    let servers = servers.as_table().ok_or_else(|| McpConfigError {
        server: "*".into(),
        message: "[mcp.servers] must be a table of [mcp.servers.NAME] sections".into(),
    })?;
    let mut out = Vec::new();
    for (name, value) in servers {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(err(
                name,
                "the server name may use only letters, digits, '_' and '-' (it becomes part of tool names)",
            ));
        }
        let table = value
            .as_table()
            .ok_or_else(|| err(name, "must be a table"))?;
        if let Some(server) = parse_server(name, table, env)? {
            out.push(server);
        }
    }
    Ok(out)
}

fn parse_server(
    name: &str,
    t: &toml::Table,
    env: &Environment,
) -> Result<Option<ServerConfig>, McpConfigError> {
    const KEYS: &[&str] = &[
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeout",
        "max_call_time",
        "startup_timeout",
        "tools",
        "enabled",
    ];
    if let Some(unknown) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(err(
            name,
            format!("unknown key '{unknown}'; known keys: {}", KEYS.join(", ")),
        ));
    }
    match t.get("enabled") {
        None | Some(toml::Value::Boolean(true)) => {}
        Some(toml::Value::Boolean(false)) => return Ok(None),
        Some(_) => return Err(err(name, "enabled must be true or false")),
    }
    let string = |key: &str| -> Result<Option<String>, McpConfigError> {
        match t.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(err(name, format!("{key} must be a string"))),
        }
    };
    let list = |key: &str| -> Result<Option<Vec<String>>, McpConfigError> {
        match t.get(key) {
            None => Ok(None),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| err(name, format!("{key} must be a list of strings")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(err(name, format!("{key} must be a list of strings"))),
        }
    };
    let map = |key: &str| -> Result<BTreeMap<String, String>, McpConfigError> {
        match t.get(key) {
            None => Ok(BTreeMap::new()),
            Some(toml::Value::Table(items)) => items
                .iter()
                .map(|(k, v)| {
                    let v = v
                        .as_str()
                        .ok_or_else(|| err(name, format!("{key}.{k} must be a string")))?;
                    let v = expand(v, env).map_err(|var| {
                        err(name, format!("{key}.{k} uses ${{{var}}}, which is not set"))
                    })?;
                    Ok((k.clone(), v))
                })
                .collect(),
            Some(_) => Err(err(name, format!("{key} must be a table of strings"))),
        }
    };
    let seconds = |key: &str, default: Duration| -> Result<Duration, McpConfigError> {
        match t.get(key) {
            None => Ok(default),
            Some(toml::Value::Integer(n)) if *n >= 1 && *n <= 86_400 => {
                Ok(Duration::from_secs(*n as u64))
            }
            Some(_) => Err(err(
                name,
                format!("{key} must be a whole number of seconds between 1 and 86400"),
            )),
        }
    };

    let command = string("command")?;
    let url = string("url")?;
    let transport = match (command, url) {
        (Some(_), Some(_)) => {
            return Err(err(
                name,
                "has both command (stdio) and url (HTTP); choose one",
            ));
        }
        (None, None) => {
            return Err(err(
                name,
                "needs command = \"program\" (stdio) or url = \"https://…\" (streamable HTTP)",
            ));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(err(name, "command is empty"));
            }
            if t.contains_key("headers") {
                return Err(err(
                    name,
                    "headers are for url servers; use env for stdio ones",
                ));
            }
            Transport::Stdio {
                command,
                args: list("args")?.unwrap_or_default(),
                env: map("env")?,
                cwd: string("cwd")?.map(PathBuf::from),
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(err(
                    name,
                    format!("url '{url}' must start with http:// or https://"),
                ));
            }
            if ureq::http::Uri::try_from(url.as_str()).is_err() {
                return Err(err(name, format!("url '{url}' is not a valid URL")));
            }
            for key in ["args", "env", "cwd"] {
                if t.contains_key(key) {
                    return Err(err(
                        name,
                        format!("{key} is for command servers, not url ones"),
                    ));
                }
            }
            let headers = map("headers")?;
            for (k, v) in &headers {
                if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                    return Err(err(
                        name,
                        format!("headers.{k} is set by the MCP transport itself"),
                    ));
                }
                if ureq::http::HeaderName::from_bytes(k.as_bytes()).is_err()
                    || ureq::http::HeaderValue::from_str(v).is_err()
                {
                    return Err(err(name, format!("headers.{k} is not a valid HTTP header")));
                }
            }
            Transport::Http { url, headers }
        }
    };
    let call_timeout = seconds("timeout", DEFAULT_CALL_TIMEOUT)?;
    let max_call_time = seconds("max_call_time", DEFAULT_MAX_CALL_TIME)?.max(call_timeout);
    Ok(Some(ServerConfig {
        name: name.to_owned(),
        transport,
        call_timeout,
        max_call_time,
        startup_timeout: seconds("startup_timeout", DEFAULT_STARTUP_TIMEOUT)?,
        tools: list("tools")?,
    }))
}

/// Replaces `${VAR}` with its value from `env`; `Err(VAR)` when unset.
/// `$$` is a literal `$`.
fn expand(value: &str, env: &Environment) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('{')
            && let Some(end) = inner.find('}')
        {
            let var = &inner[..end];
            match env.get(var) {
                Some(v) => out.push_str(v),
                None => return Err(var.to_owned()),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse_str(text: &str, vars: &[(&str, &str)]) -> Result<Vec<ServerConfig>, McpConfigError> {
        let file: toml::Table = text.parse().unwrap();
        parse(&file, &Environment::from_pairs(vars.iter().copied()))
    }

    #[test]
    fn stdio_and_http_servers_with_expanded_secrets() {
        let servers = parse_str(
            r#"
[mcp.servers.files]
command = "npx"
args = ["-y", "pkg"]
env = { TOKEN = "${NOTES_TOKEN}", MODE = "fast", PRICE = "$$5" }
timeout = 5

[mcp.servers.remote]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${REMOTE}" }
tools = ["search"]

[mcp.servers.off]
command = "x"
enabled = false
"#,
            &[
                ("NOTES_TOKEN", "notes-secret-123"),
                ("REMOTE", "tok-abcdef"),
            ],
        )
        .unwrap();
        assert_eq!(servers.len(), 2, "disabled servers are left out");
        let files = &servers[0];
        assert_eq!(files.name, "files");
        assert_eq!(files.call_timeout, Duration::from_secs(5));
        assert_eq!(files.max_call_time, DEFAULT_MAX_CALL_TIME);
        match &files.transport {
            Transport::Stdio { env, args, .. } => {
                assert_eq!(env["TOKEN"], "notes-secret-123");
                assert_eq!(env["PRICE"], "$5");
                assert_eq!(args, &["-y", "pkg"]);
            }
            Transport::Http { .. } => panic!("stdio expected"),
        }
        assert_eq!(files.secrets(), vec!["notes-secret-123".to_owned()]);
        let remote = &servers[1];
        assert_eq!(remote.tools.as_deref(), Some(&["search".to_owned()][..]));
        assert!(remote.secrets().contains(&"tok-abcdef".to_owned()));
        let shown = format!("{servers:?}");
        assert!(
            !shown.contains("notes-secret") && !shown.contains("tok-abcdef"),
            "{shown}"
        );
        assert!(
            shown.contains("TOKEN") && shown.contains("Authorization"),
            "{shown}"
        );
    }

    #[test]
    fn mistakes_name_the_server_and_the_key() {
        let cases = [
            ("[mcp.servers.a]\nargs = []\n", "needs command"),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
                "choose one",
            ),
            ("[mcp.servers.a]\nurl = \"ftp://h\"\n", "must start with"),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nenv = { K = \"${MISSING}\" }\n",
                "${MISSING}",
            ),
            (
                "[mcp.servers.a]\ncommand = \"x\"\ncomand = 1\n",
                "unknown key 'comand'",
            ),
            ("[mcp.servers.a]\ncommand = \"x\"\ntimeout = 0\n", "timeout"),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nheaders = { Accept = \"x\" }\n",
                "set by the MCP transport",
            ),
            ("[mcp.servers.\"a b\"]\ncommand = \"x\"\n", "server name"),
            ("[mcp]\nserver = 1\n", "unknown key [mcp] server"),
        ];
        for (text, want) in cases {
            let e = parse_str(text, &[]).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.starts_with("[mcp.servers."), "{e}");
        }
    }
}
