//! Conversations that outlive the context window (SPEC X1).
//!
//! Everything here is policy, with no IO: the runtime says how big the
//! window is ([`ContextWindow`]) and the [`Model`] writes summaries.
//!
//! - [`window`]: the window size and where it came from, shared and
//!   lowered when a provider states a smaller limit.
//! - [`estimate`]: what a request costs — the provider's last count plus a
//!   cheap estimate of what was added since.
//! - [`plan`]: where to cut (head, middle, tail), never between a tool call
//!   and its results.
//! - [`summary`]: the summary request and how a summary is framed.
//! - [`compact`]: a compaction run — plan, one summary call, rewrite.
//! - [`digest`]: the automatic digest that stands in for a summary when
//!   the summariser fails, and [`SummarizerHealth`], its cooldown.
//! - [`overflow`]: recognising a provider's context-length error.
//!
//! # When the agent compacts
//! Before every model call of a run ([`crate::Agent`] with a
//! [`ContextConfig`]), if the estimated request exceeds
//! [`ContextPolicy::threshold_pct`] of the window; again, whatever it can,
//! when the provider answers with a context-length error (then the call is
//! retried once); and on request (`/compress`). The system prompt is never
//! touched: it is not part of the ledger.
//!
//! # What a compaction keeps
//! The head (the first exchange), the most recent entries within a budget,
//! and in place of the rest one summary entry marked
//! [`CompactionMark`](crate::CompactionMark). The in-memory ledger is the
//! compacted *view*; the store keeps the originals (the runtime records
//! each compaction beside them and loads the view from it).

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::model::Model;

pub mod compact;
pub mod digest;
pub mod estimate;
pub mod overflow;
pub mod plan;
pub mod summary;
pub mod window;

pub use compact::{CompactError, Compaction, Compactor, Urgency};
pub use window::{ContextWindow, MIN_WINDOW_TOKENS, WindowSource};

/// The fractions that decide when to compact and what to keep.
///
/// The *allowance* is the part of the window the conversation may use
/// before a compaction: `threshold_pct` of the window minus the system
/// prompt and tool definitions, which every request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextPolicy {
    /// Compact before a call whose estimated request exceeds this share of
    /// the window, in percent (default 70).
    pub threshold_pct: u8,
    /// Most of the allowance the kept head may take, in percent (default 15).
    pub head_pct: u8,
    /// Share of the allowance the kept recent entries may take, in percent
    /// (default 40).
    pub tail_pct: u8,
    /// Target length of a summary, in percent of the allowance (default 15,
    /// at least [`MIN_SUMMARY_TOKENS`], at most [`MAX_SUMMARY_TOKENS`]).
    pub summary_pct: u8,
    /// Cap on one tool result, in percent of the window (default 25, and
    /// never more than half the allowance).
    pub tool_result_pct: u8,
}

/// Shortest summary asked for.
pub const MIN_SUMMARY_TOKENS: u64 = 128;
/// Longest summary asked for, whatever the window.
pub const MAX_SUMMARY_TOKENS: u64 = 4_000;
/// Smallest cap on one tool result.
pub const MIN_TOOL_RESULT_TOKENS: u64 = 256;

impl Default for ContextPolicy {
    fn default() -> Self {
        ContextPolicy {
            threshold_pct: 70,
            head_pct: 15,
            tail_pct: 40,
            summary_pct: 15,
            tool_result_pct: 25,
        }
    }
}

/// The token budgets a policy gives one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyBudgets {
    /// Estimated request size above which a call compacts first.
    pub threshold: u64,
    /// What the conversation may use: threshold minus fixed parts.
    pub allowance: u64,
    /// Most tokens of the kept head.
    pub head: u64,
    /// Tokens of recent entries to keep.
    pub tail: u64,
    /// Target summary length.
    pub summary: u64,
    /// Most tokens of conversation sent to the summariser.
    pub summary_input: u64,
    /// Least a proactive compaction must remove to be worth a call.
    pub min_gain: u64,
    /// Cap on one tool result.
    pub tool_result: u64,
}

impl ContextPolicy {
    /// The budgets for a `window` of tokens whose requests always carry
    /// `fixed` tokens (system prompt, tool definitions).
    pub fn budgets(&self, window: u64, fixed: u64) -> PolicyBudgets {
        let pct = |n: u64, p: u8| n * u64::from(p.min(100)) / 100;
        let threshold = pct(window, self.threshold_pct.clamp(10, 95));
        let allowance = threshold.saturating_sub(fixed);
        let summary =
            pct(allowance, self.summary_pct).clamp(MIN_SUMMARY_TOKENS, MAX_SUMMARY_TOKENS);
        let summary_input = (window * 85 / 100)
            .saturating_sub(compact::summary_overhead() + summary)
            .max(MIN_SUMMARY_TOKENS);
        let tool_result = pct(window, self.tool_result_pct)
            .min(allowance / 2)
            .max(MIN_TOOL_RESULT_TOKENS);
        PolicyBudgets {
            threshold,
            allowance,
            head: pct(allowance, self.head_pct),
            tail: pct(allowance, self.tail_pct),
            summary,
            summary_input,
            min_gain: (allowance / 10).max(64),
            tool_result,
        }
    }
}

/// What an agent needs to keep its conversation within the window.
#[derive(Clone)]
pub struct ContextConfig {
    /// The model's window, shared with every agent on the same model.
    pub window: Arc<ContextWindow>,
    /// When to compact and what to keep.
    pub policy: ContextPolicy,
    /// The model that writes summaries (`[provider] compression_model`);
    /// `None`: the agent's own model.
    pub summarizer: Option<Arc<dyn Model>>,
    /// How long the summariser is left alone after it failed, in ms
    /// (default [`DEFAULT_SUMMARIZER_COOLDOWN_MS`]); meanwhile compactions
    /// make the automatic digest.
    pub summarizer_cooldown_ms: u64,
    /// Whether the summariser is resting, shared by the agents (and clones)
    /// of this configuration.
    pub summarizer_health: Arc<SummarizerHealth>,
}

/// Ten minutes: how long a failed summariser is left alone by default.
pub const DEFAULT_SUMMARIZER_COOLDOWN_MS: u64 = 10 * 60 * 1000;

/// When the summariser may be asked again after a failure.
#[derive(Debug, Default)]
pub struct SummarizerHealth {
    /// Agent-clock *seconds* before which the summariser is not asked
    /// (0: ask). Seconds in a `u32`, not ms in a `u64`: the bare-metal
    /// targets the core builds for (thumbv7em, riscv32imac) have no 64-bit
    /// atomics, and a rest a fraction of a second longer costs nothing.
    resting_until_s: AtomicU32,
}

impl SummarizerHealth {
    /// Whether a compaction at `now_ms` may ask the summariser.
    pub fn available(&self, now_ms: u64) -> bool {
        now_ms >= u64::from(self.resting_until_s.load(Ordering::Acquire)) * 1000
    }

    /// The summariser failed at `now_ms`: leave it alone for `cooldown_ms`.
    pub fn failed(&self, now_ms: u64, cooldown_ms: u64) {
        // At least 1 ms, so that a clock stuck at 0 does not keep asking.
        let until_ms = now_ms.saturating_add(cooldown_ms.max(1));
        let until_s = u32::try_from(until_ms.div_ceil(1000)).unwrap_or(u32::MAX);
        self.resting_until_s.store(until_s, Ordering::Release);
    }
}

impl core::fmt::Debug for ContextConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ContextConfig")
            .field("window", &self.window)
            .field("policy", &self.policy)
            .field("summarizer", &self.summarizer.is_some())
            .field("summarizer_cooldown_ms", &self.summarizer_cooldown_ms)
            .field("summarizer_health", &self.summarizer_health)
            .finish()
    }
}

impl ContextConfig {
    /// A configuration with the default policy and the agent's own model.
    pub fn new(window: Arc<ContextWindow>) -> Self {
        ContextConfig {
            window,
            policy: ContextPolicy::default(),
            summarizer: None,
            summarizer_cooldown_ms: DEFAULT_SUMMARIZER_COOLDOWN_MS,
            summarizer_health: Arc::default(),
        }
    }
}

/// How full the window is, for `/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextUsage {
    /// Estimated tokens of the next request (before the new user message).
    pub used: u64,
    /// The window.
    pub window: u32,
    /// Where the window size came from.
    pub source: WindowSource,
    /// Whether `used` builds on a count the provider reported.
    pub anchored: bool,
}

impl ContextUsage {
    /// `used` as a whole percentage of the window.
    pub fn percent(&self) -> u64 {
        (self.used * 100)
            .checked_div(u64::from(self.window))
            .unwrap_or(0)
    }

    /// `context: 1234 / 8192 tokens (15 %), window from provider metadata`.
    pub fn line(&self) -> String {
        format!(
            "context: {} / {} tokens ({} %), window: {}",
            self.used,
            self.window,
            self.percent(),
            self.source
        )
    }
}

/// Cuts one tool result to at most `max_tokens` (estimated), on a char
/// boundary, with a visible marker saying how much was left out: a 1 MB
/// file read must not blow a small window.
pub fn cap_tool_result(text: String, max_tokens: u64) -> String {
    if estimate::text_tokens(&text) <= max_tokens {
        return text;
    }
    let marker_tokens = 40;
    let cut = estimate::prefix_within(&text, max_tokens.saturating_sub(marker_tokens));
    let omitted = text.len() - cut;
    let mut out = String::with_capacity(cut + 160);
    out.push_str(&text[..cut]);
    out.push_str(&format!(
        "\n[… {omitted} more bytes cut to fit the model's context window; ask for a smaller part (a line range, a narrower search)]"
    ));
    out
}

/// [`cap_tool_result`], keeping the whole output first with `keep` (SPEC
/// Y6): when it was kept, the result is the head (about two thirds of the
/// room), a line saying how much was left out, where everything is and how
/// to read ranges of it, and the tail. When `keep` returns `None` the
/// output is cut as by [`cap_tool_result`].
pub fn cap_tool_result_kept(
    text: String,
    max_tokens: u64,
    keep: impl FnOnce(&str) -> Option<crate::tool::KeptOutput>,
) -> String {
    if estimate::text_tokens(&text) <= max_tokens {
        return text;
    }
    let Some(kept) = keep(&text) else {
        return cap_tool_result(text, max_tokens);
    };
    let place = &kept.place;
    let note_tokens = 80 + estimate::text_tokens(place);
    let room = max_tokens.saturating_sub(note_tokens);
    let head = estimate::prefix_within(&text, room * 2 / 3);
    let tail = estimate::suffix_within(&text, room / 3).max(head);
    let lines = kept.lines;
    let mut out = String::with_capacity(head + (text.len() - tail) + 300);
    out.push_str(&text[..head]);
    out.push_str(&format!(
        "\n[output truncated: {} bytes omitted from the middle. The whole output ({} bytes, \
         {lines} lines) is saved in {place}: read any part of it with read_file (offset = first \
         line, limit = number of lines).]\n",
        tail - head,
        kept.bytes
    ));
    out.push_str(&text[tail..]);
    out
}
