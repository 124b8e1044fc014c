//! A model's token prices: the settings type `[provider] price` is read
//! into, and the one formula of what a usage costs. A leaf: the
//! configuration loader and [`crate::pricing`] both use it.

use hermes_core::Usage;

/// Dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    /// Uncached prompt tokens.
    pub input: f64,
    /// Generated tokens.
    pub output: f64,
    /// Prompt tokens read from the cache (input price when `None`).
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the cache (input price when `None`).
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `usage` costs at this price, in dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage
            .cache_write_tokens
            .min(usage.prompt_tokens.saturating_sub(cached));
        let plain = usage
            .prompt_tokens
            .saturating_sub(cached)
            .saturating_sub(written);
        let per_token =
            |dollars_per_million: f64, tokens: u64| dollars_per_million * tokens as f64 / 1e6;
        per_token(self.input, plain)
            + per_token(self.cache_read.unwrap_or(self.input), cached)
            + per_token(self.cache_write.unwrap_or(self.input), written)
            + per_token(self.output, usage.completion_tokens)
    }
}
