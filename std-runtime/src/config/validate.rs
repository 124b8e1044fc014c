//! What a configuration may say, in one place, and the checks that turn a
//! typo into an error with a suggestion instead of a silent default.
//!
//! [`SECTIONS`] lists every `config.toml` section and key with the kind of
//! value it takes; [`KNOWN_VARS`](crate::env::KNOWN_VARS) lists the environment variables (also
//! accepted in `$HERMES_HOME/.env`). **Adding a setting means adding its line
//! here**; the loader, `hermes doctor` and start-up all check against these
//! tables. The `[gateway]` section's own keys are checked by the gateway
//! (`hermes_gateway::config`), which knows them. A platform's section
//! (`[discord]`, `[email]`, `[api_server]`) is also in its descriptor
//! (`hermes_gateway::platform`), whose tests fail when the two differ.

use std::path::Path;

use super::ConfigError;
use crate::env::KNOWN_VARS;

/// The kind of value a key takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Any string.
    Str,
    /// An `http://` or `https://` URL.
    Url,
    /// A whole number ≥ 1.
    PositiveInt,
    /// A whole number ≥ 0.
    Int,
    /// `true` or `false`.
    Bool,
    /// A list of strings, or one comma-separated string.
    List,
    /// A list (or comma-separated string) of these names.
    ListOf(&'static [&'static str]),
    /// One of these names.
    OneOf(&'static [&'static str]),
    /// A table or a list of tables (`price = {…}`, `[[provider.fallback]]`),
    /// whose contents the code that reads it checks and names.
    Tables,
    /// A table (checked by the code that reads it), or `false` / `"off"`.
    TableOrOff,
    /// A number, or a string holding one (range checked by the code that
    /// reads it, which names the bounds: the spending caps).
    Amount,
}

/// A key of a section.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key as written in `config.toml`.
    pub name: &'static str,
    /// What it takes.
    pub kind: Kind,
}

/// How a section's keys are checked.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    /// Exactly these keys.
    These(&'static [Key]),
    /// Another crate checks them (the gateway its own section).
    CheckedElsewhere,
}

/// A `config.toml` section.
#[derive(Clone, Copy, Debug)]
pub struct Section {
    /// `[name]`.
    pub name: &'static str,
    /// Its keys.
    pub keys: Keys,
}

const fn key(name: &'static str, kind: Kind) -> Key {
    Key { name, kind }
}

/// Toolset names a configuration may list; `none` enables no tools.
pub const TOOLSET_NAMES: &[&str] = &[
    "file",
    "terminal",
    "web",
    "memory",
    "todo",
    "skills",
    "delegate",
    "mcp",
    "cronjob",
    "session_search",
    "send_file",
    "send_message",
    "vision",
    "clarify",
    "none",
];

/// Every section of `config.toml` and its keys.
pub const SECTIONS: &[Section] = &[
    Section {
        name: "provider",
        keys: Keys::These(&[
            key("base_url", Kind::Url),
            key("api_key", Kind::Str),
            key("model", Kind::Str),
            key("context_length", Kind::PositiveInt),
            key("compression_model", Kind::Str),
            key("first_byte_timeout_secs", Kind::PositiveInt),
            key("call_timeout_secs", Kind::PositiveInt),
            key("vision", Kind::Bool),
            key("vision_model", Kind::Str),
            key("api", Kind::OneOf(&["openai", "anthropic"])),
            key("cache", Kind::OneOf(&["auto", "anthropic", "off"])),
            key("cache_ttl", Kind::OneOf(&["5m", "1h"])),
            key("reasoning_effort", Kind::Str),
            key(
                "reasoning_echo",
                Kind::OneOf(&["auto", "off", "reasoning_content", "reasoning_details"]),
            ),
            key("price", Kind::Tables),
            key("fallback", Kind::Tables),
        ]),
    },
    Section {
        name: "agent",
        keys: Keys::These(&[
            key("max_iterations", Kind::PositiveInt),
            key("toolsets", Kind::ListOf(TOOLSET_NAMES)),
            key("workdir", Kind::Str),
            key("send_message_targets", Kind::List),
            key("background_max", Kind::PositiveInt),
            key("background_timeout", Kind::PositiveInt),
            key("background_output_cap", Kind::PositiveInt),
            key("compress_threshold", Kind::PositiveInt),
            key("sandbox", Kind::OneOf(&["on", "off"])),
            key("allow_outside_workdir", Kind::Bool),
            key("env_passthrough", Kind::List),
            key("sandbox_read", Kind::List),
            key("sandbox_write", Kind::List),
            key("approvals", Kind::OneOf(&["ask", "off"])),
            key("approval_timeout", Kind::PositiveInt),
            key("clarify_timeout", Kind::PositiveInt),
            key("summarizer_cooldown_secs", Kind::PositiveInt),
            key("repeat_guard", Kind::TableOrOff),
            key("text_tool_calls", Kind::Bool),
        ]),
    },
    Section {
        // Whose memory is whose (`memory_scope::MemorySettings`).
        name: "memory",
        keys: Keys::These(&[key("owner", Kind::Str), key("shared_writers", Kind::List)]),
    },
    Section {
        // Spending caps (issue 44; `crate::spending`, which checks the
        // ranges and the time zone).
        name: "limits",
        keys: Keys::These(&[
            key("user_day_tokens", Kind::Amount),
            key("user_month_tokens", Kind::Amount),
            key("user_day_usd", Kind::Amount),
            key("user_month_usd", Kind::Amount),
            key("bot_day_usd", Kind::Amount),
            key("bot_month_usd", Kind::Amount),
            key("timezone", Kind::Str),
            key("owner_exempt", Kind::Bool),
            key("unattended_account", Kind::Str),
        ]),
    },
    Section {
        name: "store",
        keys: Keys::These(&[key("url", Kind::Str)]),
    },
    Section {
        name: "transcription",
        keys: Keys::These(&[
            key("base_url", Kind::Url),
            key("api_key", Kind::Str),
            key("model", Kind::Str),
            key("language", Kind::Str),
            key("timeout_secs", Kind::PositiveInt),
        ]),
    },
    Section {
        // Spoken answers (`media::tts::TtsSettings`).
        name: "tts",
        keys: Keys::These(&[
            key("base_url", Kind::Url),
            key("api_key", Kind::Str),
            key("model", Kind::Str),
            key("voice", Kind::Str),
            key(
                "format",
                Kind::OneOf(&["opus", "mp3", "aac", "flac", "wav"]),
            ),
            key("max_chars", Kind::PositiveInt),
            key("timeout_secs", Kind::PositiveInt),
        ]),
    },
    Section {
        name: "web",
        keys: Keys::These(&[
            key(
                "search_backend",
                Kind::OneOf(&["auto", "searxng", "brave", "tavily", "duckduckgo"]),
            ),
            key("searxng_url", Kind::Url),
        ]),
    },
    Section {
        // `[mcp.servers.NAME]` tables; `mcp::config` checks their keys.
        name: "mcp",
        keys: Keys::CheckedElsewhere,
    },
    Section {
        name: "gateway",
        keys: Keys::CheckedElsewhere,
    },
    Section {
        // The Discord adapter (hermes_discord) checks the values'
        // shapes further (ids are numbers).
        name: "discord",
        keys: Keys::These(&[
            key("bot_token", Kind::Str),
            key("allowed_users", Kind::List),
            key("require_mention", Kind::Bool),
            key("free_response_channels", Kind::List),
            key("home_channel", Kind::Str),
            key("api_url", Kind::Url),
        ]),
    },
    Section {
        // The Signal adapter (hermes_signal) checks the values' shapes
        // further (numbers, UUIDs).
        name: "signal",
        keys: Keys::These(&[
            key("http_url", Kind::Url),
            key("account", Kind::Str),
            key("allowed_users", Kind::List),
            key("home_channel", Kind::Str),
            key("require_mention", Kind::Bool),
        ]),
    },
    Section {
        // The Email adapter (hermes_gateway::email) checks the values
        // further (addresses, `none` only towards loopback).
        name: "email",
        keys: Keys::These(&[
            key("address", Kind::Str),
            key("password", Kind::Str),
            key("imap_host", Kind::Str),
            key("imap_port", Kind::PositiveInt),
            key("imap_security", Kind::OneOf(&["tls", "starttls", "none"])),
            key("smtp_host", Kind::Str),
            key("smtp_port", Kind::PositiveInt),
            key("smtp_security", Kind::OneOf(&["tls", "starttls", "none"])),
            key("allowed_users", Kind::List),
            key("poll_interval", Kind::PositiveInt),
            key("home_address", Kind::Str),
        ]),
    },
    Section {
        // The WhatsApp adapter (hermes_whatsapp) checks the values further
        // (phone numbers and ids are digits).
        name: "whatsapp",
        keys: Keys::These(&[
            key("access_token", Kind::Str),
            key("phone_number_id", Kind::Str),
            key("app_secret", Kind::Str),
            key("verify_token", Kind::Str),
            key("allowed_users", Kind::List),
            key("home_channel", Kind::Str),
            key("api_url", Kind::Url),
            key("webhook_host", Kind::Str),
            key("webhook_port", Kind::PositiveInt),
        ]),
    },
    Section {
        // The Slack adapter (hermes_slack) checks the values further
        // (xoxb-/xapp- tokens, member and channel ids).
        name: "slack",
        keys: Keys::These(&[
            key("bot_token", Kind::Str),
            key("app_token", Kind::Str),
            key("allowed_users", Kind::List),
            key("home_channel", Kind::Str),
            key("require_mention", Kind::Bool),
            key("api_url", Kind::Url),
        ]),
    },
    Section {
        // Scheduled jobs (SPEC Y1; `cron::CronSettings`).
        name: "cron",
        keys: Keys::These(&[
            key("catch_up", Kind::OneOf(&["once", "skip"])),
            key("silent_marker", Kind::Str),
        ]),
    },
    Section {
        // The gateway's OpenAI-compatible API server (`API_SERVER_*`).
        name: "api_server",
        keys: Keys::These(&[
            key("enabled", Kind::Bool),
            key("host", Kind::Str),
            key("port", Kind::Int),
            key("key", Kind::Str),
            key("model_name", Kind::Str),
            key("cors_origins", Kind::List),
            key("max_concurrent", Kind::PositiveInt),
        ]),
    },
    Section {
        // Webhooks in (`port`, `host`, a `[webhooks.NAME]` table per
        // route): checked by `hermes_gateway::webhook`.
        name: "webhooks",
        keys: Keys::CheckedElsewhere,
    },
];

/// Prefixes that only hermes uses: an unknown variable with one of them in
/// `.env` is a typo, not someone else's setting.
pub const OWNED_PREFIXES: &[&str] = &["HERMES_"];

/// The closest of `candidates` to `given`, if it is close enough to be the
/// likely intent (Jaro-Winkler ≥ 0.8, the threshold clap uses).
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given = given.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&given, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// ` (did you mean 'x'?)` or nothing.
pub fn suggestion<'a>(given: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(given, candidates)
        .map(|c| format!(" (did you mean '{c}'?)"))
        .unwrap_or_default()
}

/// Every problem in `file` (the parsed `config.toml` at `path`): unknown
/// sections and keys, values of the wrong kind, names outside a key's list.
pub fn check_file(file: &toml::Table, path: &Path) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    let err = |message: String| ConfigError::File {
        path: path.to_owned(),
        message,
    };
    for (name, value) in file {
        let Some(section) = SECTIONS.iter().find(|s| s.name == name) else {
            let hint = suggestion(name, SECTIONS.iter().map(|s| s.name));
            problems.push(err(match value {
                toml::Value::Table(_) => format!(
                    "unknown section [{name}]{hint}; sections are {}",
                    SECTIONS
                        .iter()
                        .map(|s| format!("[{}]", s.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => format!(
                    "unknown top-level key '{name}'{hint}; settings belong in a section such as [provider] or [agent]"
                ),
            }));
            continue;
        };
        let Some(table) = value.as_table() else {
            problems.push(err(format!("'{name}' must be a section ([{name}])")));
            continue;
        };
        let Keys::These(keys) = section.keys else {
            continue;
        };
        for (k, v) in table {
            match keys.iter().find(|key| key.name == k) {
                None => problems.push(err(format!(
                    "unknown key '{k}' in [{name}]{}; keys there are {}",
                    suggestion(k, keys.iter().map(|key| key.name)),
                    keys.iter()
                        .map(|key| key.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
                Some(key) => {
                    if let Err(why) = check_value(key.kind, v) {
                        problems.push(err(format!("[{name}] {k} {why}")));
                    }
                }
            }
        }
    }
    problems
}

/// Whether `value` is of `kind`; the error completes "`[section] key` …".
fn check_value(kind: Kind, value: &toml::Value) -> Result<(), String> {
    use toml::Value;
    match (kind, value) {
        (Kind::Str, Value::String(_)) | (Kind::Bool, Value::Boolean(_)) => Ok(()),
        (Kind::Url, Value::String(s)) if s.starts_with("http://") || s.starts_with("https://") => {
            Ok(())
        }
        (Kind::Url, Value::String(s)) => Err(format!(
            "'{}' must start with http:// or https://",
            crate::redact::redact_url(s)
        )),
        (Kind::PositiveInt, Value::Integer(n)) if *n >= 1 && u32::try_from(*n).is_ok() => Ok(()),
        (Kind::Int, Value::Integer(n)) if *n >= 0 => Ok(()),
        (Kind::PositiveInt, _) => Err("must be a whole number of at least 1".into()),
        (Kind::Int, _) => Err("must be a whole number".into()),
        (Kind::Bool, _) => Err("must be true or false".into()),
        (Kind::Str | Kind::Url, _) => Err("must be a string".into()),
        (Kind::List, Value::String(_)) => Ok(()),
        (Kind::List, Value::Array(items)) if items.iter().all(Value::is_str) => Ok(()),
        (Kind::ListOf(names), Value::String(s)) => check_names(&super::split_list(s), names),
        (Kind::ListOf(names), Value::Array(items)) => {
            let mut list = Vec::new();
            for item in items {
                match item.as_str() {
                    Some(s) => list.push(s.to_owned()),
                    None => return Err("must be a list of strings".into()),
                }
            }
            check_names(&list, names)
        }
        (Kind::OneOf(names), Value::String(s)) => check_names(std::slice::from_ref(s), names),
        (Kind::OneOf(names), _) => Err(format!("must be one of {}", names.join(", "))),
        (Kind::List | Kind::ListOf(_), _) => Err("must be a list of strings".into()),
        (Kind::Tables, Value::Table(_) | Value::Array(_)) => Ok(()),
        (Kind::Tables, _) => Err("must be a table".into()),
        (Kind::TableOrOff, Value::Table(_) | Value::Boolean(_)) => Ok(()),
        (Kind::TableOrOff, Value::String(s)) if s == "off" || s == "on" => Ok(()),
        (Kind::TableOrOff, _) => Err("must be a table, or false / \"off\"".into()),
        (Kind::Amount, Value::Integer(_) | Value::Float(_) | Value::String(_)) => Ok(()),
        (Kind::Amount, _) => Err("must be a number".into()),
    }
}

/// Every item of `list` must be one of `names`.
pub fn check_names(list: &[String], names: &[&str]) -> Result<(), String> {
    for item in list {
        if !names.contains(&item.as_str()) {
            return Err(format!(
                "has unknown value '{item}'{}; valid: {}",
                suggestion(item, names.iter().copied()),
                names.join(", ")
            ));
        }
    }
    Ok(())
}

/// A line of `.env` that cannot be read, or names a variable that looks
/// like a typo of a known one.
pub fn check_dotenv(text: &str, path: &Path) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let problem = |message: String| ConfigError::DotEnv {
            path: path.to_owned(),
            line: line_no,
            message,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            problems.push(problem(
                "is not KEY=value (comments start with #)".to_owned(),
            ));
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            problems.push(problem(format!(
                "'{key}' is not a variable name (letters, digits and _)"
            )));
            continue;
        }
        let value = value.trim();
        for quote in ['"', '\''] {
            if value.starts_with(quote) && (value.len() < 2 || !value.ends_with(quote)) {
                problems.push(problem(format!(
                    "the value of {key} has no closing {quote}"
                )));
            }
        }
        if let Some(why) = unknown_var(key) {
            problems.push(problem(why));
        }
    }
    problems
}

/// Why `name` looks like a misspelt setting, if it does: an unknown name
/// with a prefix only hermes uses, or one very close to a known name.
pub fn unknown_var(name: &str) -> Option<String> {
    if KNOWN_VARS.contains(&name) {
        return None;
    }
    let owned = OWNED_PREFIXES.iter().any(|p| name.starts_with(p));
    let close = did_you_mean(name, KNOWN_VARS.iter().copied());
    match close {
        Some(known) if owned || strsim::levenshtein(name, known) <= 2 => {
            Some(format!("unknown variable {name} (did you mean {known}?)"))
        }
        None if owned => Some(format!(
            "unknown variable {name}; hermes reads {}",
            KNOWN_VARS
                .iter()
                .filter(|v| v.starts_with("HERMES_"))
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn problems(toml_text: &str) -> Vec<String> {
        let table: toml::Table = toml_text.parse().unwrap();
        check_file(&table, Path::new("config.toml"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn typos_in_config_toml_get_a_suggestion() {
        let p = problems("[providr]\nmodel = \"x\"\n");
        assert_eq!(p.len(), 1);
        assert!(
            p[0].contains("[providr]") && p[0].contains("did you mean 'provider'"),
            "{p:?}"
        );

        let p = problems("[provider]\nbase_ulr = \"http://x/v1\"\n");
        assert!(p[0].contains("did you mean 'base_url'"), "{p:?}");

        let p = problems("[agent]\nmax_iteration = 3\n");
        assert!(p[0].contains("did you mean 'max_iterations'"), "{p:?}");

        let p = problems("[agent]\ntoolsets = [\"file\", \"fiel\"]\n");
        assert!(
            p[0].contains("'fiel'") && p[0].contains("did you mean 'file'"),
            "{p:?}"
        );

        let p = problems("model = \"x\"\n");
        assert!(p[0].contains("top-level key 'model'"), "{p:?}");

        assert!(problems("[provider]\nbase_url = \"ftp://x\"\n")[0].contains("http://"));
        assert!(problems("[agent]\nmax_iterations = 0\n")[0].contains("at least 1"));
    }

    #[test]
    fn the_repeat_guard_is_a_table_or_off() {
        for ok in ["{ warn_after = 3, stop_after = 5 }", "false", "\"off\""] {
            let p = problems(&format!("[agent]\nrepeat_guard = {ok}\n"));
            assert_eq!(p, Vec::<String>::new(), "{ok}");
        }
        let p = problems("[agent]\nrepeat_guard = 5\n");
        assert!(p[0].contains("repeat_guard must be a table"), "{p:?}");
    }

    #[test]
    fn a_valid_file_and_the_gateway_section_pass() {
        let ok = "[provider]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\napi_key = \"k\"\n\
                  [agent]\nmax_iterations = 5\ntoolsets = \"file, todo\"\nworkdir = \"/tmp\"\n\
                  [gateway]\nbusy_mode = \"queue\"\n[gateway.telegram]\nx = 1\n";
        assert_eq!(problems(ok), Vec::<String>::new());
    }

    #[test]
    fn the_discord_section_is_checked_like_the_rest() {
        let ok = "[discord]\nbot_token = \"t\"\nallowed_users = [\"1\"]\nrequire_mention = false\n\
                  free_response_channels = \"2,3\"\nhome_channel = \"4\"\napi_url = \"http://127.0.0.1:1/api/v10\"\n";
        assert_eq!(problems(ok), Vec::<String>::new());
        let p = problems("[discord]\nrequire_mentions = true\n");
        assert!(p[0].contains("did you mean 'require_mention'"), "{p:?}");
        let p = problems("[discord]\nrequire_mention = \"yes\"\n");
        assert!(p[0].contains("true or false"), "{p:?}");
        assert!(problems("[discord]\napi_url = \"discord.com\"\n")[0].contains("http://"));
        let p: Vec<String> = check_dotenv("DISCORD_BOT_TOKNE=x\n", Path::new(".env"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(p[0].contains("did you mean DISCORD_BOT_TOKEN"), "{p:?}");
        assert!(unknown_var("DISCORD_HOME_CHANNEL").is_none());
    }

    #[test]
    fn the_email_section_is_checked_like_the_rest() {
        let ok = "[email]\naddress = \"bot@example.org\"\npassword = \"p\"\nimap_host = \"h\"\n\
                  imap_port = 993\nimap_security = \"tls\"\nsmtp_host = \"h\"\nsmtp_port = 587\n\
                  smtp_security = \"starttls\"\nallowed_users = [\"a@example.org\"]\n\
                  poll_interval = 30\nhome_address = \"a@example.org\"\n";
        assert_eq!(problems(ok), Vec::<String>::new());
        let p = problems("[email]\nimap_securty = \"tls\"\n");
        assert!(p[0].contains("did you mean 'imap_security'"), "{p:?}");
        assert!(!problems("[email]\nsmtp_security = \"ssl\"\n").is_empty());
        assert!(unknown_var("EMAIL_HOME_ADDRESS").is_none());
        assert!(unknown_var("EMAIL_PASSWORD").is_none());
    }

    #[test]
    fn the_api_server_section_is_checked() {
        let ok = "[api_server]\nenabled = true\nkey = \"k\"\nhost = \"0.0.0.0\"\nport = 8642\n\
                  model_name = \"hermes-agent\"\ncors_origins = [\"http://localhost:3000\"]\nmax_concurrent = 4\n";
        assert_eq!(problems(ok), Vec::<String>::new());
        let p = problems("[api_server]\nmax_concurent = 2\n");
        assert!(p[0].contains("did you mean 'max_concurrent'"), "{p:?}");
        let p = problems("[api_server]\nenabled = \"yes\"\n");
        assert!(p[0].contains("true or false"), "{p:?}");
        let p = problems("[api_server]\nmax_concurrent = 0\n");
        assert!(p[0].contains("at least 1"), "{p:?}");
        assert_eq!(unknown_var("API_SERVER_KEY"), None);
        let typo = unknown_var("API_SERVER_PROT").unwrap();
        assert!(typo.contains("API_SERVER_PORT"), "{typo}");
    }

    #[test]
    fn malformed_dotenv_lines_are_reported_with_their_number() {
        let text = "# ok\nHERMES_MODEL=m\nnot a line\n=x\nA=\"open\nHERMES_MODLE=x\nTELEGRAM_BOT_TOKNE=1\nMY_OWN_THING=1\n";
        let p: Vec<String> = check_dotenv(text, Path::new(".env"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(p[0].contains(".env:3"), "{p:?}");
        assert!(p[1].contains(".env:4"), "{p:?}");
        assert!(p[2].contains("closing \""), "{p:?}");
        assert!(p[3].contains("did you mean HERMES_MODEL"), "{p:?}");
        assert!(p[4].contains("did you mean TELEGRAM_BOT_TOKEN"), "{p:?}");
    }

    /// A key the loader reads but this table does not list would be
    /// refused as a typo: the loader's source is scanned for every
    /// `("section", "key")` pair and every `"HERMES_…"` name it reads.
    #[test]
    fn every_key_and_variable_the_loader_reads_is_in_the_tables() {
        let src = concat!(include_str!("../config.rs"), include_str!("load.rs"));
        let mut pairs = 0;
        for chunk in src.split("(\"").skip(1) {
            let Some((section, rest)) = chunk.split_once("\", \"") else {
                continue;
            };
            let key: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !rest[key.len()..].starts_with('"') {
                continue;
            }
            let Some(s) = SECTIONS.iter().find(|s| s.name == section) else {
                continue;
            };
            pairs += 1;
            if let Keys::These(keys) = s.keys {
                assert!(
                    keys.iter().any(|k| k.name == key),
                    "[{section}] {key} is read by the loader but missing from SECTIONS"
                );
            }
        }
        assert!(pairs >= 10, "the scan found the loader's keys ({pairs})");
        for chunk in src.split("\"HERMES_").skip(1) {
            let name: String = chunk
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if chunk[name.len()..].starts_with('"') && !name.is_empty() {
                let var = format!("HERMES_{name}");
                assert!(
                    KNOWN_VARS.contains(&var.as_str()),
                    "{var} missing from KNOWN_VARS"
                );
            }
        }
    }

    #[test]
    fn did_you_mean_only_suggests_close_names() {
        assert_eq!(
            did_you_mean("fiel", TOOLSET_NAMES.iter().copied()),
            Some("file")
        );
        assert_eq!(did_you_mean("xyzzy", TOOLSET_NAMES.iter().copied()), None);
    }
}
