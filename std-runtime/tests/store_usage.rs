//! Per-message cache counts and models in the store (SQLite schema 6,
//! PostgreSQL 2), and the session totals per model that `/usage` prices —
//! on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use backends::{Db, both};
use hermes_core::{EntryMeta, LedgerEntry, Message, Usage};
use hermes_runtime::store::{ModelUsage, NewSession, StoreError};

fn answer(model: Option<&str>, prompt: u64, cached: u64, written: u64) -> LedgerEntry {
    LedgerEntry {
        message: Message::assistant("a"),
        meta: EntryMeta {
            model: model.map(str::to_owned),
            usage: Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: 10,
                total_tokens: prompt.saturating_add(10),
                cached_tokens: cached,
                cache_write_tokens: written,
            }),
            ..EntryMeta::default()
        },
    }
}

both!(
    session_usage_sums_per_model,
    session_usage_saturates_instead_of_failing,
    the_compacted_view_keeps_cache_counts_and_models,
    spending_accounts_add_with_their_messages_and_lose_nothing_in_a_race,
);

/// Issue 44: an account (`KvWrite::Add`) grows in the transaction that
/// stores the messages it pays for — both or neither — and two writers
/// adding to one account at once (two gateways) both count.
fn spending_accounts_add_with_their_messages_and_lose_nothing_in_a_race(db: Db) {
    use hermes_runtime::store::KvWrite;
    let key = "usage/tok/d:2026-12-04/telegram:7";
    let mut store = db.open();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    // A batch abandoned by a failed claim adds nothing.
    store.kv_set("taken", "x").unwrap();
    let refused = store
        .append_messages_with_kv(
            &id,
            &[answer(Some("m"), 100, 0, 0)],
            &[
                KvWrite::Add { key, amount: 110 },
                KvWrite::Claim {
                    key: "taken",
                    value: "y",
                },
            ],
        )
        .unwrap();
    assert!(!refused);
    assert_eq!(store.kv_get(key).unwrap(), None);
    assert!(store.load_transcript(&id).unwrap().is_empty());
    drop(store);
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let target = db.target();
            let id = id.clone();
            std::thread::spawn(move || {
                let mut store = hermes_runtime::store::Store::open_target(&target).unwrap();
                for _ in 0..25 {
                    let ok = store
                        .append_messages_with_kv(
                            &id,
                            &[answer(Some("m"), 100, 0, 0)],
                            &[KvWrite::Add { key, amount: 110 }],
                        )
                        .unwrap();
                    assert!(ok);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let store = db.open();
    assert_eq!(store.kv_get(key).unwrap().as_deref(), Some("5500"));
    assert_eq!(store.load_transcript(&id).unwrap().len(), 50);
}

fn session_usage_sums_per_model(db: Db) {
    let mut store = db.open();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    store
        .append_messages(
            &id,
            &[
                LedgerEntry::new(Message::user("q")),
                answer(Some("claude"), 1000, 0, 900),
                LedgerEntry::new(Message::tool("c", "r")),
                answer(Some("claude"), 1100, 900, 0),
                answer(Some("gpt-4o"), 500, 0, 0),
                // Written before models were recorded.
                answer(None, 7, 0, 0),
            ],
        )
        .unwrap();
    drop(store);
    let store = db.open();
    let usage = store.session_usage(&id).unwrap();
    assert_eq!(
        usage[0],
        ModelUsage {
            model: Some("claude".into()),
            calls: 2,
            usage: Usage {
                prompt_tokens: 2100,
                completion_tokens: 20,
                total_tokens: 2120,
                cached_tokens: 900,
                cache_write_tokens: 900,
            },
        }
    );
    assert_eq!(usage.len(), 3);
    // Ties: by model name, no model first (the same on both backends).
    assert_eq!(usage[1].model, None);
    assert_eq!(usage[2].model.as_deref(), Some("gpt-4o"));
    assert_eq!(usage[1].calls, 1);
    assert!(matches!(
        store.session_usage("no-such-session"),
        Err(StoreError::SessionNotFound(_))
    ));
    let empty = {
        let mut s = db.open();
        s.create_session(&NewSession::default()).unwrap().id
    };
    assert!(store.session_usage(&empty).unwrap().is_empty());
}

/// Regression: the compacted view (schema 4's `load_view`) selected the
/// columns of schema 3 and failed with "Invalid column index" once messages
/// had cache counts and models; both loads now share one column list.
/// Counts are stored saturated at what the database holds; their sum
/// saturates too instead of failing the report.
fn session_usage_saturates_instead_of_failing(db: Db) {
    let mut store = db.open();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    let huge = answer(Some("m"), u64::MAX, u64::MAX, 0);
    store
        .append_messages(&id, std::slice::from_ref(&huge))
        .unwrap();
    let one = store.session_usage(&id).unwrap();
    let max = u64::try_from(i64::MAX).unwrap();
    assert_eq!(one[0].usage.prompt_tokens, max);
    assert_eq!(one[0].usage.cached_tokens, max);
    if db.kind == hermes_runtime::store::BackendKind::Postgres {
        // PostgreSQL sums into NUMERIC: two of them are capped, not refused.
        store.append_messages(&id, &[huge]).unwrap();
        let two = store.session_usage(&id).unwrap();
        assert_eq!((two[0].calls, two[0].usage.prompt_tokens), (2, max));
    }
}

fn the_compacted_view_keeps_cache_counts_and_models(db: Db) {
    use std::sync::Arc;

    use hermes_core::context::{ContextConfig, ContextWindow, WindowSource};
    use hermes_core::{
        Agent, ChatRequest, Completion, FinishReason, Model, ModelError, StreamSink, ToolRegistry,
    };

    struct Summarizer;
    impl Model for Summarizer {
        fn complete(
            &self,
            _request: &ChatRequest<'_>,
            _sink: &mut dyn StreamSink,
        ) -> Result<Completion, ModelError> {
            Ok(Completion {
                content: Some("the summary".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }

    let mut store = db.open();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    let mut view = Vec::new();
    for n in 0..10 {
        let mut answer = answer(Some("claude"), 3000, 2500, 0);
        answer.message = Message::assistant(format!("answer{n} {}", "w ".repeat(200)));
        let pair = [
            LedgerEntry::new(Message::user(format!("question{n} {}", "w ".repeat(200)))),
            answer,
        ];
        store.append_messages(&id, &pair).unwrap();
        view.extend(pair);
    }
    let agent = Agent::new(
        Arc::new(Summarizer),
        Arc::new(ToolRegistry::new()),
        "system",
    )
    .with_context(ContextConfig::new(Arc::new(ContextWindow::new(
        2_000,
        WindowSource::Configured,
    ))));
    let compaction = agent.compact(&mut view, None).unwrap();
    store.record_compaction(&id, &compaction).unwrap();
    let loaded = store.load_view(&id).unwrap();
    let last = loaded.last().unwrap();
    assert_eq!(last.meta.model.as_deref(), Some("claude"));
    assert_eq!(last.meta.usage.unwrap().cached_tokens, 2500);
}
