//! What the store tests share: a hand-moved clock, the schema versions
//! this build migrates to, and sample sessions and messages (one of every
//! kind).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hermes_core::{Clock, EntryMeta, FinishReason, LedgerEntry, Message, ToolCall, Usage};
use hermes_runtime::store::NewSession;

/// A clock the test moves by hand.
#[derive(Debug, Default)]
pub(crate) struct TestClock(pub(crate) AtomicU64);

impl TestClock {
    pub(crate) fn at(ms: u64) -> Arc<Self> {
        Arc::new(TestClock(AtomicU64::new(ms)))
    }
    pub(crate) fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The schema version this build migrates to.
pub(crate) const LATEST_SCHEMA: u32 = 13;

/// The PostgreSQL schema version this build migrates to.
pub(crate) const LATEST_PG_SCHEMA: u32 = 5;

/// 2026-11-30T00:15:03Z
pub(crate) const T0: u64 = 1_795_997_703_000;

pub(crate) fn gateway_session<'a>(key: &'a str) -> NewSession<'a> {
    NewSession {
        session_key: Some(key),
        platform: Some("telegram"),
        chat_id: Some("42"),
        user_id: Some("7"),
        model: Some("gpt-x"),
        system_prompt: None,
        ..NewSession::default()
    }
}

pub(crate) fn user(text: &str, ts: u64) -> LedgerEntry {
    LedgerEntry::at(Message::user(text), ts)
}

pub(crate) fn assistant(text: &str, ts: u64) -> LedgerEntry {
    LedgerEntry::at(Message::assistant(text), ts)
}

/// Every kind of message, with every metadata field exercised.
pub(crate) fn every_kind() -> Vec<LedgerEntry> {
    vec![
        LedgerEntry::at(Message::user("hello \"world\" — xin chào 👋\nline two"), T0),
        LedgerEntry {
            message: Message::Assistant {
                content: None,
                tool_calls: vec![
                    ToolCall::new("call_1", "read_file", r#"{"path":"a.txt"}"#),
                    ToolCall::new("call_2", "terminal", "{not json"),
                ],
            },
            meta: EntryMeta {
                reasoning: Some("I should read the file first".into()),
                reasoning_details: Some(
                    r#"[{"type":"reasoning.text","text":"I should read the file first","signature":"c2ln","index":0}]"#
                        .into(),
                ),
                model: Some("anthropic/claude-sonnet-4".into()),
                usage: Some(Usage {
                    prompt_tokens: 120,
                    completion_tokens: 30,
                    total_tokens: 150,
                    cached_tokens: 100,
                    cache_write_tokens: 15,
                }),
                timestamp_ms: T0 + 1,
                finish_reason: Some(FinishReason::ToolCalls),
                interrupted: false,
                compaction: None,
            },
        },
        LedgerEntry::at(Message::tool("call_1", "file contents"), T0 + 2),
        LedgerEntry {
            message: Message::tool(
                "call_2",
                "[Tool execution skipped -- user sent a new message]",
            ),
            meta: EntryMeta {
                interrupted: true,
                compaction: None,
                timestamp_ms: T0 + 3,
                ..EntryMeta::default()
            },
        },
        // Text and tool calls together; zero usage is not "no usage".
        LedgerEntry {
            message: Message::Assistant {
                content: Some("partial answer".into()),
                tool_calls: vec![ToolCall::new("call_3", "web", "{}")],
            },
            meta: EntryMeta {
                reasoning: None,
                usage: Some(Usage::default()),
                timestamp_ms: T0 + 4,
                finish_reason: Some(FinishReason::Length),
                interrupted: true,
                compaction: None,
                ..EntryMeta::default()
            },
        },
        // Empty text is not "no text".
        LedgerEntry {
            message: Message::Assistant {
                content: Some(String::new()),
                tool_calls: Vec::new(),
            },
            meta: EntryMeta {
                finish_reason: Some(FinishReason::ContentFilter),
                ..EntryMeta::default()
            },
        },
        LedgerEntry {
            message: Message::assistant("done"),
            meta: EntryMeta {
                finish_reason: Some(FinishReason::Other("function_call".into())),
                usage: Some(Usage {
                    prompt_tokens: u64::try_from(i64::MAX).unwrap(),
                    completion_tokens: 0,
                    total_tokens: 1,
                    ..Usage::default()
                }),
                timestamp_ms: T0 + 6,
                ..EntryMeta::default()
            },
        },
        LedgerEntry {
            message: Message::assistant("stopped"),
            meta: EntryMeta {
                finish_reason: Some(FinishReason::Stop),
                timestamp_ms: T0 + 7,
                ..EntryMeta::default()
            },
        },
        LedgerEntry {
            message: Message::assistant("made up"),
            meta: EntryMeta {
                finish_reason: Some(FinishReason::Other("weird_provider_reason".into())),
                ..EntryMeta::default()
            },
        },
    ]
}
