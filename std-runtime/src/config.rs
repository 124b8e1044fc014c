//! Provider and agent settings, and where each one came from.
//!
//! Precedence, highest first (the same for the CLI and the gateway):
//! command-line flags > process environment > `$HERMES_HOME/.env` >
//! `$HERMES_HOME/config.toml` > defaults. With nothing configured the
//! provider is OpenRouter when `OPENROUTER_API_KEY` is set, otherwise a local
//! OpenAI-compatible server at Ollama's address.
//!
//! Secrets (API keys, tokens) are held here only to be handed to the client;
//! [`crate::redact::mask`] is what any display uses (SPEC E2).

mod cron;
mod load;
mod media;
mod provider;
mod repeat;
mod resolve;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Re-exported: the front-ends and their tests build settings from an
/// [`Environment`] they load through here.
pub use crate::env::Environment;
use crate::mcp::ServerConfig;
use crate::media::MediaSettings;
use crate::price::Price;
use crate::redact::{mask, redact_url};
use crate::secret::Secret;
use crate::tools::{ApprovalMode, SandboxMode, WebSearchSettings};

pub use load::load;
pub use provider::{
    ANTHROPIC_BASE_URL, ANTHROPIC_DEFAULT_MODEL, Api, CacheMode, EchoMode, FallbackProvider,
};
use resolve::Resolver;
pub use validate::{
    Key, Keys, Kind, SECTIONS, Section, TOOLSET_NAMES, check_dotenv, check_file, did_you_mean,
    suggestion, unknown_var,
};

/// The local default: Ollama's OpenAI-compatible endpoint.
pub const LOCAL_BASE_URL: &str = "http://127.0.0.1:11434/v1";
/// OpenRouter's endpoint, used when `OPENROUTER_API_KEY` is the only key.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// The default model on OpenRouter.
pub const OPENROUTER_DEFAULT_MODEL: &str = "nousresearch/hermes-4-70b";
/// The default model on a local server (Ollama's tag for Hermes 3).
pub const LOCAL_DEFAULT_MODEL: &str = "hermes3";

/// Settings given on the command line; `None` means "not given".
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--base-url`
    pub base_url: Option<String>,
    /// `--api-key`
    pub api_key: Option<Secret>,
    /// `--model`
    pub model: Option<String>,
    /// `--max-iterations`
    pub max_iterations: Option<u32>,
    /// `--toolsets` (comma-separated on the command line)
    pub toolsets: Option<Vec<String>>,
    /// `--cwd`
    pub workdir: Option<PathBuf>,
    /// `--allow-outside-workdir`
    pub allow_outside_workdir: Option<bool>,
    /// `--no-sandbox` (as `SandboxMode::Off`)
    pub sandbox: Option<SandboxMode>,
}

/// Where a setting's value came from, for `hermes config show`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag.
    Flag,
    /// A process environment variable (named).
    Env(&'static str),
    /// `$HERMES_HOME/.env` (variable named).
    DotEnv(&'static str),
    /// `$HERMES_HOME/config.toml` (key named).
    ConfigFile(&'static str),
    /// The built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag => f.write_str("command line"),
            Origin::Env(v) => write!(f, "environment ${v}"),
            Origin::DotEnv(v) => write!(f, ".env {v}"),
            Origin::ConfigFile(k) => write!(f, "config.toml {k}"),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// The provider to talk to.
#[derive(Clone, PartialEq)]
pub struct ProviderSettings {
    /// The OpenAI-compatible base URL (…/v1).
    pub base_url: String,
    /// The API key, if any (local servers need none).
    pub api_key: Option<Secret>,
    /// The model name as the provider spells it.
    pub model: String,
    /// A short provider label: `openrouter`, `openai`, `anthropic`,
    /// `local` or `custom`.
    pub provider_name: String,
    /// The wire format (`[provider] api`).
    pub api: Api,
    /// Prompt-cache breakpoints (`[provider] cache`, SPEC X3).
    pub cache: CacheMode,
    /// A one-hour cache lifetime instead of five minutes (`cache_ttl = "1h"`).
    pub cache_ttl_1h: bool,
    /// `[provider] reasoning_effort` / `HERMES_REASONING_EFFORT`.
    pub reasoning_effort: Option<String>,
    /// `[provider] reasoning_echo`.
    pub reasoning_echo: EchoMode,
    /// `[provider] price`, dollars per million tokens.
    pub price: Option<Price>,
    /// The fallback chain, in order (SPEC X2).
    pub fallbacks: Vec<FallbackProvider>,
    /// How long one attempt waits for the response to begin
    /// (`HERMES_FIRST_BYTE_TIMEOUT`, `[provider] first_byte_timeout_secs`;
    /// default 30 s). See [`crate::client::ClientOptions::first_byte_timeout`].
    pub first_byte_timeout: Duration,
    /// How long a call may take, retries included, until its answer starts
    /// (`HERMES_CALL_TIMEOUT`, `[provider] call_timeout_secs`; default 90 s).
    /// See [`crate::client::ClientOptions::call_timeout`].
    pub call_timeout: Duration,
}

impl ProviderSettings {
    /// The base URL for display, credentials masked ([`redact_url`]).
    pub fn display_url(&self) -> std::borrow::Cow<'_, str> {
        redact_url(&self.base_url)
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("base_url", &self.display_url())
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("provider_name", &self.provider_name)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("api", &self.api)
            .field("cache", &self.cache)
            .field("cache_ttl_1h", &self.cache_ttl_1h)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("reasoning_echo", &self.reasoning_echo)
            .field("price", &self.price)
            .field("fallbacks", &self.fallbacks)
            .finish()
    }
}

/// Everything resolved. `Debug` shows no secret: keys are [`Secret`]s, the
/// database URL has its password cut out, the environment shows only its
/// variables' names and the configuration file its strings masked.
#[derive(Clone)]
pub struct Settings {
    /// `$HERMES_HOME` (default `~/.hermes`).
    pub home: PathBuf,
    /// The provider.
    pub provider: ProviderSettings,
    /// The wallet size of a run (default 90).
    pub max_iterations: u32,
    /// The repeat guard (`[agent] repeat_guard`, SPEC Y6); `None` when off.
    pub repeat_guard: Option<hermes_core::RepeatGuard>,
    /// Whether tool calls a model writes as text are run (`[agent]
    /// text_tool_calls`, `HERMES_TEXT_TOOL_CALLS`; default on, issue 38).
    pub text_tool_calls: bool,
    /// The model's context window in tokens, when set
    /// (`[provider] context_length`, `HERMES_CONTEXT_LENGTH`); otherwise it is
    /// asked of the provider (see [`crate::context`]).
    pub context_length: Option<u32>,
    /// The model that writes compaction summaries
    /// (`[provider] compression_model`, `HERMES_COMPRESSION_MODEL`); `None`:
    /// the conversation's own model.
    pub compression_model: Option<String>,
    /// Compact before a call whose estimated request passes this percentage
    /// of the window (`[agent] compress_threshold`,
    /// `HERMES_COMPRESS_THRESHOLD`; 10–95, default 70).
    pub compress_threshold: u8,
    /// How long a summariser that failed is left alone, compactions making
    /// the automatic digest meanwhile (`[agent] summarizer_cooldown_secs`,
    /// at least 1; default 600).
    pub summarizer_cooldown: std::time::Duration,
    /// Enabled toolsets; `None` = all.
    pub toolsets: Option<Vec<String>>,
    /// The working directory the file and shell tools are confined to.
    pub workdir: PathBuf,
    /// Whether the file tools may reach paths outside `workdir`
    /// (`[agent] allow_outside_workdir`, `--allow-outside-workdir`).
    pub allow_outside_workdir: bool,
    /// Whether the terminal runs commands in the sandbox (`[agent] sandbox`
    /// = "on" | "off", `--no-sandbox`).
    pub sandbox: SandboxMode,
    /// Variables passed to terminal commands besides the allow-list
    /// (`[agent] env_passthrough`).
    pub env_passthrough: Vec<String>,
    /// Extra paths sandboxed commands may read (`[agent] sandbox_read`).
    pub sandbox_read: Vec<PathBuf>,
    /// Extra paths sandboxed commands may write (`[agent] sandbox_write`).
    pub sandbox_write: Vec<PathBuf>,
    /// The PostgreSQL database to use instead of `$HERMES_HOME/state.db`
    /// (`HERMES_DATABASE_URL`, `[store] url`; may hold a password — shown
    /// only through [`crate::store::mask_url`]).
    pub store_url: Option<String>,
    /// Images and voice (SPEC X6): vision, the describing model,
    /// transcription.
    pub media: MediaSettings,
    /// Whether dangerous commands need approval (`[agent] approvals` =
    /// "ask" | "off").
    pub approvals: ApprovalMode,
    /// How long the gateway waits for `/approve` or `/deny`
    /// (`[agent] approval_timeout`, seconds).
    pub approval_timeout: std::time::Duration,
    /// How long a `clarify` question waits for the user's answer
    /// (`[agent] clarify_timeout`, seconds; issue 46).
    pub clarify_timeout: std::time::Duration,
    /// `[web]`: the search backend and its keys (`BRAVE_API_KEY`,
    /// `TAVILY_API_KEY` from the environment).
    pub web_search: WebSearchSettings,
    /// `[mcp.servers.*]`, validated; secrets expanded.
    pub mcp_servers: Vec<ServerConfig>,
    /// The whole `config.toml` (the gateway reads its `[gateway]` section).
    pub file: toml::Table,
    /// The process environment laid over `$HERMES_HOME/.env`.
    pub env: Environment,
    /// Where each provider/agent setting came from, by setting name.
    pub origins: BTreeMap<&'static str, Origin>,
}

impl Settings {
    /// The path of the session database.
    pub fn state_db(&self) -> PathBuf {
        self.home.join("state.db")
    }

    /// The database sessions live in: the PostgreSQL URL when one is set,
    /// else the SQLite file [`Settings::state_db`].
    pub fn store_target(&self) -> crate::store::StoreTarget {
        match &self.store_url {
            Some(url) => crate::store::StoreTarget::Postgres(url.clone()),
            None => crate::store::StoreTarget::Sqlite(self.state_db()),
        }
    }

    /// A variable from the process environment or, failing that, `.env`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every field by name, so a new one cannot be shown raw by default:
        // it does not compile until it is added here.
        let Settings {
            home,
            provider,
            max_iterations,
            repeat_guard,
            text_tool_calls,
            context_length,
            compression_model,
            compress_threshold,
            summarizer_cooldown,
            toolsets,
            workdir,
            allow_outside_workdir,
            sandbox,
            env_passthrough,
            sandbox_read,
            sandbox_write,
            store_url,
            media,
            approvals,
            approval_timeout,
            clarify_timeout,
            web_search,
            mcp_servers,
            file,
            env,
            origins,
        } = self;
        f.debug_struct("Settings")
            .field("home", home)
            .field("provider", provider)
            .field("max_iterations", max_iterations)
            .field("repeat_guard", repeat_guard)
            .field("text_tool_calls", text_tool_calls)
            .field("context_length", context_length)
            .field("compression_model", compression_model)
            .field("compress_threshold", compress_threshold)
            .field("summarizer_cooldown", summarizer_cooldown)
            .field("toolsets", toolsets)
            .field("workdir", workdir)
            .field("allow_outside_workdir", allow_outside_workdir)
            .field("sandbox", sandbox)
            .field("env_passthrough", env_passthrough)
            .field("sandbox_read", sandbox_read)
            .field("sandbox_write", sandbox_write)
            .field(
                "store_url",
                &store_url.as_deref().map(crate::store::mask_url),
            )
            .field("media", media)
            .field("approvals", approvals)
            .field("approval_timeout", approval_timeout)
            .field("clarify_timeout", clarify_timeout)
            .field("web_search", web_search)
            .field("mcp_servers", mcp_servers)
            .field("file", &MaskedTable(file))
            .field("env", env)
            .field("origins", origins)
            .finish()
    }
}

/// A `config.toml` table for `Debug`: its sections, keys, numbers and
/// flags, every string [`mask`]ed — a key or a password may sit under any
/// section (`[provider]`, `[email]`, an MCP server's `env`).
struct MaskedTable<'a>(&'a toml::Table);

impl fmt::Debug for MaskedTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, MaskedValue(v))))
            .finish()
    }
}

/// One value of a [`MaskedTable`].
struct MaskedValue<'a>(&'a toml::Value);

impl fmt::Debug for MaskedValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            toml::Value::String(s) => fmt::Debug::fmt(&mask(s), f),
            toml::Value::Table(t) => fmt::Debug::fmt(&MaskedTable(t), f),
            toml::Value::Array(items) => f
                .debug_list()
                .entries(items.iter().map(MaskedValue))
                .finish(),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// A configuration that cannot be used. Each message names the key and the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `config.toml` is not valid TOML or has a key of the wrong type.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A line of `$HERMES_HOME/.env` cannot be read or names a misspelt variable.
    #[error("{}:{line}: {message}", path.display())]
    DotEnv {
        /// The file.
        path: PathBuf,
        /// The line number (from 1).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Several of the problems above, one per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several(Vec<ConfigError>),
    /// A file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A value is out of range or malformed.
    #[error("invalid {key}: {message}")]
    Invalid {
        /// The setting (flag, variable or key).
        key: String,
        /// What is wrong and what would be accepted.
        message: String,
    },
    /// No home directory could be found for the default `$HERMES_HOME`.
    #[error("cannot find a home directory: set HERMES_HOME to the folder Hermes should use")]
    NoHome,
}

/// `$HERMES_HOME`, or `~/.hermes`.
pub fn hermes_home(env: &Environment) -> Result<PathBuf, ConfigError> {
    if let Some(home) = env.get("HERMES_HOME") {
        return Ok(PathBuf::from(home));
    }
    env.get("HOME")
        .map(|h| Path::new(h).join(".hermes"))
        .ok_or(ConfigError::NoHome)
}

/// Parses a `.env` file: `KEY=value` lines, `#` comments, optional `export`,
/// single or double quotes around the value.
pub fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')))
        {
            &value[1..value.len() - 1]
        } else {
            // An unquoted value ends at an inline comment.
            value.split(" #").next().unwrap_or(value).trim_end()
        };
        out.insert(key.to_owned(), value.to_owned());
    }
    out
}

/// Splits a comma-separated list, dropping empty items.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn provider_label(base_url: &str) -> &'static str {
    if base_url.contains("openrouter.ai") {
        "openrouter"
    } else if base_url.contains("api.openai.com") {
        "openai"
    } else if base_url.contains("127.0.0.1") || base_url.contains("localhost") {
        "local"
    } else {
        "custom"
    }
}

fn validate_url(url: &str, origin: Origin) -> Result<(), ConfigError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            key: format!("base_url (from {origin})"),
            message: format!(
                "'{}' must start with http:// or https://",
                crate::redact::redact_url(url)
            ),
        })
    }
}
