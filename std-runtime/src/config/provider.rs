//! The `[provider]` settings beyond URL, key and model (issue 11): which
//! API, prompt caching, reasoning, prices, and the fallback chain.
//!
//! ```toml
//! [provider]
//! api = "openai"              # or "anthropic" (the native Messages API)
//! cache = "auto"              # "anthropic" (always mark breakpoints) | "off"
//! cache_ttl = "5m"            # or "1h"
//! reasoning_effort = "medium" # minimal | low | medium | high | xhigh | none
//! reasoning_echo = "auto"     # off | reasoning_content | reasoning_details
//! price = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }
//!
//! [[provider.fallback]]       # tried in order when the primary fails
//! base_url = "https://openrouter.ai/api/v1"
//! api_key = "sk-or-…"
//! model = "openai/gpt-4o-mini"
//! ```
//!
//! One fallback can also come from the environment:
//! `HERMES_FALLBACK_MODEL` (required), `HERMES_FALLBACK_BASE_URL`,
//! `HERMES_FALLBACK_API_KEY`, `HERMES_FALLBACK_API`; it replaces the
//! file's list (environment over file). A fallback without `base_url` uses
//! the primary's; without `api_key`, the primary's key when the URL is the
//! primary's, else the vendor's own variable (`OPENROUTER_API_KEY`,
//! `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) — a key never goes to another
//! vendor (SPEC E2).

use std::fmt;

use super::{ConfigError, Origin, Resolver, provider_label, validate_url};
use crate::price::Price;
use crate::secret::Secret;

/// Anthropic's endpoint, the default when `api = "anthropic"`.
pub const ANTHROPIC_BASE_URL: &str = crate::client::ANTHROPIC_BASE_URL;
/// The default model on Anthropic's API.
pub const ANTHROPIC_DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions (OpenAI, OpenRouter, Ollama, vLLM, …).
    #[default]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl Api {
    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Some(Api::OpenAi),
            "anthropic" => Some(Api::Anthropic),
            _ => None,
        }
    }

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }
}

/// `[provider] cache`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Breakpoints for models that need them (Anthropic's API, Claude
    /// models anywhere); nothing for the rest, which cache stable prefixes
    /// by themselves.
    #[default]
    Auto,
    /// Breakpoints whatever the model (a proxy serving Claude under
    /// another name).
    Anthropic,
    /// Never.
    Off,
}

/// `[provider] reasoning_echo`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EchoMode {
    /// By provider and model: OpenRouter → `reasoning_details`, DeepSeek
    /// and Kimi K2 thinking → `reasoning_content`, otherwise nothing.
    #[default]
    Auto,
    /// Never send reasoning back.
    Off,
    /// `reasoning_content` in tool-call turns.
    ReasoningContent,
    /// `reasoning_details` in tool-call turns.
    ReasoningDetails,
}

/// One provider of the fallback chain.
#[derive(Clone, PartialEq)]
pub struct FallbackProvider {
    /// Its base URL (…/v1).
    pub base_url: String,
    /// Its key, if any.
    pub api_key: Option<Secret>,
    /// The model to ask.
    pub model: String,
    /// The API it speaks.
    pub api: Api,
    /// `openrouter`, `openai`, `anthropic`, `local` or `custom`.
    pub provider_name: String,
    /// Its price, if configured.
    pub price: Option<Price>,
}

impl fmt::Debug for FallbackProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackProvider")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("api", &self.api)
            .field("provider_name", &self.provider_name)
            .field("price", &self.price)
            .finish()
    }
}

/// The primary's API: `[provider] api`, else Anthropic's when nothing but
/// `ANTHROPIC_API_KEY` is configured, else OpenAI's.
pub(super) fn resolve_api(r: &Resolver<'_>, base_url_given: bool) -> Result<Api, ConfigError> {
    if let Some(v) = r.toml_str("provider", "api")? {
        return Api::parse(v)
            .ok_or_else(|| r.type_error("provider", "api", "\"openai\" or \"anthropic\""));
    }
    let other_key = ["HERMES_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"]
        .iter()
        .any(|k| r.var(k).is_some())
        || r.toml_str("provider", "api_key")?.is_some();
    Ok(
        if !base_url_given && !other_key && r.var("ANTHROPIC_API_KEY").is_some() {
            Api::Anthropic
        } else {
            Api::OpenAi
        },
    )
}

/// Everything this module resolves.
pub(super) struct Extras {
    pub(super) cache: CacheMode,
    pub(super) cache_ttl_1h: bool,
    pub(super) reasoning_effort: Option<String>,
    pub(super) reasoning_echo: EchoMode,
    pub(super) price: Option<Price>,
    pub(super) fallbacks: Vec<FallbackProvider>,
}

const EFFORTS: [&str; 7] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

pub(super) fn resolve_extras(
    r: &Resolver<'_>,
    primary_base_url: &str,
    primary_key: Option<&str>,
    origins: &mut std::collections::BTreeMap<&'static str, Origin>,
) -> Result<Extras, ConfigError> {
    let cache = match r.toml_str("provider", "cache")? {
        None => CacheMode::Auto,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "auto" => CacheMode::Auto,
            "anthropic" => CacheMode::Anthropic,
            "off" => CacheMode::Off,
            _ => {
                return Err(r.type_error(
                    "provider",
                    "cache",
                    "\"auto\", \"anthropic\" or \"off\"",
                ));
            }
        },
    };
    let cache_ttl_1h = match r.toml_str("provider", "cache_ttl")? {
        None => false,
        Some(v) => match v.trim() {
            "5m" => false,
            "1h" => true,
            _ => return Err(r.type_error("provider", "cache_ttl", "\"5m\" or \"1h\"")),
        },
    };
    let (effort, effort_origin) = match r.var("HERMES_REASONING_EFFORT") {
        Some((v, o)) => (Some(v.to_owned()), o),
        None => (
            r.toml_str("provider", "reasoning_effort")?
                .map(str::to_owned),
            Origin::ConfigFile("provider.reasoning_effort"),
        ),
    };
    let reasoning_effort = match effort {
        None => None,
        Some(e) => {
            let e = e.trim().to_ascii_lowercase();
            if !EFFORTS.contains(&e.as_str()) {
                return Err(ConfigError::Invalid {
                    key: format!("reasoning_effort (from {effort_origin})"),
                    message: format!("'{e}' is not one of {}", EFFORTS.join(", ")),
                });
            }
            origins.insert("reasoning_effort", effort_origin);
            Some(e)
        }
    };
    let reasoning_echo = match r.toml_str("provider", "reasoning_echo")? {
        None => EchoMode::Auto,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "auto" => EchoMode::Auto,
            "off" => EchoMode::Off,
            "reasoning_content" => EchoMode::ReasoningContent,
            "reasoning_details" => EchoMode::ReasoningDetails,
            _ => {
                return Err(r.type_error(
                    "provider",
                    "reasoning_echo",
                    "\"auto\", \"off\", \"reasoning_content\" or \"reasoning_details\"",
                ));
            }
        },
    };
    let price = r
        .toml_value("provider", "price")
        .map(|v| parse_price(r, "[provider] price", v))
        .transpose()?;
    let fallbacks = resolve_fallbacks(r, primary_base_url, primary_key, origins)?;
    Ok(Extras {
        cache,
        cache_ttl_1h,
        reasoning_effort,
        reasoning_echo,
        price,
        fallbacks,
    })
}

fn parse_price(r: &Resolver<'_>, what: &str, v: &toml::Value) -> Result<Price, ConfigError> {
    let bad = |message: String| ConfigError::File {
        path: r.toml_path.to_owned(),
        message: format!("{what}: {message}"),
    };
    let table = v.as_table().ok_or_else(|| {
        bad(
            "must be a table like { input = 3.0, output = 15.0 } (dollars per million tokens)"
                .into(),
        )
    })?;
    let num = |key: &str| -> Result<Option<f64>, ConfigError> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 => Ok(Some(*f)),
            Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as f64)),
            Some(_) => Err(bad(format!(
                "{key} must be a number of dollars per million tokens, 0 or more"
            ))),
        }
    };
    for key in table.keys() {
        if !["input", "output", "cache_read", "cache_write"].contains(&key.as_str()) {
            return Err(bad(format!(
                "unknown key {key:?} (known: input, output, cache_read, cache_write)"
            )));
        }
    }
    Ok(Price {
        input: num("input")?.ok_or_else(|| bad("input is required".into()))?,
        output: num("output")?.ok_or_else(|| bad("output is required".into()))?,
        cache_read: num("cache_read")?,
        cache_write: num("cache_write")?,
    })
}

/// The vendor's own key variable for a provider label.
fn vendor_key_var(label: &str) -> Option<&'static str> {
    match label {
        "openrouter" => Some("OPENROUTER_API_KEY"),
        "openai" => Some("OPENAI_API_KEY"),
        "anthropic" => Some("ANTHROPIC_API_KEY"),
        _ => None,
    }
}

/// A provider label that knows Anthropic's host.
pub(super) fn label(base_url: &str) -> &'static str {
    if base_url.contains("api.anthropic.com") {
        "anthropic"
    } else {
        provider_label(base_url)
    }
}

fn resolve_fallbacks(
    r: &Resolver<'_>,
    primary_base_url: &str,
    primary_key: Option<&str>,
    origins: &mut std::collections::BTreeMap<&'static str, Origin>,
) -> Result<Vec<FallbackProvider>, ConfigError> {
    struct Raw {
        base_url: Option<String>,
        api_key: Option<String>,
        model: Option<String>,
        api: Option<String>,
        price: Option<Price>,
        origin: Origin,
    }
    let mut raws = Vec::new();
    if let Some((model, origin)) = r.var("HERMES_FALLBACK_MODEL") {
        let var = |name: &'static str| r.var(name).map(|(v, _)| v.to_owned());
        raws.push(Raw {
            base_url: var("HERMES_FALLBACK_BASE_URL"),
            api_key: var("HERMES_FALLBACK_API_KEY"),
            model: Some(model.to_owned()),
            api: var("HERMES_FALLBACK_API"),
            price: None,
            origin,
        });
    } else if let Some(v) = r.toml_value("provider", "fallback") {
        let entries: Vec<&toml::Value> = match v {
            toml::Value::Array(items) => items.iter().collect(),
            toml::Value::Table(_) => vec![v],
            _ => {
                return Err(r.type_error(
                    "provider",
                    "fallback",
                    "a list of [[provider.fallback]] tables",
                ));
            }
        };
        for (n, entry) in entries.into_iter().enumerate() {
            let what = format!("[[provider.fallback]] #{}", n + 1);
            let table = entry.as_table().ok_or_else(|| ConfigError::File {
                path: r.toml_path.to_owned(),
                message: format!("{what} must be a table with base_url, api_key, model"),
            })?;
            let text = |key: &str| -> Result<Option<String>, ConfigError> {
                match table.get(key) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) if !s.trim().is_empty() => {
                        Ok(Some(s.trim().to_owned()))
                    }
                    Some(toml::Value::String(_)) => Ok(None),
                    Some(_) => Err(ConfigError::File {
                        path: r.toml_path.to_owned(),
                        message: format!("{what}: {key} must be a string"),
                    }),
                }
            };
            for key in table.keys() {
                if !["base_url", "api_key", "model", "api", "price"].contains(&key.as_str()) {
                    return Err(ConfigError::File {
                        path: r.toml_path.to_owned(),
                        message: format!(
                            "{what}: unknown key {key:?} (known: base_url, api_key, model, api, price)"
                        ),
                    });
                }
            }
            raws.push(Raw {
                base_url: text("base_url")?,
                api_key: text("api_key")?,
                model: text("model")?,
                api: text("api")?,
                price: table
                    .get("price")
                    .map(|p| parse_price(r, &what, p))
                    .transpose()?,
                origin: Origin::ConfigFile("provider.fallback"),
            });
        }
    }
    let mut out = Vec::new();
    for raw in raws {
        let model = raw.model.ok_or_else(|| ConfigError::Invalid {
            key: format!("fallback model (from {})", raw.origin),
            message: "every fallback needs a model".into(),
        })?;
        let base_url = raw
            .base_url
            .unwrap_or_else(|| primary_base_url.to_owned())
            .trim()
            .trim_end_matches('/')
            .to_owned();
        validate_url(&base_url, raw.origin)?;
        let provider_name = label(&base_url).to_owned();
        let same_provider = base_url == primary_base_url.trim_end_matches('/');
        let api_key = match raw.api_key {
            Some(k) => Some(k),
            None if same_provider => primary_key.map(str::to_owned),
            None => {
                vendor_key_var(&provider_name).and_then(|v| r.var(v).map(|(k, _)| k.to_owned()))
            }
        };
        let api = match raw.api.as_deref() {
            Some(a) => Api::parse(a).ok_or_else(|| ConfigError::Invalid {
                key: format!("fallback api (from {})", raw.origin),
                message: format!("'{a}' must be \"openai\" or \"anthropic\""),
            })?,
            None if provider_name == "anthropic" => Api::Anthropic,
            None => Api::OpenAi,
        };
        out.push(FallbackProvider {
            base_url,
            api_key: api_key.map(Secret::from),
            model,
            api,
            provider_name,
            price: raw.price,
        });
        origins.insert("fallback", raw.origin);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::PathBuf;

    use super::super::{Environment, Overrides, load};
    use super::*;

    fn load_with(toml: &str, vars: &[(&str, &str)]) -> Result<super::super::Settings, ConfigError> {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), toml).unwrap();
        let mut pairs = vec![("HERMES_HOME".to_owned(), home.path().display().to_string())];
        pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let overrides = Overrides {
            workdir: Some(PathBuf::from("/tmp")),
            ..Overrides::default()
        };
        load(&overrides, &Environment::from_pairs(pairs))
    }

    #[test]
    fn defaults() {
        let s = load_with("", &[]).unwrap();
        let p = &s.provider;
        assert_eq!(
            (p.api, p.cache, p.reasoning_echo),
            (Api::OpenAi, CacheMode::Auto, EchoMode::Auto)
        );
        assert!(!p.cache_ttl_1h && p.reasoning_effort.is_none() && p.price.is_none());
        assert!(p.fallbacks.is_empty());
    }

    #[test]
    fn every_provider_key() {
        let s = load_with(
            "[provider]\napi = \"anthropic\"\ncache = \"off\"\ncache_ttl = \"1h\"\n\
             reasoning_effort = \"High\"\nreasoning_echo = \"reasoning_content\"\n\
             price = { input = 3, output = 15.0, cache_read = 0.3 }\n",
            &[("ANTHROPIC_API_KEY", "sk-ant-1234567890")],
        )
        .unwrap();
        let p = &s.provider;
        assert_eq!(p.api, Api::Anthropic);
        assert_eq!(p.base_url, ANTHROPIC_BASE_URL);
        assert_eq!(p.model, ANTHROPIC_DEFAULT_MODEL);
        assert_eq!(p.provider_name, "anthropic");
        assert_eq!(
            p.api_key.as_ref().map(Secret::expose),
            Some("sk-ant-1234567890")
        );
        assert_eq!(p.cache, CacheMode::Off);
        assert!(p.cache_ttl_1h);
        assert_eq!(p.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(p.reasoning_echo, EchoMode::ReasoningContent);
        assert_eq!(
            p.price,
            Some(Price {
                input: 3.0,
                output: 15.0,
                cache_read: Some(0.3),
                cache_write: None
            })
        );
    }

    #[test]
    fn an_anthropic_key_alone_selects_the_anthropic_api() {
        let s = load_with("", &[("ANTHROPIC_API_KEY", "sk-ant-1234567890")]).unwrap();
        assert_eq!(s.provider.api, Api::Anthropic);
        assert_eq!(s.provider.base_url, ANTHROPIC_BASE_URL);
        // With another key around, the usual defaults hold and the
        // Anthropic key goes nowhere.
        let s = load_with(
            "",
            &[
                ("ANTHROPIC_API_KEY", "sk-ant-1234567890"),
                ("OPENROUTER_API_KEY", "sk-or-1234567890"),
            ],
        )
        .unwrap();
        assert_eq!(s.provider.api, Api::OpenAi);
        assert_eq!(
            s.provider.api_key.as_ref().map(Secret::expose),
            Some("sk-or-1234567890")
        );
    }

    #[test]
    fn the_fallback_chain_from_the_file() {
        let s = load_with(
            "[provider]\nbase_url = \"https://api.openai.com/v1\"\napi_key = \"sk-primary-123456\"\nmodel = \"gpt-4o\"\n\
             [[provider.fallback]]\nmodel = \"gpt-4o-mini\"\n\
             [[provider.fallback]]\nbase_url = \"https://openrouter.ai/api/v1/\"\nmodel = \"anthropic/claude-sonnet-4\"\n\
             price = { input = 3.0, output = 15.0 }\n\
             [[provider.fallback]]\nbase_url = \"https://api.anthropic.com/v1\"\nmodel = \"claude-haiku-4-5\"\n\
             [[provider.fallback]]\nbase_url = \"https://llm.example.com/v1\"\napi_key = \"sk-own-1234567\"\nmodel = \"m\"\napi = \"anthropic\"\n",
            &[
                ("OPENROUTER_API_KEY", "sk-or-1234567890"),
                ("ANTHROPIC_API_KEY", "sk-ant-1234567890"),
            ],
        )
        .unwrap();
        let f = &s.provider.fallbacks;
        assert_eq!(f.len(), 4);
        // Same provider, another model: the primary's key.
        assert_eq!(f[0].base_url, "https://api.openai.com/v1");
        assert_eq!(
            f[0].api_key.as_ref().map(Secret::expose),
            Some("sk-primary-123456")
        );
        // Another vendor: its own key, never the primary's.
        assert_eq!(f[1].base_url, "https://openrouter.ai/api/v1");
        assert_eq!(f[1].provider_name, "openrouter");
        assert_eq!(
            f[1].api_key.as_ref().map(Secret::expose),
            Some("sk-or-1234567890")
        );
        assert_eq!(f[1].price.map(|p| p.output), Some(15.0));
        assert_eq!(
            (f[2].api, f[2].api_key.as_ref().map(Secret::expose)),
            (Api::Anthropic, Some("sk-ant-1234567890"))
        );
        assert_eq!(
            (f[3].api, f[3].api_key.as_ref().map(Secret::expose)),
            (Api::Anthropic, Some("sk-own-1234567"))
        );
        assert!(!format!("{:?}", s.provider).contains("sk-own-1234567"));
    }

    #[test]
    fn no_key_goes_to_a_custom_fallback_server() {
        let s = load_with(
            "[provider]\nbase_url = \"https://api.openai.com/v1\"\napi_key = \"sk-primary-123456\"\n\
             [[provider.fallback]]\nbase_url = \"https://llm.example.com/v1\"\nmodel = \"m\"\n",
            &[("OPENAI_API_KEY", "sk-openai-123456")],
        )
        .unwrap();
        assert_eq!(s.provider.fallbacks[0].api_key, None);
    }

    #[test]
    fn the_environment_form_replaces_the_files_list() {
        let s = load_with(
            "[[provider.fallback]]\nmodel = \"from-file\"\n",
            &[
                ("HERMES_FALLBACK_MODEL", "from-env"),
                ("HERMES_FALLBACK_BASE_URL", "http://127.0.0.1:9/v1"),
                ("HERMES_FALLBACK_API_KEY", "sk-fallback-123456"),
                ("HERMES_REASONING_EFFORT", "low"),
            ],
        )
        .unwrap();
        let f = &s.provider.fallbacks;
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].model, "from-env");
        assert_eq!(f[0].base_url, "http://127.0.0.1:9/v1");
        assert_eq!(
            f[0].api_key.as_ref().map(Secret::expose),
            Some("sk-fallback-123456")
        );
        assert_eq!(s.provider.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(s.origins["fallback"], Origin::Env("HERMES_FALLBACK_MODEL"));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (toml, key) in [
            ("[provider]\napi = \"grpc\"\n", "api"),
            ("[provider]\ncache = \"yes\"\n", "cache"),
            ("[provider]\ncache_ttl = \"2h\"\n", "cache_ttl"),
            (
                "[provider]\nreasoning_effort = \"lots\"\n",
                "reasoning_effort",
            ),
            (
                "[provider]\nreasoning_echo = \"always\"\n",
                "reasoning_echo",
            ),
            (
                "[provider]\nprice = { input = 1.0 }\n",
                "output is required",
            ),
            (
                "[provider]\nprice = { input = -1.0, output = 1 }\n",
                "input must be",
            ),
            (
                "[provider]\nprice = { input = 1.0, output = 1, cached = 1 }\n",
                "unknown key",
            ),
            (
                "[[provider.fallback]]\nbase_url = \"http://x/v1\"\n",
                "needs a model",
            ),
            (
                "[[provider.fallback]]\nmodel = \"m\"\nbase_url = \"ftp://x\"\n",
                "base_url",
            ),
            (
                "[[provider.fallback]]\nmodel = \"m\"\nkey = \"x\"\n",
                "unknown key",
            ),
            (
                "[[provider.fallback]]\nmodel = \"m\"\napi = \"soap\"\n",
                "api",
            ),
        ] {
            let err = load_with(toml, &[]).unwrap_err().to_string();
            assert!(err.contains(key), "{toml}: {err}");
        }
    }
}
