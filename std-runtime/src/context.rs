//! The context window of the configured model, and where it came from
//! (SPEC X1).
//!
//! Resolved once per (provider, model) and process, in this order:
//!
//! 1. **the setting**: `[provider] context_length` / `HERMES_CONTEXT_LENGTH`;
//! 2. **the provider's metadata**: the model's entry in `GET /models`
//!    (OpenRouter, Together and others: `context_length`; vLLM:
//!    `max_model_len`; Groq: `context_window`; Mistral:
//!    `max_context_length`; LM Studio: `loaded_context_length`), then, for
//!    local and custom servers, llama.cpp's `GET /props`
//!    (`default_generation_settings.n_ctx`: the size of one slot, what a
//!    request may use) and Ollama's `GET /api/ps` (`context_length` of the
//!    loaded model) and `POST /api/show` (`num_ctx` parameter, else the
//!    model's `*.context_length` capped at 4096, Ollama's smallest default
//!    `num_ctx`: Ollama cuts a longer prompt silently);
//! 3. **a built-in table** of well-known model families ([`table_window`]);
//! 4. **a conservative default**, [`DEFAULT_WINDOW`].
//!
//! What was resolved is cached in the store for a day ([`cache`],
//! [`Windows::with_store`]).
//!
//! Metadata probes are single requests with a short timeout; a provider that
//! does not answer is asked the next way. A limit a provider states in a
//! context-length error lowers the shared window for the rest of the
//! process ([`ContextWindow::learn`], done by the agent loop).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::context::{ContextConfig, ContextPolicy, ContextWindow, WindowSource};
use hermes_core::{Model, ModelErrorKind};
use serde_json::Value;

use crate::client::{ClientError, OpenAiClient};
use crate::config::Settings;
use crate::store::Store;
use crate::sync::lock;

pub mod cache;

/// The window assumed when nothing else knows: small enough for the local
/// models small boards run, so a wrong guess errs toward compacting early.
pub const DEFAULT_WINDOW: u32 = 8_192;

/// How long one metadata probe may take (connect, and each read).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Ollama's smallest default `num_ctx` (machines with less than 24 GiB of
/// VRAM); used when Ollama reports the model's trained length but no
/// runtime setting.
pub const OLLAMA_DEFAULT_NUM_CTX: u32 = 4_096;

/// Well-known model families and their context windows, matched in order
/// against the lower-cased model name without its `vendor/` prefix: the
/// first family the name contains wins, so specific names come first.
const TABLE: &[(&str, u32)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o4-mini", 200_000),
    ("o3", 200_000),
    ("o1", 200_000),
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini", 1_048_576),
    ("deepseek", 131_072),
    ("hermes-4", 131_072),
    ("hermes-3", 131_072),
    ("hermes3", 131_072),
    ("llama-4", 1_048_576),
    ("llama-3.1", 131_072),
    ("llama3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama3.2", 131_072),
    ("llama-3.3", 131_072),
    ("llama3.3", 131_072),
    ("llama-3", 8_192),
    ("llama3", 8_192),
    ("llama-2", 4_096),
    ("llama2", 4_096),
    ("qwen3", 32_768),
    ("qwen2.5", 32_768),
    ("qwen", 32_768),
    ("mistral-large", 131_072),
    ("mistral-small", 32_768),
    ("codestral", 262_144),
    ("mixtral", 32_768),
    ("mistral", 32_768),
    ("gemma-3", 131_072),
    ("gemma3", 131_072),
    ("gemma", 8_192),
    ("phi-4", 16_384),
    ("phi4", 16_384),
    ("phi-3", 4_096),
    ("phi3", 4_096),
    ("kimi-k2", 131_072),
    ("glm-4", 131_072),
    ("command-r", 131_072),
];

/// The window of a well-known model family, and the family matched.
pub fn table_window(model: &str) -> Option<(u32, &'static str)> {
    let lower = model.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    TABLE
        .iter()
        .find(|(family, _)| name.contains(family))
        .map(|(family, tokens)| (*tokens, *family))
}

/// A resolved window: its size, where it came from, and a sentence saying
/// exactly where (for `hermes doctor` and `/status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowInfo {
    /// Tokens.
    pub tokens: u32,
    /// Which rule gave it.
    pub source: WindowSource,
    /// Where exactly, e.g. `GET /props default_generation_settings.n_ctx`.
    pub detail: String,
}

fn as_window(v: &Value) -> Option<u32> {
    v.as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.is_finite() && *f >= 1.0)
                .map(|f| f as u64)
        })
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The window of `model` in a `GET /models` listing, and the field it was
/// read from.
pub fn models_entry_window(listing: &Value, model: &str) -> Option<(u32, &'static str)> {
    let entries = listing.get("data").and_then(Value::as_array)?;
    let entry = entries
        .iter()
        .find(|e| e.get("id").and_then(Value::as_str) == Some(model))?;
    for key in [
        "context_length",
        "max_model_len",
        "context_window",
        "loaded_context_length",
        "max_context_length",
    ] {
        if let Some(n) = entry.get(key).and_then(as_window) {
            return Some((n, key));
        }
    }
    entry
        .get("top_provider")
        .and_then(|t| t.get("context_length"))
        .and_then(as_window)
        .map(|n| (n, "top_provider.context_length"))
}

/// llama.cpp's `GET /props`: the context of one slot.
pub fn props_window(props: &Value) -> Option<u32> {
    props
        .get("default_generation_settings")
        .and_then(|d| d.get("n_ctx"))
        .or_else(|| props.get("n_ctx"))
        .and_then(as_window)
}

/// Whether an Ollama model name (`hermes3:latest`) is the configured one
/// (`hermes3`, or the full name).
fn ollama_name_matches(listed: &str, model: &str) -> bool {
    listed == model || listed.strip_suffix(":latest") == Some(model)
}

/// Ollama's `GET /api/ps`: the context the loaded model runs with.
pub fn ollama_ps_window(ps: &Value, model: &str) -> Option<u32> {
    ps.get("models")?
        .as_array()?
        .iter()
        .find(|m| {
            ["name", "model"].iter().any(|k| {
                m.get(*k)
                    .and_then(Value::as_str)
                    .is_some_and(|n| ollama_name_matches(n, model))
            })
        })?
        .get("context_length")
        .and_then(as_window)
}

/// Ollama's `POST /api/show`: the `num_ctx` parameter, else the model's
/// trained length capped at [`OLLAMA_DEFAULT_NUM_CTX`]; with the detail.
pub fn ollama_show_window(show: &Value) -> Option<(u32, &'static str)> {
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|params| {
            params.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next()?.parse::<u32>().ok())
                    .flatten()
            })
        })
        .filter(|n| *n > 0);
    if let Some(n) = num_ctx {
        return Some((n, "POST /api/show parameters num_ctx"));
    }
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)?
        .iter()
        .find(|(k, _)| k.ends_with(".context_length"))
        .and_then(|(_, v)| as_window(v))?;
    Some((
        trained.min(OLLAMA_DEFAULT_NUM_CTX),
        "POST /api/show model_info context_length, capped at Ollama's default num_ctx",
    ))
}

/// Asks the provider (see the module docs). `None` when none of the
/// endpoints knows the window.
pub fn probe_provider(client: &OpenAiClient, model: &str, provider: &str) -> Option<(u32, String)> {
    let base = client.base_url();
    // What is reported (doctor, /status) names the URLs with any
    // credentials in them masked.
    let shown = crate::redact::redact_url(base);
    match client.fetch_json(&format!("{base}/models"), None, PROBE_TIMEOUT) {
        Ok(listing) => {
            if let Some((n, key)) = models_entry_window(&listing, model) {
                return Some((n, format!("GET {shown}/models {key}")));
            }
        }
        // A server that does not answer at all is not asked three more ways.
        Err(ClientError::Model(e))
            if matches!(e.kind, ModelErrorKind::Transport | ModelErrorKind::Timeout) =>
        {
            return None;
        }
        Err(_) => {}
    }
    // Hosted APIs either list the window or have no such endpoints.
    if provider == "openai" || provider == "openrouter" {
        return None;
    }
    let root = client.server_root();
    let shown = crate::redact::redact_url(root);
    if let Ok(props) = client.fetch_json(&format!("{root}/props"), None, PROBE_TIMEOUT)
        && let Some(n) = props_window(&props)
    {
        return Some((
            n,
            format!("GET {shown}/props default_generation_settings.n_ctx"),
        ));
    }
    if let Ok(ps) = client.fetch_json(&format!("{root}/api/ps"), None, PROBE_TIMEOUT)
        && let Some(n) = ollama_ps_window(&ps, model)
    {
        return Some((n, format!("GET {shown}/api/ps context_length")));
    }
    let body = serde_json::json!({ "model": model });
    if let Ok(show) = client.fetch_json(&format!("{root}/api/show"), Some(&body), PROBE_TIMEOUT)
        && let Some((n, what)) = ollama_show_window(&show)
    {
        return Some((n, format!("{shown}: {what}")));
    }
    None
}

/// Resolves the window of `model` on `client`'s provider (see the module
/// docs). Makes network requests unless the window is configured.
pub fn resolve(settings: &Settings, client: &OpenAiClient, model: &str) -> WindowInfo {
    if let Some(tokens) = settings.context_length {
        let origin = settings
            .origins
            .get("context_length")
            .map_or_else(|| "configuration".to_owned(), ToString::to_string);
        return WindowInfo {
            tokens,
            source: WindowSource::Configured,
            detail: origin,
        };
    }
    if let Some((tokens, detail)) = probe_provider(client, model, &settings.provider.provider_name)
    {
        return WindowInfo {
            tokens,
            source: WindowSource::Provider,
            detail,
        };
    }
    if let Some((tokens, family)) = table_window(model) {
        return WindowInfo {
            tokens,
            source: WindowSource::Table,
            detail: format!("model family {family}"),
        };
    }
    WindowInfo {
        tokens: DEFAULT_WINDOW,
        source: WindowSource::Default,
        detail: "nothing reported it; set [provider] context_length".into(),
    }
}

/// The process's windows, one per (base URL, model): resolved on first use,
/// then shared by every agent on that model, so a limit learned from one
/// session's error is known to all. With a store ([`Windows::with_store`])
/// a window resolved by an earlier run within a day is taken from it
/// ([`cache`]) instead of asking the provider.
#[derive(Debug, Default)]
pub struct Windows {
    known: Mutex<Known>,
    store: Option<Arc<Mutex<Store>>>,
    /// Base URL → whether that provider ignores `tool_choice` (shared with
    /// every agent on it), and whether that is stored.
    tool_choice: Mutex<HashMap<String, (Arc<AtomicBool>, bool)>>,
}

/// (base URL, model) → (the shared window, where its size came from, the
/// size last written to the cache).
type Known = HashMap<(String, String), (Arc<ContextWindow>, String, Option<u32>)>;

impl Windows {
    /// An empty registry.
    pub fn new() -> Self {
        Windows::default()
    }

    /// An empty registry that caches what it resolves in `store`.
    pub fn with_store(store: Arc<Mutex<Store>>) -> Self {
        Windows {
            known: Mutex::default(),
            store: Some(store),
            tool_choice: Mutex::default(),
        }
    }

    /// The shared window of `model` at `client`'s provider, resolving it
    /// the first time: from the setting, else the store's cache, else the
    /// provider (network requests; see [`resolve`]).
    pub fn get(
        &self,
        settings: &Settings,
        client: &OpenAiClient,
        model: &str,
    ) -> Arc<ContextWindow> {
        let key = (client.base_url().to_owned(), model.to_owned());
        if let Some((w, _, _)) = self.lock().get(&key) {
            return Arc::clone(w);
        }
        let cached = match (&self.store, settings.context_length) {
            (Some(store), None) => {
                let store = lock(store);
                cache::load(&store, client.base_url(), model, cache::now_secs())
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "could not read the cached context window"),
                    )
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        let (info, saved) = match cached {
            Some(info) => {
                let tokens = info.tokens;
                (info, Some(tokens))
            }
            // Resolved without the lock (it may take a few seconds); a
            // second resolution racing this one loses to whichever is
            // stored first.
            None => {
                let info = resolve(settings, client, model);
                let saved = self.save(client.base_url(), model, &info);
                (info, saved)
            }
        };
        tracing::info!(model, tokens = info.tokens, source = %info.source, detail = %info.detail, "context window");
        let window = Arc::new(ContextWindow::new(info.tokens, info.source));
        let mut known = self.lock();
        let entry = known.entry(key).or_insert((window, info.detail, saved));
        Arc::clone(&entry.0)
    }

    /// Asks the provider again (`hermes doctor`) and caches the answer;
    /// a window this process already shares is left as it is.
    pub fn refresh(&self, settings: &Settings, client: &OpenAiClient, model: &str) -> WindowInfo {
        let info = resolve(settings, client, model);
        self.save(client.base_url(), model, &info);
        info
    }

    /// Caches the windows a context-length error taught since they were
    /// resolved, and the providers found ignoring `tool_choice` (call after
    /// a turn; cheap when nothing was learned).
    pub fn record_learned(&self) {
        self.record_tool_choice();
        let learned: Vec<((String, String), u32)> = {
            let known = self.lock();
            known
                .iter()
                .filter(|(_, (w, _, saved))| {
                    w.source() == WindowSource::Learned && *saved != Some(w.tokens())
                })
                .map(|(k, (w, _, _))| (k.clone(), w.tokens()))
                .collect()
        };
        for ((base_url, model), tokens) in learned {
            let info = WindowInfo {
                tokens,
                source: WindowSource::Learned,
                detail: "the provider's context-length error".into(),
            };
            let saved = self.save(&base_url, &model, &info);
            if let Some(entry) = self.lock().get_mut(&(base_url, model)) {
                entry.2 = saved;
            }
        }
    }

    /// The memory that the provider at `base_url` ignores `tool_choice:
    /// "none"` (issue 38), for [`hermes_core::Agent::with_tool_choice_memory`]:
    /// one flag per provider and process, read from the store the first
    /// time, written back by [`Windows::record_learned`] once the loop sets it.
    pub fn tool_choice_memory(&self, base_url: &str) -> Arc<AtomicBool> {
        let mut flags = lock(&self.tool_choice);
        if let Some((flag, _)) = flags.get(base_url) {
            return Arc::clone(flag);
        }
        let stored = self.store.as_ref().is_some_and(|store| {
            cache::ignores_tool_choice(&lock(store), base_url)
                .inspect_err(|e| tracing::warn!(error = %e, "could not read a provider's quirks"))
                .unwrap_or(false)
        });
        let flag = Arc::new(AtomicBool::new(stored));
        flags.insert(base_url.to_owned(), (Arc::clone(&flag), stored));
        flag
    }

    /// Stores the providers found ignoring `tool_choice` since the last call.
    fn record_tool_choice(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let mut flags = lock(&self.tool_choice);
        for (base_url, (flag, saved)) in flags.iter_mut() {
            if *saved || !flag.load(Ordering::Relaxed) {
                continue;
            }
            tracing::info!(base_url = %crate::redact::redact_url(base_url), "the provider ignores tool_choice: final calls go without the tools list");
            match cache::save_ignores_tool_choice(&mut lock(store), base_url) {
                Ok(()) => *saved = true,
                Err(e) => tracing::warn!(error = %e, "could not store a provider's quirks"),
            }
        }
    }

    /// Writes `info` to the cache; the size written, if it was.
    fn save(&self, base_url: &str, model: &str, info: &WindowInfo) -> Option<u32> {
        let store = self.store.as_ref()?;
        if info.source == WindowSource::Configured {
            return None;
        }
        let mut store = lock(store);
        match cache::save(&mut store, base_url, model, info, cache::now_secs()) {
            Ok(()) => Some(info.tokens),
            Err(e) => {
                tracing::warn!(error = %e, "could not cache the context window");
                None
            }
        }
    }

    /// The current size and origin of `model`'s window, if resolved: the
    /// detail says where exactly (or that it was learned from an error).
    pub fn info(&self, base_url: &str, model: &str) -> Option<WindowInfo> {
        let known = self.lock();
        let (window, detail, _) = known.get(&(base_url.to_owned(), model.to_owned()))?;
        let source = window.source();
        Some(WindowInfo {
            tokens: window.tokens(),
            source,
            detail: if source == WindowSource::Learned {
                "the provider's context-length error".into()
            } else {
                detail.clone()
            },
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        lock(&self.known)
    }
}

/// The context configuration of an agent on `window`: the configured
/// threshold, and the summary model (`[provider] compression_model`, on the
/// same provider) or the agent's own.
pub fn context_config(
    settings: &Settings,
    window: Arc<ContextWindow>,
    client: &OpenAiClient,
) -> ContextConfig {
    let policy = ContextPolicy {
        threshold_pct: settings.compress_threshold,
        ..ContextPolicy::default()
    };
    let summarizer = settings
        .compression_model
        .as_deref()
        .map(|m| Arc::new(client.with_model(m)) as Arc<dyn Model>);
    ContextConfig {
        window,
        policy,
        summarizer,
        summarizer_cooldown_ms: u64::try_from(settings.summarizer_cooldown.as_millis())
            .unwrap_or(u64::MAX),
        summarizer_health: Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_matches_families_specific_first() {
        assert_eq!(table_window("gpt-4o-mini").unwrap().0, 128_000);
        assert_eq!(table_window("gpt-4").unwrap().0, 8_192);
        assert_eq!(
            table_window("anthropic/claude-3.5-sonnet").unwrap().0,
            200_000
        );
        assert_eq!(
            table_window("nousresearch/hermes-4-70b").unwrap().0,
            131_072
        );
        assert_eq!(
            table_window("meta-llama/Llama-3.1-8B-Instruct").unwrap().0,
            131_072
        );
        assert_eq!(table_window("llama3:8b").unwrap().0, 8_192);
        assert_eq!(table_window("my-finetune"), None);
    }

    #[test]
    fn provider_listings_in_their_own_spellings() {
        let or = json!({"data": [
            {"id": "other", "context_length": 1},
            {"id": "x/model", "context_length": 131072, "top_provider": {"context_length": 65536}}
        ]});
        assert_eq!(
            models_entry_window(&or, "x/model"),
            Some((131_072, "context_length"))
        );
        let vllm = json!({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]});
        assert_eq!(
            models_entry_window(&vllm, "m"),
            Some((4_096, "max_model_len"))
        );
        let top = json!({"data": [{"id": "m", "top_provider": {"context_length": 32768}}]});
        assert_eq!(
            models_entry_window(&top, "m"),
            Some((32_768, "top_provider.context_length"))
        );
        let bare = json!({"data": [{"id": "m", "object": "model"}]});
        assert_eq!(models_entry_window(&bare, "m"), None);
        assert_eq!(
            props_window(
                &json!({"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1})
            ),
            Some(2_048)
        );
        let ps = json!({"models": [{"name": "hermes3:latest", "model": "hermes3:latest", "context_length": 8192}]});
        assert_eq!(ollama_ps_window(&ps, "hermes3"), Some(8_192));
        assert_eq!(ollama_ps_window(&ps, "qwen3"), None);
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 16384", "model_info": {"llama.context_length": 131072}});
        assert_eq!(ollama_show_window(&show).unwrap().0, 16_384);
        let show = json!({"model_info": {"general.architecture": "llama", "llama.context_length": 131072}});
        assert_eq!(ollama_show_window(&show).unwrap().0, OLLAMA_DEFAULT_NUM_CTX);
    }
}
