//! hermes-agent's `config.yaml` as this hermes's `config.toml` (issue 45,
//! item 1): the keys with a meaning here are translated and each is named
//! in the report; every other key set in the file is named as not mapped.
//!
//! The key names are hermes-agent 0.19's (`hermes_cli/config.py`
//! `DEFAULT_CONFIG`, `hermes_cli/fallback_config.py`,
//! `hermes_cli/auth.py`'s providers). Its `save_config` writes only the
//! keys that differ from its defaults, so what the file holds is what the
//! user chose. Values that are secrets (`api_key`) are written, never shown.

use serde_json::Value;
use toml::Table;

/// The result of translating one `config.yaml`.
#[derive(Debug, Default)]
pub struct Mapped {
    /// What `config.toml` gets.
    pub table: Table,
    /// `(their key, our key)` for every key translated.
    pub mapped: Vec<(String, String)>,
    /// Their keys (dotted) with no meaning here, and why where it helps.
    pub unmapped: Vec<String>,
}

/// The base URL (and API) of hermes-agent's named providers that speak an
/// API this hermes speaks; `custom` and the rest need `model.base_url`.
fn provider_endpoint(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "openrouter" => ("https://openrouter.ai/api/v1", "openai"),
        "openai-api" => ("https://api.openai.com/v1", "openai"),
        "anthropic" => ("https://api.anthropic.com/v1", "anthropic"),
        "lmstudio" => ("http://127.0.0.1:1234/v1", "openai"),
        "zai" => ("https://api.z.ai/api/paas/v4", "openai"),
        "kimi-coding" => ("https://api.moonshot.ai/v1", "openai"),
        "kimi-coding-cn" => ("https://api.moonshot.cn/v1", "openai"),
        _ => return None,
    })
}

/// hermes-agent's toolset names that are ours too (or renamed). Its
/// composite sets (`hermes-cli`, `hermes-gateway`, …) mean "everything",
/// which is our default.
fn our_toolset(name: &str) -> Option<&'static str> {
    Some(match name {
        "file" => "file",
        "terminal" => "terminal",
        "web" => "web",
        "memory" => "memory",
        "todo" => "todo",
        "skills" => "skills",
        "delegation" => "delegate",
        "cronjob" => "cronjob",
        "session_search" => "session_search",
        "vision" => "vision",
        _ => return None,
    })
}

/// Translates a parsed `config.yaml`.
pub fn map_config(yaml: &Value) -> Mapped {
    let mut m = Mapped::default();
    let Some(root) = yaml.as_object() else {
        return m;
    };
    for (key, value) in root {
        match key.as_str() {
            // Its own bookkeeping, not a setting.
            "_config_version" => {}
            "model" => map_model(&mut m, value),
            "fallback_providers" | "fallback_model" => map_fallbacks(&mut m, key, value),
            "toolsets" => map_toolsets(&mut m, value),
            "timezone" => leaf(&mut m, key, value, "gateway", "timezone", str_value),
            "agent" | "terminal" | "compression" | "web" | "discord" | "approvals" => {
                map_section(&mut m, key, value);
            }
            _ => unmapped_leaves(&mut m, key, value),
        }
    }
    m
}

fn str_value(v: &Value) -> Option<toml::Value> {
    v.as_str()
        .filter(|s| !s.is_empty())
        .map(|s| toml::Value::String(s.to_owned()))
}

fn positive_int(v: &Value) -> Option<toml::Value> {
    v.as_i64().filter(|n| *n > 0).map(toml::Value::Integer)
}

fn string_list(v: &Value) -> Option<toml::Value> {
    let items: Vec<toml::Value> = match v {
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .map(toml::Value::String)
            .collect(),
        // Its comma-separated forms (`free_response_channels: "1,2"`).
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| toml::Value::String(s.to_owned()))
            .collect(),
        _ => return None,
    };
    Some(toml::Value::Array(items))
}

/// Sets `[section] key` from `value` when `convert` accepts it; else the
/// key is reported as not mapped (its value is not usable here).
fn leaf(
    m: &mut Mapped,
    theirs: &str,
    value: &Value,
    section: &str,
    key: &str,
    convert: fn(&Value) -> Option<toml::Value>,
) {
    match convert(value) {
        Some(v) => set(m, theirs, section, key, v),
        None => m
            .unmapped
            .push(format!("{theirs} (its value has no equivalent)")),
    }
}

fn set(m: &mut Mapped, theirs: &str, section: &str, key: &str, value: toml::Value) {
    let table = m
        .table
        .entry(section.to_owned())
        .or_insert_with(|| toml::Value::Table(Table::new()));
    if let toml::Value::Table(t) = table {
        t.insert(key.to_owned(), value);
    }
    m.mapped
        .push((theirs.to_owned(), format!("[{section}] {key}")));
}

/// Every leaf under `prefix` as not mapped.
fn unmapped_leaves(m: &mut Mapped, prefix: &str, value: &Value) {
    match value {
        Value::Object(o) if !o.is_empty() => {
            for (k, v) in o {
                unmapped_leaves(m, &format!("{prefix}.{k}"), v);
            }
        }
        _ => m.unmapped.push(prefix.to_owned()),
    }
}

fn map_model(m: &mut Mapped, value: &Value) {
    let Some(model) = value.as_object() else {
        // The old form: `model: NAME`.
        leaf(m, "model", value, "provider", "model", str_value);
        return;
    };
    let has_url = model.get("base_url").and_then(str_value).is_some();
    for (key, v) in model {
        let theirs = format!("model.{key}");
        match key.as_str() {
            "default" | "model" => leaf(m, &theirs, v, "provider", "model", str_value),
            "base_url" => leaf(m, &theirs, v, "provider", "base_url", str_value),
            "api_key" => leaf(m, &theirs, v, "provider", "api_key", str_value),
            "context_length" => leaf(m, &theirs, v, "provider", "context_length", positive_int),
            "api_mode" => match v.as_str() {
                Some("chat_completions") => set(m, &theirs, "provider", "api", "openai".into()),
                Some("anthropic_messages") => {
                    set(m, &theirs, "provider", "api", "anthropic".into());
                }
                _ => m
                    .unmapped
                    .push(format!("{theirs} (an API this hermes does not speak)")),
            },
            "provider" => match v.as_str().map(|p| (p, provider_endpoint(p))) {
                Some(("custom", _)) if has_url => {
                    m.mapped.push((theirs, "[provider] base_url".into()));
                }
                Some((_, Some((url, api)))) if !has_url => {
                    set(m, &theirs, "provider", "base_url", url.into());
                    if api != "openai" {
                        set(m, &theirs, "provider", "api", api.into());
                    }
                }
                Some((_, Some(_))) => m.mapped.push((theirs, "[provider] base_url".into())),
                _ => m.unmapped.push(format!(
                    "{theirs} (a provider this hermes has no URL for: set [provider] base_url)"
                )),
            },
            _ => unmapped_leaves(m, &theirs, v),
        }
    }
}

fn map_fallbacks(m: &mut Mapped, key: &str, value: &Value) {
    let entries: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) if !o.is_empty() => vec![value],
        _ => return,
    };
    for (i, entry) in entries.into_iter().enumerate() {
        let theirs = format!("{key}[{i}]");
        let Some(e) = entry.as_object() else {
            m.unmapped.push(theirs);
            continue;
        };
        let model = e.get("model").and_then(str_value);
        let url = e.get("base_url").and_then(str_value).or_else(|| {
            e.get("provider")
                .and_then(Value::as_str)
                .and_then(provider_endpoint)
                .map(|(u, _)| toml::Value::String(u.to_owned()))
        });
        let (Some(model), Some(url)) = (model, url) else {
            m.unmapped.push(format!(
                "{theirs} (no model, or a provider this hermes has no URL for)"
            ));
            continue;
        };
        let mut t = Table::new();
        t.insert("model".into(), model);
        t.insert("base_url".into(), url);
        if let Some(k) = e.get("api_key").and_then(str_value) {
            t.insert("api_key".into(), k);
        }
        if e.get("provider").and_then(Value::as_str) == Some("anthropic") {
            t.insert("api".into(), "anthropic".into());
        }
        for k in e.keys() {
            if !["model", "base_url", "api_key", "provider"].contains(&k.as_str()) {
                m.unmapped.push(format!("{theirs}.{k}"));
            }
        }
        let provider = m
            .table
            .entry("provider".to_owned())
            .or_insert_with(|| toml::Value::Table(Table::new()));
        if let toml::Value::Table(p) = provider
            && let toml::Value::Array(list) = p
                .entry("fallback".to_owned())
                .or_insert_with(|| toml::Value::Array(Vec::new()))
        {
            list.push(toml::Value::Table(t));
        }
        m.mapped.push((theirs, "[[provider.fallback]]".into()));
    }
}

fn map_toolsets(m: &mut Mapped, value: &Value) {
    let Some(names) = value.as_array() else {
        m.unmapped.push("toolsets".into());
        return;
    };
    let mut ours: Vec<toml::Value> = Vec::new();
    let mut everything = false;
    for name in names.iter().filter_map(Value::as_str) {
        if name.starts_with("hermes-") || name == "all" {
            everything = true;
        } else if let Some(n) = our_toolset(name) {
            ours.push(n.into());
        } else {
            m.unmapped.push(format!("toolsets: {name}"));
        }
    }
    if everything {
        // All tools: our default, nothing to write.
        m.mapped.push((
            "toolsets".into(),
            "[agent] toolsets (all, the default)".into(),
        ));
    } else if !ours.is_empty() {
        set(m, "toolsets", "agent", "toolsets", toml::Value::Array(ours));
    }
}

/// The keys of its `agent`, `terminal`, `compression`, `web`, `discord`
/// and `approvals` sections that mean something here.
fn map_section(m: &mut Mapped, section: &str, value: &Value) {
    let Some(keys) = value.as_object() else {
        m.unmapped.push(section.to_owned());
        return;
    };
    for (key, v) in keys {
        let theirs = format!("{section}.{key}");
        match (section, key.as_str()) {
            ("agent", "max_turns") => leaf(m, &theirs, v, "agent", "max_iterations", positive_int),
            ("terminal", "env_passthrough") => {
                leaf(m, &theirs, v, "agent", "env_passthrough", string_list);
            }
            ("terminal", "cwd") if v.as_str() != Some(".") => {
                leaf(m, &theirs, v, "agent", "workdir", str_value);
            }
            ("compression", "threshold") => {
                // A fraction of the window there, a percentage here.
                let percent = v
                    .as_f64()
                    .filter(|f| *f > 0.0 && *f <= 1.0)
                    .map(|f| toml::Value::Integer(((f * 100.0).round() as i64).max(1)));
                match percent {
                    Some(p) => set(m, &theirs, "agent", "compress_threshold", p),
                    None => m.unmapped.push(theirs),
                }
            }
            ("web", "search_backend") => leaf(m, &theirs, v, "web", "search_backend", |v| {
                v.as_str()
                    .filter(|b| ["searxng", "brave", "tavily", "duckduckgo"].contains(b))
                    .map(|b| toml::Value::String(b.to_owned()))
            }),
            ("discord", "require_mention") => {
                leaf(m, &theirs, v, "discord", "require_mention", |v| {
                    v.as_bool().map(toml::Value::Boolean)
                });
            }
            ("discord", "free_response_channels") => {
                leaf(
                    m,
                    &theirs,
                    v,
                    "discord",
                    "free_response_channels",
                    string_list,
                );
            }
            ("approvals", "mode") => leaf(m, &theirs, v, "agent", "approvals", |v| {
                // `manual` and `smart` both ask a person; `off` does not.
                match v.as_str() {
                    Some("off") => Some("off".into()),
                    Some("manual" | "smart") => Some("ask".into()),
                    _ => None,
                }
            }),
            ("approvals", "timeout") => {
                leaf(m, &theirs, v, "agent", "approval_timeout", positive_int);
            }
            _ => unmapped_leaves(m, &theirs, v),
        }
    }
}

/// Adds to `ours` (this home's `config.toml`, parsed) each mapped key it
/// lacks; a key already set here keeps its value. Returns how many were
/// added and the keys kept.
pub fn merge_into(ours: &mut Table, theirs: &Table) -> (usize, Vec<String>) {
    let mut added = 0;
    let mut kept = Vec::new();
    for (section, value) in theirs {
        let toml::Value::Table(keys) = value else {
            continue;
        };
        let slot = ours
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(Table::new()));
        let toml::Value::Table(slot) = slot else {
            kept.push(format!("[{section}]"));
            continue;
        };
        for (key, v) in keys {
            match slot.get(key) {
                None => {
                    slot.insert(key.clone(), v.clone());
                    added += 1;
                }
                Some(existing) if existing == v => {}
                Some(_) => kept.push(format!("[{section}] {key}")),
            }
        }
    }
    (added, kept)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_named_provider_gives_its_url_and_api_and_the_rest_is_named() {
        let m = map_config(&json!({
            "model": {"default": "claude-sonnet-4-5", "provider": "anthropic"},
            "fallback_model": {"provider": "nous", "model": "hermes-4"},
            "compression": {"threshold": 0.75, "target_ratio": 0.2},
            "approvals": {"mode": "off"},
            "toolsets": ["hermes-cli"],
            "memory": {"memory_char_limit": 3000},
        }));
        let provider = &m.table["provider"];
        assert_eq!(
            provider["base_url"].as_str(),
            Some("https://api.anthropic.com/v1")
        );
        assert_eq!(provider["api"].as_str(), Some("anthropic"));
        assert_eq!(
            m.table["agent"]["compress_threshold"].as_integer(),
            Some(75)
        );
        assert_eq!(m.table["agent"]["approvals"].as_str(), Some("off"));
        assert!(
            m.table["agent"].get("toolsets").is_none(),
            "all tools: our default"
        );
        assert!(provider.get("fallback").is_none());
        for name in [
            "fallback_model[0]",
            "compression.target_ratio",
            "memory.memory_char_limit",
        ] {
            assert!(
                m.unmapped.iter().any(|u| u.starts_with(name)),
                "{name}: {:?}",
                m.unmapped
            );
        }
    }

    #[test]
    fn the_old_model_string_and_a_kept_key() {
        let m = map_config(&json!({"model": "openai/gpt-4o", "timezone": "Europe/Berlin"}));
        assert_eq!(m.table["provider"]["model"].as_str(), Some("openai/gpt-4o"));
        assert_eq!(
            m.table["gateway"]["timezone"].as_str(),
            Some("Europe/Berlin")
        );
        let mut ours: Table = "[provider]\nmodel = \"mine\"\n".parse().unwrap();
        let (added, kept) = merge_into(&mut ours, &m.table);
        assert_eq!((added, kept), (1, vec!["[provider] model".to_owned()]));
        assert_eq!(ours["provider"]["model"].as_str(), Some("mine"));
    }
}
