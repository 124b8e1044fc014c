//! Token prices and what a session cost (SPEC X3's counts, issue 11's
//! `/usage`).
//!
//! Prices come from `[provider] price` (per fallback too) or, for
//! OpenRouter, from its `GET /models` listing (`pricing.prompt`,
//! `completion`, `input_cache_read`, `input_cache_write`, in dollars per
//! token as strings), cached in the store for a day. A model without a
//! known price has no cost; the token counts are shown all the same.
//!
//! Cost of one model's usage: the uncached prompt tokens at the input
//! price, cache reads at the cache-read price, cache writes at the
//! cache-write price (each falling back to the input price when unknown),
//! and the completion at the output price.

use std::fmt::Write as _;
use std::sync::Mutex;

use hermes_core::Usage;

use crate::client::{ClientOptions, OpenAiClient};
use crate::config::Settings;
/// Re-exported: a price is what the pricing code works with.
pub use crate::price::Price;
use crate::secret::Secret;
use crate::store::{ModelUsage, Store, StoreError};

/// Where a price came from, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceSource {
    /// `price` in config.toml.
    Config,
    /// OpenRouter's model listing.
    OpenRouter,
}

/// Prices by model name, looked up by [`UsageReport`].
pub trait PriceBook {
    /// The price of `model`, if known.
    fn price(&self, model: &str) -> Option<(Price, PriceSource)>;
}

/// No prices at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPrices;

impl PriceBook for NoPrices {
    fn price(&self, _model: &str) -> Option<(Price, PriceSource)> {
        None
    }
}

/// A fixed list of prices (from the configuration, and whatever was fetched).
#[derive(Clone, Debug, Default)]
pub struct PriceList(pub Vec<(String, Price, PriceSource)>);

impl PriceBook for PriceList {
    fn price(&self, model: &str) -> Option<(Price, PriceSource)> {
        self.0
            .iter()
            .find(|(m, _, _)| m == model)
            .map(|(_, p, s)| (*p, *s))
    }
}

/// Parses one entry of OpenRouter's `GET /models` `data` array into a price
/// (its strings are dollars per token).
pub fn openrouter_price(pricing: &serde_json::Value) -> Option<Price> {
    let per_million = |key: &str| -> Option<f64> {
        let v = pricing.get(key)?;
        let dollars: f64 = match v {
            serde_json::Value::String(s) => s.trim().parse().ok()?,
            serde_json::Value::Number(n) => n.as_f64()?,
            _ => return None,
        };
        (dollars.is_finite() && dollars >= 0.0).then_some(dollars * 1e6)
    };
    Some(Price {
        input: per_million("prompt")?,
        output: per_million("completion")?,
        cache_read: per_million("input_cache_read"),
        cache_write: per_million("input_cache_write"),
    })
}

/// The prices of every model in an OpenRouter `GET /models` body.
pub fn parse_openrouter_models(body: &[u8]) -> Vec<(String, Price)> {
    let Ok(listing) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    listing["data"]
        .as_array()
        .map(|models| {
            models
                .iter()
                .filter_map(|m| {
                    let id = m.get("id")?.as_str()?;
                    Some((id.to_owned(), openrouter_price(m.get("pricing")?)?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kv key under which a fetched OpenRouter price is cached.
fn cache_key(model: &str) -> String {
    format!("pricing:openrouter:{model}")
}

/// How long a fetched price is trusted.
pub const PRICE_CACHE_MS: u64 = 24 * 3600 * 1000;

/// A price cached by [`store_price`], unless older than [`PRICE_CACHE_MS`].
pub fn cached_price(store: &Store, model: &str, now_ms: u64) -> Result<Option<Price>, StoreError> {
    let Some(value) = store.kv_get(&cache_key(model))? else {
        return Ok(None);
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&value) else {
        return Ok(None);
    };
    let fresh = v["at_ms"]
        .as_u64()
        .is_some_and(|at| now_ms.saturating_sub(at) < PRICE_CACHE_MS);
    let num = |k: &str| v[k].as_f64();
    Ok(fresh
        .then(|| {
            Some(Price {
                input: num("input")?,
                output: num("output")?,
                cache_read: num("cache_read"),
                cache_write: num("cache_write"),
            })
        })
        .flatten())
}

/// Caches a fetched price.
pub fn store_price(
    store: &mut Store,
    model: &str,
    price: &Price,
    now_ms: u64,
) -> Result<(), StoreError> {
    let value = serde_json::json!({
        "at_ms": now_ms, "input": price.input, "output": price.output,
        "cache_read": price.cache_read, "cache_write": price.cache_write,
    });
    store.kv_set(&cache_key(model), &value.to_string())
}

/// Token totals (and cost, where prices are known) of a session or a turn.
#[derive(Clone, Debug, Default)]
pub struct UsageReport {
    /// One row per model.
    pub models: Vec<ModelUsage>,
}

impl UsageReport {
    /// The report of session `id` from the store.
    pub fn for_session(store: &Store, id: &str) -> Result<Self, StoreError> {
        Ok(UsageReport {
            models: store.session_usage(id)?,
        })
    }

    /// Every model's usage summed.
    pub fn total(&self) -> Usage {
        let mut total = Usage::default();
        for m in &self.models {
            total.add(&m.usage);
        }
        total
    }

    /// Model calls that reported usage.
    pub fn calls(&self) -> u64 {
        self.models.iter().map(|m| m.calls).sum()
    }

    /// The cost in dollars, and whether every model's price was known.
    pub fn cost(&self, prices: &dyn PriceBook) -> (f64, bool) {
        let mut cost = 0.0;
        let mut complete = true;
        for m in &self.models {
            match m.model.as_deref().and_then(|name| prices.price(name)) {
                Some((price, _)) => cost += price.cost(&m.usage),
                None => complete = false,
            }
        }
        (cost, complete)
    }

    /// The report as lines of text, for `/usage` and `hermes sessions show`:
    /// totals, the cache hit share, and the cost (or why there is none).
    pub fn render(&self, prices: &dyn PriceBook) -> String {
        let total = self.total();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tokens: {} prompt + {} completion = {} ({} model call{})",
            total.prompt_tokens,
            total.completion_tokens,
            total.prompt_tokens.saturating_add(total.completion_tokens),
            self.calls(),
            if self.calls() == 1 { "" } else { "s" }
        );
        let _ = writeln!(out, "{}", cache_line(&total));
        let priced = self.models.iter().any(|m| {
            m.model
                .as_deref()
                .is_some_and(|name| prices.price(name).is_some())
        });
        if self.models.len() > 1 {
            for m in &self.models {
                let name = m.model.as_deref().unwrap_or("(model not recorded)");
                let cost = m
                    .model
                    .as_deref()
                    .and_then(|n| prices.price(n))
                    .map(|(p, _)| format!(", ${:.4}", p.cost(&m.usage)))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {name}: {} calls, {} prompt ({} cached) + {} completion{cost}",
                    m.calls,
                    m.usage.prompt_tokens,
                    m.usage.cached_tokens,
                    m.usage.completion_tokens
                );
            }
        }
        let (cost, complete) = self.cost(prices);
        if !priced {
            out.push_str(
                "cost: unknown (no price for this model; set [provider] price = { input = …, output = … } in dollars per million tokens)",
            );
        } else if complete {
            let _ = write!(out, "cost: ${cost:.4}");
        } else {
            let _ = write!(
                out,
                "cost: at least ${cost:.4} (some models have no known price)"
            );
        }
        out
    }
}

/// `cache: 75 % of prompt tokens read from the cache (1,500 of 2,000)`.
pub fn cache_line(usage: &Usage) -> String {
    match usage.cache_hit_percent() {
        None => "cache: no prompt tokens yet".to_owned(),
        Some(percent) => {
            let mut line = format!(
                "cache: {percent} % of prompt tokens read from the cache ({} of {})",
                usage.cached_tokens, usage.prompt_tokens
            );
            if usage.cache_write_tokens > 0 {
                let _ = write!(line, ", {} written to it", usage.cache_write_tokens);
            }
            line
        }
    }
}

/// The prices known for the configured models: `price` from the
/// configuration, else — for models on OpenRouter — its listing, cached in
/// the store for [`PRICE_CACHE_MS`] (fetched at most once per call of this
/// function; a failed fetch leaves the price unknown and is logged).
pub fn price_book(settings: &Settings, store: &Mutex<Store>, now_ms: u64) -> PriceList {
    let p = &settings.provider;
    let mut list = Vec::new();
    let mut wanted: Vec<(&str, &str, Option<&str>)> = Vec::new();
    let mut links = vec![(
        p.model.as_str(),
        p.base_url.as_str(),
        p.api_key.as_ref().map(Secret::expose),
        p.price,
    )];
    links.extend(p.fallbacks.iter().map(|f| {
        (
            f.model.as_str(),
            f.base_url.as_str(),
            f.api_key.as_ref().map(Secret::expose),
            f.price,
        )
    }));
    for (model, base_url, key, price) in links {
        match price {
            Some(price) => list.push((model.to_owned(), price, PriceSource::Config)),
            None if base_url.contains("openrouter.ai") => wanted.push((model, base_url, key)),
            None => {}
        }
    }
    let lock = || crate::sync::lock(store);
    let mut fetched: Option<Vec<(String, Price)>> = None;
    for (model, base_url, key) in wanted {
        if let Ok(Some(price)) = cached_price(&lock(), model, now_ms) {
            list.push((model.to_owned(), price, PriceSource::OpenRouter));
            continue;
        }
        let listing = fetched.get_or_insert_with(|| fetch_openrouter(base_url, key));
        if let Some((_, price)) = listing.iter().find(|(id, _)| id == model) {
            if let Err(e) = store_price(&mut lock(), model, price, now_ms) {
                tracing::warn!(error = %e, "could not cache a model price");
            }
            list.push((model.to_owned(), *price, PriceSource::OpenRouter));
        }
    }
    PriceList(list)
}

/// The `/usage` text of stored session `id`: token totals, cache share and
/// cost. For `hermes sessions show`, the CLI's and the gateway's `/usage`.
pub fn session_usage_text(
    settings: &Settings,
    store: &Mutex<Store>,
    id: &str,
    now_ms: u64,
) -> Result<String, StoreError> {
    let report = UsageReport::for_session(&crate::sync::lock(store), id)?;
    Ok(report.render(&price_book(settings, store, now_ms)))
}

fn fetch_openrouter(base_url: &str, key: Option<&str>) -> Vec<(String, Price)> {
    let client = OpenAiClient::new(ClientOptions {
        base_url: base_url.to_owned(),
        api_key: key.map(str::to_owned),
        max_attempts: 1,
        ..ClientOptions::default()
    });
    match client.and_then(|c| c.models_body()) {
        Ok(body) => parse_openrouter_models(&body),
        Err(e) => {
            tracing::warn!(error = %e, "could not fetch OpenRouter prices");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cost_prices_each_kind_of_token() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_read: Some(0.3),
            cache_write: Some(3.75),
        };
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            total_tokens: 1_100_000,
            cached_tokens: 600_000,
            cache_write_tokens: 200_000,
        };
        // 200k plain × 3 + 600k × 0.3 + 200k × 3.75 + 100k × 15, per million.
        let cost = price.cost(&usage);
        assert!((cost - (0.6 + 0.18 + 0.75 + 1.5)).abs() < 1e-9, "{cost}");
        let no_cache_prices = Price {
            cache_read: None,
            cache_write: None,
            ..price
        };
        assert!((no_cache_prices.cost(&usage) - (3.0 + 1.5)).abs() < 1e-9);
    }

    #[test]
    fn openrouter_listing_prices() {
        let body = br#"{"data":[
            {"id":"anthropic/claude-sonnet-4","pricing":{"prompt":"0.000003","completion":"0.000015","input_cache_read":"0.0000003","input_cache_write":"0.00000375"}},
            {"id":"free/model","pricing":{"prompt":"0","completion":"0"}},
            {"id":"broken","pricing":{"prompt":"x","completion":"1"}},
            {"id":"no-pricing"}
        ]}"#;
        let prices = parse_openrouter_models(body);
        assert_eq!(prices.len(), 2);
        let (id, p) = &prices[0];
        assert_eq!(id, "anthropic/claude-sonnet-4");
        assert!((p.input - 3.0).abs() < 1e-9 && (p.output - 15.0).abs() < 1e-9);
        assert!((p.cache_read.unwrap() - 0.3).abs() < 1e-9);
        assert!((p.cache_write.unwrap() - 3.75).abs() < 1e-9);
        assert_eq!(prices[1].1.input, 0.0);
    }

    #[test]
    fn openrouter_prices_are_fetched_and_cached_for_a_day() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/api/v1", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                conn.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            let body = r#"{"data":[{"id":"anthropic/claude-sonnet-4","pricing":{"prompt":"0.000003","completion":"0.000015","input_cache_read":"0.0000003"}}]}"#;
            write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            String::from_utf8(head).unwrap()
        });
        let prices = fetch_openrouter(&base, Some("sk-or-test"));
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /api/v1/models "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer sk-or-test")
        );
        let (id, price) = &prices[0];
        assert_eq!(id, "anthropic/claude-sonnet-4");

        let mut store = Store::open_in_memory().unwrap();
        let day = PRICE_CACHE_MS;
        assert_eq!(cached_price(&store, id, 1000).unwrap(), None);
        store_price(&mut store, id, price, 1000).unwrap();
        assert_eq!(
            cached_price(&store, id, 1000 + day - 1).unwrap(),
            Some(*price)
        );
        assert_eq!(cached_price(&store, id, 1000 + day).unwrap(), None, "stale");
    }

    #[test]
    fn the_report_says_what_it_knows() {
        let report = UsageReport {
            models: vec![
                ModelUsage {
                    model: Some("claude".into()),
                    calls: 3,
                    usage: Usage {
                        prompt_tokens: 4000,
                        completion_tokens: 300,
                        total_tokens: 4300,
                        cached_tokens: 3000,
                        cache_write_tokens: 0,
                    },
                },
                ModelUsage {
                    model: Some("fallback".into()),
                    calls: 1,
                    usage: Usage {
                        prompt_tokens: 1000,
                        completion_tokens: 100,
                        total_tokens: 1100,
                        ..Usage::default()
                    },
                },
            ],
        };
        let text = report.render(&NoPrices);
        assert!(text.contains("5000 prompt + 400 completion"), "{text}");
        assert!(text.contains("4 model calls"), "{text}");
        assert!(
            text.contains("60 % of prompt tokens read from the cache"),
            "{text}"
        );
        assert!(text.contains("cost: unknown"), "{text}");
        let prices = PriceList(vec![(
            "claude".into(),
            Price {
                input: 3.0,
                output: 15.0,
                cache_read: Some(0.3),
                cache_write: None,
            },
            PriceSource::Config,
        )]);
        let text = report.render(&prices);
        // 1000 × 3 + 3000 × 0.3 + 300 × 15, per million.
        assert!(text.contains("cost: at least $0.0084"), "{text}");
        assert!(text.contains("claude: 3 calls"), "{text}");
    }
}
