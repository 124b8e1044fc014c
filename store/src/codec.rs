//! A ledger entry as table columns and back — the part both backends share.
//!
//! Both store a message as the same columns (role, content, tool-call JSON,
//! tool-call id, reasoning, five token counts, finish reason, interrupted,
//! timestamp, answering model, reasoning details, attachments), so a transcript round-trips exactly on either. SQLite reads
//! its columns in place (`sqlite/transcript.rs`, the tuned hot path);
//! PostgreSQL fills a [`Columns`] and calls [`Columns::into_entry`].

use hermes_core::{EntryMeta, FinishReason, LedgerEntry, Message, Role, Usage};

use super::{StoreError, to_i64, tool_calls};

/// Inverse of [`FinishReason::as_str`]. Unlike [`FinishReason::parse`] it does
/// not fold the legacy `function_call` into `ToolCalls`, so a stored
/// `Other("function_call")` comes back unchanged.
pub(super) fn decode_finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" => FinishReason::Stop,
        "tool_calls" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other(s.to_owned()),
    }
}

/// The columns of one entry, ready to bind.
#[derive(Debug)]
pub(super) struct Encoded<'e> {
    pub role: &'static str,
    pub content: Option<&'e str>,
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<&'e str>,
    pub reasoning: Option<&'e str>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    pub finish_reason: Option<&'e str>,
    pub interrupted: bool,
    pub timestamp_ms: i64,
    pub cached_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub model: Option<&'e str>,
    pub reasoning_details: Option<&'e str>,
    /// A user message's attachments (SPEC X6) as a JSON array; `None`
    /// without any. References only: the files live in the media directory.
    pub attachments: Option<String>,
}

/// Encodes `entry` of session `id`.
pub(super) fn encode<'e>(id: &str, entry: &'e LedgerEntry) -> Result<Encoded<'e>, StoreError> {
    let tool_calls = match entry.message.tool_calls() {
        [] => None,
        calls => Some(
            serde_json::to_string(calls).map_err(|e| StoreError::Corrupt {
                session_id: id.to_owned(),
                what: format!("tool calls do not serialize: {e}"),
            })?,
        ),
    };
    let tool_call_id = match &entry.message {
        Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
        _ => None,
    };
    let attachments = match entry.message.attachments() {
        [] => None,
        list => Some(
            serde_json::to_string(list).map_err(|e| StoreError::Corrupt {
                session_id: id.to_owned(),
                what: format!("attachments do not serialize: {e}"),
            })?,
        ),
    };
    let meta = &entry.meta;
    let usage = meta.usage.as_ref();
    Ok(Encoded {
        role: entry.message.role().as_str(),
        content: entry.message.content(),
        tool_calls,
        tool_call_id,
        reasoning: meta.reasoning.as_deref(),
        prompt_tokens: usage.map(|u| saturating_i64(u.prompt_tokens)),
        completion_tokens: usage.map(|u| saturating_i64(u.completion_tokens)),
        total_tokens: usage.map(|u| saturating_i64(u.total_tokens)),
        finish_reason: meta.finish_reason.as_ref().map(FinishReason::as_str),
        interrupted: meta.interrupted,
        timestamp_ms: to_i64("timestamp_ms", meta.timestamp_ms)?,
        cached_tokens: usage.map(|u| saturating_i64(u.cached_tokens)),
        cache_write_tokens: usage.map(|u| saturating_i64(u.cache_write_tokens)),
        model: meta.model.as_deref(),
        reasoning_details: meta.reasoning_details.as_deref(),
        attachments,
    })
}

/// Token counts are whatever the provider sent: one beyond what the database
/// holds is stored as the largest it holds rather than failing the append
/// (and losing the answer with it).
fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The stored columns of one message, borrowed from a row.
#[derive(Debug)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))] // SQLite reads in place
pub(super) struct Columns<'r> {
    pub seq: i64,
    pub role: &'r str,
    pub content: Option<&'r str>,
    pub tool_calls: Option<&'r str>,
    pub tool_call_id: Option<&'r str>,
    pub reasoning: Option<&'r str>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    pub finish_reason: Option<&'r str>,
    pub interrupted: bool,
    pub timestamp_ms: i64,
    pub cached_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub model: Option<&'r str>,
    pub reasoning_details: Option<&'r str>,
    pub attachments: Option<&'r str>,
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Columns<'_> {
    /// The entry these columns store; [`StoreError::Corrupt`] for anything
    /// that does not fit the schema (never a panic).
    pub fn into_entry(self, session_id: &str) -> Result<LedgerEntry, StoreError> {
        let seq = self.seq;
        let corrupt = |what: String| StoreError::Corrupt {
            session_id: session_id.to_owned(),
            what: format!("message {seq}: {what}"),
        };
        let count = |v: Option<i64>, name: &str| -> Result<Option<u64>, StoreError> {
            v.map(|v| u64::try_from(v).map_err(|_| corrupt(format!("{name} is negative ({v})"))))
                .transpose()
        };
        let message = match Role::parse(self.role) {
            Some(Role::User) => Message::User {
                content: self
                    .content
                    .ok_or_else(|| corrupt("user message without content".into()))?
                    .to_owned(),
                attachments: match self.attachments {
                    None => Vec::new(),
                    Some(json) => serde_json::from_str(json)
                        .map_err(|e| corrupt(format!("attachments are not valid JSON: {e}")))?,
                },
            },
            Some(Role::Assistant) => Message::Assistant {
                content: self.content.map(str::to_owned),
                tool_calls: match self.tool_calls {
                    None => Vec::new(),
                    Some(json) => tool_calls::decode(json)
                        .map_err(|e| corrupt(format!("tool calls are not valid JSON: {e}")))?,
                },
            },
            Some(Role::Tool) => Message::Tool {
                tool_call_id: self
                    .tool_call_id
                    .ok_or_else(|| corrupt("tool result without tool_call_id".into()))?
                    .to_owned(),
                content: self
                    .content
                    .ok_or_else(|| corrupt("tool result without content".into()))?
                    .to_owned(),
            },
            None => return Err(corrupt(format!("unknown role {:?}", self.role))),
        };
        let usage = match (
            count(self.prompt_tokens, "prompt_tokens")?,
            count(self.completion_tokens, "completion_tokens")?,
            count(self.total_tokens, "total_tokens")?,
            count(self.cached_tokens, "cached_tokens")?,
            count(self.cache_write_tokens, "cache_write_tokens")?,
        ) {
            (None, None, None, None, None) => None,
            (p, c, t, r, w) => Some(Usage {
                prompt_tokens: p.unwrap_or(0),
                completion_tokens: c.unwrap_or(0),
                total_tokens: t.unwrap_or(0),
                cached_tokens: r.unwrap_or(0),
                cache_write_tokens: w.unwrap_or(0),
            }),
        };
        Ok(LedgerEntry {
            message,
            meta: EntryMeta {
                reasoning: self.reasoning.map(str::to_owned),
                reasoning_details: self.reasoning_details.map(str::to_owned),
                model: self.model.map(str::to_owned),
                usage,
                timestamp_ms: count(Some(self.timestamp_ms), "timestamp_ms")?.unwrap_or(0),
                finish_reason: self.finish_reason.map(decode_finish_reason),
                interrupted: self.interrupted,
                compaction: None,
            },
        })
    }
}
