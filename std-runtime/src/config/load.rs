//! [`load`]: every source read and merged into [`Settings`], in the
//! precedence the module docs give.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::resolve::{Resolver, first_of};
use super::{
    ANTHROPIC_BASE_URL, ANTHROPIC_DEFAULT_MODEL, Api, ConfigError, Environment, LOCAL_BASE_URL,
    LOCAL_DEFAULT_MODEL, OPENROUTER_BASE_URL, OPENROUTER_DEFAULT_MODEL, Origin, Overrides,
    ProviderSettings, Settings, TOOLSET_NAMES, check_dotenv, check_file, hermes_home, media,
    parse_dotenv, provider, split_list, validate, validate_url,
};
use crate::client::{DEFAULT_CALL_TIMEOUT, DEFAULT_FIRST_BYTE_TIMEOUT};
use crate::secret::Secret;
/// How long a failed summariser is left alone by default (ten minutes).
const DEFAULT_SUMMARIZER_COOLDOWN: std::time::Duration =
    std::time::Duration::from_millis(hermes_core::context::DEFAULT_SUMMARIZER_COOLDOWN_MS);

use crate::tools::{ApprovalMode, SandboxMode, SearchBackend, WebSearchSettings};

/// Reads `path` if it exists.
fn read_optional(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Resolves settings from `overrides`, the environment `process_env`, and the
/// files in `$HERMES_HOME`.
pub fn load(overrides: &Overrides, process_env: &Environment) -> Result<Settings, ConfigError> {
    let home = hermes_home(process_env)?;
    let dotenv_path = home.join(".env");
    let dotenv_text = read_optional(&dotenv_path)?;
    let mut problems = dotenv_text
        .as_deref()
        .map(|t| check_dotenv(t, &dotenv_path))
        .unwrap_or_default();
    let dotenv = dotenv_text.map(|t| parse_dotenv(&t)).unwrap_or_default();
    let toml_path = home.join("config.toml");
    let file: toml::Table = match read_optional(&toml_path)? {
        Some(text) => text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::File {
                path: toml_path.clone(),
                message: e.message().trim_end().to_owned() + &toml_location(&text, e.span()),
            })?,
        None => toml::Table::new(),
    };
    problems.extend(check_file(&file, &toml_path));
    match problems.len() {
        0 => {}
        1 => return Err(problems.remove(0)),
        _ => return Err(ConfigError::Several(problems)),
    }

    let mut merged = dotenv.clone();
    for (k, v) in process_env.iter() {
        merged.insert(k.to_owned(), v.to_owned());
    }
    // The spending caps (issue 44) are read where they are used; refused
    // here already so that every command, `hermes config` and the doctor
    // included, names a bad value before anything runs.
    spending_limits(&file, &merged)?;
    let resolver = Resolver {
        process_env,
        dotenv: &dotenv,
        file: &file,
        toml_path: &toml_path,
    };
    let mut origins = BTreeMap::new();

    let openrouter_key_present = resolver.var("OPENROUTER_API_KEY").is_some();
    let base_url = first_of(
        overrides.base_url.clone(),
        &resolver,
        &["HERMES_BASE_URL", "OPENAI_BASE_URL"],
        ("provider", "base_url"),
    )?;
    let api = provider::resolve_api(&resolver, base_url.is_some())?;
    let (base_url, base_origin) = match base_url {
        Some(found) => found,
        None if api == Api::Anthropic => (ANTHROPIC_BASE_URL.to_owned(), Origin::Default),
        None if openrouter_key_present => (OPENROUTER_BASE_URL.to_owned(), Origin::Default),
        None => (LOCAL_BASE_URL.to_owned(), Origin::Default),
    };
    validate_url(&base_url, base_origin)?;
    let provider_name = provider::label(&base_url).to_owned();
    // A vendor's key goes only to that vendor: OPENROUTER_API_KEY is never
    // sent to OpenAI or a custom server, nor OPENAI_API_KEY to OpenRouter.
    let key_vars: &[&'static str] = match provider_name.as_str() {
        "openrouter" => &["HERMES_API_KEY", "OPENROUTER_API_KEY"],
        "anthropic" => &["HERMES_API_KEY", "ANTHROPIC_API_KEY"],
        _ if api == Api::Anthropic => &["HERMES_API_KEY", "ANTHROPIC_API_KEY"],
        _ => &["HERMES_API_KEY", "OPENAI_API_KEY"],
    };
    let api_key = first_of(
        overrides.api_key.as_ref().map(|k| k.expose().to_owned()),
        &resolver,
        key_vars,
        ("provider", "api_key"),
    )?;
    let (model, model_origin) = first_of(
        overrides.model.clone(),
        &resolver,
        &["HERMES_MODEL"],
        ("provider", "model"),
    )?
    .unwrap_or_else(|| {
        let m = if provider_name == "openrouter" {
            OPENROUTER_DEFAULT_MODEL
        } else if api == Api::Anthropic {
            ANTHROPIC_DEFAULT_MODEL
        } else {
            LOCAL_DEFAULT_MODEL
        };
        (m.to_owned(), Origin::Default)
    });
    origins.insert("base_url", base_origin);
    origins.insert("model", model_origin);
    let api_key = api_key.map(|(k, o)| {
        origins.insert("api_key", o);
        k
    });
    let extras = provider::resolve_extras(&resolver, &base_url, api_key.as_deref(), &mut origins)?;

    let (first_byte_timeout, origin) = resolver.seconds(
        "HERMES_FIRST_BYTE_TIMEOUT",
        ("provider", "first_byte_timeout_secs"),
        DEFAULT_FIRST_BYTE_TIMEOUT,
    )?;
    origins.insert("first_byte_timeout", origin);
    let (call_timeout, origin) = resolver.seconds(
        "HERMES_CALL_TIMEOUT",
        ("provider", "call_timeout_secs"),
        DEFAULT_CALL_TIMEOUT,
    )?;
    origins.insert("call_timeout", origin);

    let (max_iterations, it_origin) = match overrides.max_iterations {
        Some(n) => (n, Origin::Flag),
        None => match resolver.var("HERMES_MAX_ITERATIONS") {
            Some((v, o)) => (
                v.parse::<u32>().map_err(|_| ConfigError::Invalid {
                    key: "HERMES_MAX_ITERATIONS".into(),
                    message: format!("'{v}' is not a whole number"),
                })?,
                o,
            ),
            None => match resolver.toml_int("agent", "max_iterations")? {
                Some(n) => (n, Origin::ConfigFile("agent.max_iterations")),
                None => (hermes_core::DEFAULT_MAX_ITERATIONS, Origin::Default),
            },
        },
    };
    if max_iterations == 0 {
        return Err(ConfigError::Invalid {
            key: "max_iterations".into(),
            message: "must be at least 1".into(),
        });
    }
    origins.insert("max_iterations", it_origin);
    let repeat_guard = super::repeat::repeat_guard(&resolver)?;
    let text_tool_calls = match resolver.var("HERMES_TEXT_TOOL_CALLS") {
        Some((v, o)) => {
            origins.insert("text_tool_calls", o);
            super::media::parse_bool("HERMES_TEXT_TOOL_CALLS", v)?
        }
        None => match resolver.toml_bool("agent", "text_tool_calls")? {
            Some(on) => {
                origins.insert(
                    "text_tool_calls",
                    Origin::ConfigFile("agent.text_tool_calls"),
                );
                on
            }
            None => true,
        },
    };

    let context_length = match resolver.var("HERMES_CONTEXT_LENGTH") {
        Some((v, o)) => Some((
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= hermes_core::context::MIN_WINDOW_TOKENS)
                .ok_or_else(|| ConfigError::Invalid {
                    key: "HERMES_CONTEXT_LENGTH".into(),
                    message: format!(
                        "'{v}' is not a number of tokens (at least {})",
                        hermes_core::context::MIN_WINDOW_TOKENS
                    ),
                })?,
            o,
        )),
        None => match resolver.toml_int("provider", "context_length")? {
            Some(n) if n < hermes_core::context::MIN_WINDOW_TOKENS => {
                return Err(ConfigError::File {
                    path: toml_path.clone(),
                    message: format!(
                        "[provider] context_length must be at least {} tokens",
                        hermes_core::context::MIN_WINDOW_TOKENS
                    ),
                });
            }
            Some(n) => Some((n, Origin::ConfigFile("provider.context_length"))),
            None => None,
        },
    };
    let context_length = context_length.map(|(n, o)| {
        origins.insert("context_length", o);
        n
    });
    let compression_model = match resolver.var("HERMES_COMPRESSION_MODEL") {
        Some((v, o)) => Some((v.trim().to_owned(), o)),
        None => resolver
            .toml_str("provider", "compression_model")?
            .filter(|m| !m.trim().is_empty())
            .map(|m| {
                (
                    m.trim().to_owned(),
                    Origin::ConfigFile("provider.compression_model"),
                )
            }),
    };
    let compression_model = compression_model.map(|(m, o)| {
        origins.insert("compression_model", o);
        m
    });
    let (compress_threshold, th_origin) = match resolver.var("HERMES_COMPRESS_THRESHOLD") {
        Some((v, o)) => (v.trim().parse::<u32>().ok(), o),
        None => match resolver.toml_int("agent", "compress_threshold")? {
            Some(n) => (Some(n), Origin::ConfigFile("agent.compress_threshold")),
            None => (Some(70), Origin::Default),
        },
    };
    let compress_threshold = compress_threshold
        .filter(|n| (10..=95).contains(n))
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| ConfigError::Invalid {
            key: format!("compress_threshold (from {th_origin})"),
            message: "must be a percentage of the context window between 10 and 95".into(),
        })?;
    origins.insert("compress_threshold", th_origin);

    let store_url = match resolver.var("HERMES_DATABASE_URL") {
        Some((v, o)) => Some((v.trim().to_owned(), o)),
        None => resolver
            .toml_str("store", "url")?
            .map(|u| (u.trim().to_owned(), Origin::ConfigFile("store.url"))),
    }
    .filter(|(u, _)| !u.is_empty());
    if let Some((url, origin)) = &store_url {
        if !crate::store::is_postgres_url(url) {
            return Err(ConfigError::Invalid {
                key: format!("store url (from {origin})"),
                message: format!(
                    "'{}' must be a PostgreSQL URL (postgresql://user:password@host:5432/db, or \
                     postgresql:///db?host=/run/postgresql for a unix socket); leave it unset \
                     for the SQLite file in $HERMES_HOME",
                    crate::store::mask_url(url)
                ),
            });
        }
        origins.insert("store_url", *origin);
    }
    let store_url = store_url.map(|(u, _)| u);

    let toolsets = match &overrides.toolsets {
        Some(t) => Some(toolset_list(t, "--toolsets")?),
        None => match resolver.var("HERMES_TOOLSETS") {
            Some((v, _)) => Some(toolset_list(&[v.to_owned()], "HERMES_TOOLSETS")?),
            None => resolver
                .toml_string_list("agent", "toolsets")?
                .map(|t| toolset_list(&t, "[agent] toolsets"))
                .transpose()?,
        },
    };

    let workdir = match &overrides.workdir {
        Some(p) => p.clone(),
        None => match resolver.toml_str("agent", "workdir")? {
            Some(p) => PathBuf::from(p),
            None => std::env::current_dir().map_err(|e| ConfigError::Invalid {
                key: "--cwd".into(),
                message: format!("the current directory is not usable ({e}); pass --cwd"),
            })?,
        },
    };

    let allow_outside_workdir = match overrides.allow_outside_workdir {
        Some(b) => b,
        None => resolver
            .toml_bool("agent", "allow_outside_workdir")?
            .unwrap_or(false),
    };
    let sandbox = match overrides.sandbox {
        Some(m) => m,
        None => match resolver.toml_value("agent", "sandbox") {
            None => SandboxMode::On,
            Some(toml::Value::Boolean(true)) => SandboxMode::On,
            Some(toml::Value::Boolean(false)) => SandboxMode::Off,
            Some(toml::Value::String(v)) => SandboxMode::parse(v)
                .ok_or_else(|| resolver.type_error("agent", "sandbox", "\"on\" or \"off\""))?,
            Some(_) => return Err(resolver.type_error("agent", "sandbox", "\"on\" or \"off\"")),
        },
    };
    let env_passthrough = resolver
        .toml_string_list("agent", "env_passthrough")?
        .unwrap_or_default();
    for name in &env_passthrough {
        if crate::env::is_hermes_credential(name) {
            tracing::warn!(
                "[agent] env_passthrough names {name}, one of hermes's own credentials: \
                 it is never passed to commands"
            );
        }
    }
    let user_home = process_env.get("HOME").map(PathBuf::from);
    let expand = |p: String| -> PathBuf {
        match (p.strip_prefix("~/"), &user_home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ if p == "~" => user_home.clone().unwrap_or_else(|| PathBuf::from(&p)),
            _ => PathBuf::from(p),
        }
    };
    let sandbox_read: Vec<PathBuf> = resolver
        .toml_string_list("agent", "sandbox_read")?
        .unwrap_or_default()
        .into_iter()
        .map(&expand)
        .collect();
    let sandbox_write: Vec<PathBuf> = resolver
        .toml_string_list("agent", "sandbox_write")?
        .unwrap_or_default()
        .into_iter()
        .map(&expand)
        .collect();
    let media = media::load(&resolver, &mut origins)?;

    let approvals = match resolver.toml_value("agent", "approvals") {
        None => ApprovalMode::Ask,
        Some(toml::Value::Boolean(true)) => ApprovalMode::Ask,
        Some(toml::Value::Boolean(false)) => ApprovalMode::Off,
        Some(toml::Value::String(v)) => ApprovalMode::parse(v)
            .ok_or_else(|| resolver.type_error("agent", "approvals", "\"ask\" or \"off\""))?,
        Some(_) => return Err(resolver.type_error("agent", "approvals", "\"ask\" or \"off\"")),
    };
    let approval_timeout = match resolver.toml_int("agent", "approval_timeout")? {
        None => crate::tools::approval::DEFAULT_APPROVAL_TIMEOUT,
        Some(0) => {
            return Err(resolver.type_error("agent", "approval_timeout", "at least 1 (seconds)"));
        }
        Some(n) => std::time::Duration::from_secs(u64::from(n)),
    };
    let clarify_timeout = match resolver.toml_int("agent", "clarify_timeout")? {
        None => crate::tools::clarify::DEFAULT_CLARIFY_TIMEOUT,
        Some(0) => {
            return Err(resolver.type_error("agent", "clarify_timeout", "at least 1 (seconds)"));
        }
        Some(n) => std::time::Duration::from_secs(u64::from(n)),
    };
    let summarizer_cooldown = match resolver.toml_int("agent", "summarizer_cooldown_secs")? {
        None => DEFAULT_SUMMARIZER_COOLDOWN,
        Some(0) => {
            return Err(resolver.type_error(
                "agent",
                "summarizer_cooldown_secs",
                "at least 1 (seconds)",
            ));
        }
        Some(n) => std::time::Duration::from_secs(u64::from(n)),
    };
    let web_search = web_search_settings(&resolver)?;
    let merged_env = Environment(merged);
    let mcp_servers =
        crate::mcp::config::parse(&file, &merged_env).map_err(|e| ConfigError::File {
            path: toml_path.clone(),
            message: e.to_string(),
        })?;

    Ok(Settings {
        home,
        provider: ProviderSettings {
            base_url,
            api_key: api_key.map(Secret::from),
            model,
            provider_name,
            first_byte_timeout,
            call_timeout,
            api,
            cache: extras.cache,
            cache_ttl_1h: extras.cache_ttl_1h,
            reasoning_effort: extras.reasoning_effort,
            reasoning_echo: extras.reasoning_echo,
            price: extras.price,
            fallbacks: extras.fallbacks,
        },
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
        env: merged_env,
        origins,
    })
}

/// The toolsets named by `items` (each may itself be comma-separated, with
/// spaces: `"file, todo"`); `none` names no toolset, so `none` alone
/// enables no tools. Unknown names are an error with a suggestion.
fn toolset_list(items: &[String], key: &str) -> Result<Vec<String>, ConfigError> {
    let list: Vec<String> = items.iter().flat_map(|i| split_list(i)).collect();
    validate::check_names(&list, TOOLSET_NAMES).map_err(|why| ConfigError::Invalid {
        key: key.to_owned(),
        message: why.trim_start_matches("has ").to_owned(),
    })?;
    Ok(list.into_iter().filter(|t| t != "none").collect())
}

/// ` (line L, column C)` for a TOML parse error's byte span.
fn toml_location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(start) = span.map(|s| s.start).filter(|s| *s <= text.len()) else {
        return String::new();
    };
    let before = text.get(..start).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" (line {line}, column {column})")
}

/// `[web] search_backend`, `[web] searxng_url` (or `SEARXNG_URL`), and the
/// API keys from the environment. A backend chosen explicitly must have
/// what it needs.
fn web_search_settings(r: &Resolver<'_>) -> Result<WebSearchSettings, ConfigError> {
    let backend = match r.toml_str("web", "search_backend")? {
        None => None,
        Some(v) => SearchBackend::parse(v).map_err(|_| {
            r.type_error(
                "web",
                "search_backend",
                "one of \"auto\", \"searxng\", \"brave\", \"tavily\", \"duckduckgo\"",
            )
        })?,
    };
    let searxng_url = match r.toml_str("web", "searxng_url")? {
        Some(u) => Some(u.to_owned()),
        None => r.var("SEARXNG_URL").map(|(v, _)| v.to_owned()),
    };
    if let Some(url) = &searxng_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(r.type_error("web", "searxng_url", "an http:// or https:// URL"));
    }
    let settings = WebSearchSettings {
        backend,
        searxng_url,
        brave_api_key: r.var("BRAVE_API_KEY").map(|(v, _)| v.into()),
        tavily_api_key: r.var("TAVILY_API_KEY").map(|(v, _)| v.into()),
        ..WebSearchSettings::default()
    };
    if let Some(missing) = settings.missing() {
        return Err(ConfigError::Invalid {
            key: "[web] search_backend".into(),
            message: format!(
                "\"{}\" needs {missing}",
                settings.effective_backend().name()
            ),
        });
    }
    Ok(settings)
}

/// `[limits]` and `HERMES_LIMIT_*` as [`crate::spending::SpendingLimits`]
/// reads them, or the first bad value.
fn spending_limits(
    file: &toml::Table,
    vars: &BTreeMap<String, String>,
) -> Result<crate::spending::SpendingLimits, ConfigError> {
    let var = |name: &str| vars.get(name).map(String::as_str);
    let gateway_tz = file
        .get("gateway")
        .and_then(|g| g.get("timezone"))
        .and_then(toml::Value::as_str);
    let owner = crate::memory_scope::MemorySettings::from_config(file, var("HERMES_MEMORY_OWNER"))
        .ok()
        .and_then(|m| m.owner);
    crate::spending::SpendingLimits::from_config(file, var, gateway_tz, owner.as_deref()).map_err(
        |e| ConfigError::Invalid {
            key: e.key,
            message: e.message,
        },
    )
}

impl Settings {
    /// The spending caps (issue 44): `[limits]` with its `HERMES_LIMIT_*`
    /// variables, days and months in `[limits] timezone` (default
    /// `[gateway] timezone`). Checked when the settings were loaded.
    pub fn spending_limits(&self) -> Result<crate::spending::SpendingLimits, ConfigError> {
        let vars: BTreeMap<String, String> = crate::spending::LIMIT_VARS
            .iter()
            .map(|(name, _)| *name)
            .chain(["HERMES_MEMORY_OWNER"])
            .filter_map(|name| Some((name.to_owned(), self.var(name)?.to_owned())))
            .collect();
        spending_limits(&self.file, &vars)
    }
}
