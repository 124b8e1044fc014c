//! The resolved window of each (base URL, model), kept in the store's
//! key-value table for [`WINDOW_CACHE_TTL`]: a one-shot on a warm
//! `$HERMES_HOME` sends its chat request and nothing else, instead of
//! probing `/models`, `/props`, `/api/ps` and `/api/show` every run (a
//! hosted `/models` listing is hundreds of KB).
//!
//! An entry holds the size, its source and the sentence saying where it
//! came from, and when it was resolved. It is written when a window is
//! resolved, again when a context-length error taught a smaller one
//! ([`super::Windows::record_learned`]), and by `hermes doctor`, which
//! always asks the provider ([`super::Windows::refresh`]). A configured
//! window (`context_length`) is never cached: the setting is read each run.
//! The key names the base URL with any credentials masked.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hermes_core::context::WindowSource;
use serde_json::{Value, json};

use super::WindowInfo;
use crate::store::{Store, StoreError};

/// How long a cached window is trusted: a day.
pub const WINDOW_CACHE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The key prefix of cached windows in the key-value table.
pub const KEY_PREFIX: &str = "context_window\u{1f}";

/// The key of (`base_url`, `model`).
pub fn key(base_url: &str, model: &str) -> String {
    format!(
        "{KEY_PREFIX}{}\u{1f}{model}",
        crate::redact::redact_url(base_url)
    )
}

/// Seconds since the Unix epoch (0 before it: an entry then never looks
/// fresh for long).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn source_name(source: WindowSource) -> &'static str {
    match source {
        WindowSource::Configured => "configured",
        WindowSource::Provider => "provider",
        WindowSource::Learned => "learned",
        WindowSource::Table => "table",
        WindowSource::Default => "default",
    }
}

fn source_from(name: &str) -> Option<WindowSource> {
    Some(match name {
        "provider" => WindowSource::Provider,
        "learned" => WindowSource::Learned,
        "table" => WindowSource::Table,
        "default" => WindowSource::Default,
        _ => return None,
    })
}

/// The cached window of (`base_url`, `model`) if there is one younger than
/// [`WINDOW_CACHE_TTL`] at `now` (seconds). A malformed entry is no entry.
pub fn load(
    store: &Store,
    base_url: &str,
    model: &str,
    now: u64,
) -> Result<Option<WindowInfo>, StoreError> {
    let Some(text) = store.kv_get(&key(base_url, model))? else {
        return Ok(None);
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Ok(None);
    };
    let fresh = v["at"]
        .as_u64()
        .is_some_and(|at| at <= now && now - at < WINDOW_CACHE_TTL.as_secs());
    let tokens = v["tokens"]
        .as_u64()
        .and_then(|t| u32::try_from(t).ok())
        .filter(|t| *t >= hermes_core::context::MIN_WINDOW_TOKENS);
    let source = v["source"].as_str().and_then(source_from);
    Ok(match (fresh, tokens, source) {
        (true, Some(tokens), Some(source)) => Some(WindowInfo {
            tokens,
            source,
            detail: format!(
                "{} (cached)",
                v["detail"].as_str().unwrap_or("an earlier run")
            ),
        }),
        _ => None,
    })
}

/// Caches `info` for (`base_url`, `model`), resolved at `now` (seconds). A
/// configured window is not cached.
pub fn save(
    store: &mut Store,
    base_url: &str,
    model: &str,
    info: &WindowInfo,
    now: u64,
) -> Result<(), StoreError> {
    if info.source == WindowSource::Configured {
        return Ok(());
    }
    let detail = info
        .detail
        .strip_suffix(" (cached)")
        .unwrap_or(&info.detail);
    let value = json!({
        "tokens": info.tokens,
        "source": source_name(info.source),
        "detail": detail,
        "at": now,
    });
    store.kv_set(&key(base_url, model), &value.to_string())
}

/// The key prefix of the providers known to ignore `tool_choice` (issue 38).
pub const TOOL_CHOICE_PREFIX: &str = "tool_choice_ignored\u{1f}";

fn tool_choice_key(base_url: &str) -> String {
    format!(
        "{TOOL_CHOICE_PREFIX}{}",
        crate::redact::redact_url(base_url)
    )
}

/// Whether an earlier run found that the provider at `base_url` ignores
/// `tool_choice: "none"` (so final calls go without the tools list).
pub fn ignores_tool_choice(store: &Store, base_url: &str) -> Result<bool, StoreError> {
    Ok(store.kv_get(&tool_choice_key(base_url))?.is_some())
}

/// Remembers that the provider at `base_url` ignores `tool_choice`. Kept
/// without an expiry: a final call without the tools list costs nothing on
/// a server that would have honoured it.
pub fn save_ignores_tool_choice(store: &mut Store, base_url: &str) -> Result<(), StoreError> {
    store.kv_set(&tool_choice_key(base_url), "1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn info(tokens: u32, source: WindowSource) -> WindowInfo {
        WindowInfo {
            tokens,
            source,
            detail: "GET /props default_generation_settings.n_ctx".into(),
        }
    }

    #[test]
    fn a_cached_window_is_read_back_within_a_day_and_not_after() {
        let mut store = Store::open_in_memory().unwrap();
        let url = "http://user:secret@127.0.0.1:8080/v1";
        save(
            &mut store,
            url,
            "m",
            &info(6_000, WindowSource::Provider),
            1_000,
        )
        .unwrap();
        let back = load(&store, url, "m", 1_000 + 3_600).unwrap().unwrap();
        assert_eq!((back.tokens, back.source), (6_000, WindowSource::Provider));
        assert!(back.detail.ends_with("(cached)"), "{}", back.detail);
        // Another model, or a day later: not cached.
        assert_eq!(load(&store, url, "other", 1_000).unwrap(), None);
        let day = WINDOW_CACHE_TTL.as_secs();
        assert_eq!(load(&store, url, "m", 1_000 + day).unwrap(), None);
        // A clock that went back does not make an entry fresh forever.
        assert_eq!(load(&store, url, "m", 10).unwrap(), None);
        // The key holds no credentials.
        let keys = store.kv_scan(KEY_PREFIX).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(!keys[0].0.contains("secret"), "{}", keys[0].0);
        // Saving a cached value again does not stack "(cached)".
        save(&mut store, url, "m", &back, 2_000).unwrap();
        let again = load(&store, url, "m", 2_000).unwrap().unwrap();
        assert_eq!(again.detail, back.detail);
    }

    #[test]
    fn configured_windows_are_not_cached_and_bad_entries_are_ignored() {
        let mut store = Store::open_in_memory().unwrap();
        save(
            &mut store,
            "http://h/v1",
            "m",
            &info(4_096, WindowSource::Configured),
            5,
        )
        .unwrap();
        assert!(store.kv_scan(KEY_PREFIX).unwrap().is_empty());
        for bad in [
            "not json",
            r#"{"tokens": 10, "source": "provider", "at": 5}"#,
            r#"{"tokens": 9000, "source": "configured", "at": 5}"#,
            r#"{"tokens": 9000, "source": "provider"}"#,
        ] {
            store.kv_set(&key("http://h/v1", "m"), bad).unwrap();
            assert_eq!(load(&store, "http://h/v1", "m", 5).unwrap(), None, "{bad}");
        }
    }
}
