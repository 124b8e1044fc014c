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
