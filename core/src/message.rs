//! The conversation ledger and its wire view.
//!
//! [`Message`] is exactly what an OpenAI-compatible chat API accepts for the
//! user, assistant and tool roles; it is the only type the request encoder
//! serializes. [`LedgerEntry`] wraps a `Message` with ledger-only metadata
//! ([`EntryMeta`]: reasoning text, token usage, timestamps, finish reason).
//! The encoder serializes `&entry.message`; ledger fields reach the wire
//! (SPEC L5) only through an explicit encoder option for providers that
//! require the model's reasoning back (`RequestOptions::reasoning_echo`),
//! and nothing else of the metadata ever does — the guarantee is structural,
//! not a filter that could be forgotten.
//!
//! There is deliberately no `system` role here: the system prompt is not a
//! message (SPEC L6). It is passed beside the ledger on every call and the type
//! system keeps it out of the stored transcript.

// Numbers here come from the outside (a provider, a platform, a header):
// arithmetic on them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};

use crate::attachment::Attachment;

/// One chat message as the provider sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Text typed by the user (or a platform message routed to the agent).
    User {
        /// The user's text.
        content: String,
        /// Images sent with the text (SPEC X6), by reference: the encoder
        /// asks an [`AttachmentResolver`](crate::attachment::AttachmentResolver)
        /// whether to send each as an image part or as a text reference.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    /// The model's answer: text, tool calls, or both.
    Assistant {
        /// Text of the answer; `None` when the model only called tools.
        #[serde(default)]
        content: Option<String>,
        /// Tool calls requested in this turn, in the order they must be answered.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The `id` of the [`ToolCall`] this result answers (SPEC L7).
        tool_call_id: String,
        /// The result text (or the error text the model should read).
        content: String,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
            attachments: Vec::new(),
        }
    }

    /// A user message with attachments (SPEC X6).
    pub fn user_with(content: impl Into<String>, attachments: Vec<Attachment>) -> Self {
        Message::User {
            content: content.into(),
            attachments,
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }

    /// A tool result answering `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }

    /// The role as the wire spells it.
    pub fn role(&self) -> Role {
        match self {
            Message::User { .. } => Role::User,
            Message::Assistant { .. } => Role::Assistant,
            Message::Tool { .. } => Role::Tool,
        }
    }

    /// The text content, if any.
    pub fn content(&self) -> Option<&str> {
        match self {
            Message::User { content, .. } | Message::Tool { content, .. } => Some(content),
            Message::Assistant { content, .. } => content.as_deref(),
        }
    }

    /// The attachments of a user message (empty for other roles).
    pub fn attachments(&self) -> &[Attachment] {
        match self {
            Message::User { attachments, .. } => attachments,
            _ => &[],
        }
    }

    /// The tool calls of an assistant message (empty for other roles).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// The role of a [`Message`], for storage and display.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `tool`
    Tool,
}

impl Role {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses the wire spelling; `None` for anything else (including `system`,
    /// which is never part of a ledger).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id; the tool result must echo it.
    pub id: String,
    /// Always `"function"` on the wire.
    #[serde(rename = "type", default)]
    pub kind: ToolCallKind,
    /// Which function, with what arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A function tool call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: ToolCallKind::Function,
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The `type` of a tool call; OpenAI defines only `function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolCallKind {
    /// `"function"`
    #[default]
    #[serde(rename = "function")]
    Function,
}

/// The function half of a [`ToolCall`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: a JSON document in a string,
    /// possibly invalid (the loop answers invalid JSON with an error result).
    pub arguments: String,
}

impl FunctionCall {
    /// Whether the arguments are what the API requires: one JSON object.
    /// Truncated or malformed JSON, an empty string and non-object values
    /// (`[1]`, `"x"`) are not.
    pub fn arguments_are_object(&self) -> bool {
        is_json_object(&self.arguments)
    }

    /// The arguments as they may be sent back to the provider: verbatim when
    /// they are a JSON object, `{}` otherwise (the ledger keeps the original;
    /// see [`crate::codec::request`]).
    pub fn arguments_on_wire(&self) -> &str {
        if self.arguments_are_object() {
            &self.arguments
        } else {
            "{}"
        }
    }
}

/// Whether `text` is exactly one JSON object (surrounding whitespace allowed).
pub(crate) fn is_json_object(text: &str) -> bool {
    // A document that starts with `{` and parses whole is an object.
    text.trim_start().starts_with('{')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// Why the model stopped producing output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `stop`: the answer is complete.
    Stop,
    /// `tool_calls`: the model wants tools run.
    ToolCalls,
    /// `length`: the output hit the token limit and was cut (SPEC L4).
    Length,
    /// `content_filter`: the provider withheld output.
    ContentFilter,
    /// Anything else a provider invents (kept verbatim).
    Other(String),
}

impl FinishReason {
    /// Parses the wire spelling. `function_call` (the legacy name) maps to
    /// [`FinishReason::ToolCalls`].
    pub fn parse(s: &str) -> Self {
        match s {
            "stop" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.into()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(s) => s,
        }
    }
}

/// Token counts reported by the provider, in one shape whatever the API.
///
/// `prompt_tokens` counts every input token, including those read from or
/// written to the provider's prompt cache; `cached_tokens` and
/// `cache_write_tokens` say how many of them were. Deserializing reads every
/// shape providers report: OpenAI's
/// `prompt_tokens_details.cached_tokens`, OpenRouter's
/// `prompt_tokens_details.cache_write_tokens`, Anthropic's
/// `cache_read_input_tokens` / `cache_creation_input_tokens` (native, or
/// passed through by OpenAI-compatible proxies), DeepSeek's
/// `prompt_cache_hit_tokens`, and `input_tokens` / `output_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "UsageWire")]
pub struct Usage {
    /// Tokens in the prompt (system prompt + messages + tools), cached or not.
    pub prompt_tokens: u64,
    /// Tokens the model generated.
    pub completion_tokens: u64,
    /// The provider's total (usually the sum of the two).
    pub total_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (SPEC X3).
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache (Anthropic bills
    /// them above the normal input price).
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds another call's usage to this running total. The counts are
    /// whatever the provider sent, so the sums saturate instead of
    /// overflowing.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }

    /// The share of prompt tokens read from the cache, in percent (`None`
    /// when there were no prompt tokens).
    pub fn cache_hit_percent(&self) -> Option<u64> {
        if self.prompt_tokens == 0 {
            return None;
        }
        let cached = self.cached_tokens.min(self.prompt_tokens);
        // `cached <= prompt`: the product fits in u128, the quotient is ≤ 100.
        let percent = u128::from(cached)
            .checked_mul(100)
            .and_then(|p| p.checked_div(u128::from(self.prompt_tokens)))
            .unwrap_or(100);
        Some(u64::try_from(percent).unwrap_or(100))
    }
}

/// The union of the usage objects providers send, as read off the wire.
///
/// Every count is optional (a `null` reads as absent); a count of the wrong
/// type is a decode error.
#[derive(Default, Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
    /// Anthropic (and proxies passing its counts through).
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    /// DeepSeek.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Default, Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// OpenRouter.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

impl From<UsageWire> for Usage {
    fn from(w: UsageWire) -> Self {
        let details = w.prompt_tokens_details.unwrap_or_default();
        let cached_tokens = details
            .cached_tokens
            .or(w.cache_read_input_tokens)
            .or(w.prompt_cache_hit_tokens)
            .unwrap_or(0);
        let cache_write_tokens = details
            .cache_write_tokens
            .or(w.cache_creation_input_tokens)
            .unwrap_or(0);
        // Anthropic's `input_tokens` leaves out what the cache served or
        // stored; `prompt_tokens` (OpenAI's) includes it.
        let prompt_tokens = w.prompt_tokens.unwrap_or_else(|| {
            w.input_tokens
                .unwrap_or(0)
                .saturating_add(w.cache_read_input_tokens.unwrap_or(0))
                .saturating_add(w.cache_creation_input_tokens.unwrap_or(0))
        });
        let completion_tokens = w.completion_tokens.or(w.output_tokens).unwrap_or(0);
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: w
                .total_tokens
                .unwrap_or_else(|| prompt_tokens.saturating_add(completion_tokens)),
            cached_tokens,
            cache_write_tokens,
        }
    }
}

/// Ledger-only metadata. Never serialized to the provider (SPEC L5); the
/// store persists it in its own columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryMeta {
    /// Reasoning ("thinking") text the provider returned beside the answer.
    /// Never shown as the answer; sent back only where a provider requires
    /// it, through an explicit encoder option (`RequestOptions::reasoning_echo`).
    pub reasoning: Option<String>,
    /// The provider's reasoning blocks in OpenRouter's `reasoning_details`
    /// form (a JSON array: text with its signature, encrypted reasoning),
    /// kept verbatim because providers that require them back check their
    /// signatures. Same echo rule as `reasoning`.
    pub reasoning_details: Option<String>,
    /// The configured name of the model that produced an assistant message
    /// (with a fallback chain, not necessarily the primary), for prices.
    pub model: Option<String>,
    /// Token usage of the call that produced this message.
    pub usage: Option<Usage>,
    /// When the entry was created, in milliseconds since the Unix epoch, as
    /// told by the caller's [`Clock`](crate::Clock) (`0` if it has none).
    pub timestamp_ms: u64,
    /// The finish reason of the call that produced an assistant message.
    pub finish_reason: Option<FinishReason>,
    /// The message is incomplete because the run was interrupted (SPEC L11).
    pub interrupted: bool,
    /// Set on the entry that carries a compaction summary (SPEC X1): a
    /// summary the ledger made of earlier messages, not something the user
    /// or the model wrote. See [`crate::context`].
    pub compaction: Option<CompactionMark>,
}

/// Marks the entry of a compacted ledger that holds the summary of the
/// messages it replaced (SPEC X1).
///
/// The summary is either an entry of its own (a user-role message) or the
/// prefix of the user message right after it ([`SummaryPlacement`]), so the
/// roles of the compacted ledger still alternate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionMark {
    /// How the summary sits in the ledger.
    pub placement: SummaryPlacement,
    /// How many messages (originals and an earlier summary) it replaced.
    pub replaced: u32,
    /// How many entries the compaction kept verbatim at the end, counted
    /// from the first one after a standalone summary (or from the entry
    /// holding a [`SummaryPlacement::BeforeNext`] summary). Token usage
    /// recorded on those entries was measured on the longer ledger before
    /// the compaction, so the estimator does not trust it
    /// ([`crate::context::estimate`]).
    pub kept_after: u32,
}

/// Where a compaction summary sits in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryPlacement {
    /// A user-role entry of its own, before the verbatim tail.
    Standalone,
    /// The summary is the beginning of the first tail entry, a user message:
    /// the entry's text is the summary, a separator, then the original text.
    BeforeNext,
}

/// One entry of the full conversation ledger: the wire message plus metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    /// What the provider sees.
    pub message: Message,
    /// What only the ledger sees.
    pub meta: EntryMeta,
}

impl LedgerEntry {
    /// An entry with empty metadata.
    pub fn new(message: Message) -> Self {
        LedgerEntry {
            message,
            meta: EntryMeta::default(),
        }
    }

    /// An entry stamped with `timestamp_ms`.
    pub fn at(message: Message, timestamp_ms: u64) -> Self {
        LedgerEntry {
            message,
            meta: EntryMeta {
                timestamp_ms,
                ..EntryMeta::default()
            },
        }
    }
}

impl From<Message> for LedgerEntry {
    fn from(message: Message) -> Self {
        LedgerEntry::new(message)
    }
}

/// Where the current turn starts in `entries`: the first of the last run of
/// consecutive user messages (a message the gateway queued is transcribed
/// just before the one that replaced it, so a turn may start with several),
/// or `entries.len()` when the ledger ends without one. Everything from
/// there on was said in this turn; attachments before it are history.
pub fn current_turn_start(entries: &[LedgerEntry]) -> usize {
    let is_user = |e: &LedgerEntry| matches!(e.message, Message::User { .. });
    let Some(last_user) = entries.iter().rposition(is_user) else {
        return entries.len();
    };
    let before = entries.get(..last_user).map_or(0, |head| {
        head.iter().rev().take_while(|e| is_user(e)).count()
    });
    // `before` counts entries before `last_user`, so this never saturates.
    last_user.saturating_sub(before)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn usage_totals_of_provider_counts_saturate_instead_of_overflowing() {
        // Found by reading the fuzzed paths: `+=` on provider-sent counts
        // panicked in debug builds and wrapped in release ones.
        let mut total = Usage {
            prompt_tokens: u64::MAX - 1,
            completion_tokens: 5,
            total_tokens: u64::MAX,
            cached_tokens: u64::MAX,
            cache_write_tokens: 1,
        };
        total.add(&Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 1,
            cached_tokens: 3,
            cache_write_tokens: u64::MAX,
        });
        assert_eq!(
            total,
            Usage {
                prompt_tokens: u64::MAX,
                completion_tokens: 10,
                total_tokens: u64::MAX,
                cached_tokens: u64::MAX,
                cache_write_tokens: u64::MAX,
            }
        );
        assert_eq!(total.cache_hit_percent(), Some(100));
    }
}
