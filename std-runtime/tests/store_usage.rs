//! Per-message cache counts and models in the store (schema 4), and the
//! session totals per model that `/usage` prices.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_core::{EntryMeta, LedgerEntry, Message, Usage};
use hermes_runtime::store::{ModelUsage, NewSession, Store, StoreError};

fn answer(model: Option<&str>, prompt: u64, cached: u64, written: u64) -> LedgerEntry {
    LedgerEntry {
        message: Message::assistant("a"),
        meta: EntryMeta {
            model: model.map(str::to_owned),
            usage: Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: 10,
                total_tokens: prompt + 10,
                cached_tokens: cached,
                cache_write_tokens: written,
            }),
            ..EntryMeta::default()
        },
    }
}

#[test]
fn session_usage_sums_per_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut store = Store::open(&path).unwrap();
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
    let store = Store::open(&path).unwrap();
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
    assert!(usage.iter().any(|u| u.model.is_none() && u.calls == 1));
    assert!(matches!(
        store.session_usage("no-such-session"),
        Err(StoreError::SessionNotFound(_))
    ));
    let empty = {
        let mut s = Store::open(&path).unwrap();
        s.create_session(&NewSession::default()).unwrap().id
    };
    assert!(store.session_usage(&empty).unwrap().is_empty());
}

/// Regression: the compacted view (schema 4's `load_view`) selected the
/// columns of schema 3 and failed with "Invalid column index" once messages
/// had cache counts and models; both loads now share one column list.
#[test]
fn the_compacted_view_keeps_cache_counts_and_models() {
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

    let mut store = Store::open_in_memory().unwrap();
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
