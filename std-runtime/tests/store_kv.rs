//! The key-value table's atomic batches: a claim that fails writes nothing,
//! a transcript append and its key-value changes commit together, and old
//! timestamped keys are pruned by prefix. Real SQLite files in temp dirs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{KvWrite, NewSession, Store, StoreError};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    (dir, store)
}

#[test]
fn a_claim_is_a_test_and_set_and_a_failed_one_writes_nothing() {
    let (dir, mut s) = store();
    let first = s
        .kv_commit(&[
            KvWrite::Claim {
                key: "seen.a",
                value: "100",
            },
            KvWrite::Set {
                key: "inbox.1",
                value: "message one",
            },
        ])
        .unwrap();
    assert!(first);
    let again = s
        .kv_commit(&[
            KvWrite::Set {
                key: "inbox.2",
                value: "written before the claim, rolled back with it",
            },
            KvWrite::Claim {
                key: "seen.a",
                value: "200",
            },
        ])
        .unwrap();
    assert!(!again, "the key was claimed already");
    drop(s);
    let s = Store::open(&dir.path().join("state.db")).unwrap();
    assert_eq!(s.kv_get("seen.a").unwrap().as_deref(), Some("100"));
    assert_eq!(s.kv_get("inbox.1").unwrap().as_deref(), Some("message one"));
    assert_eq!(s.kv_get("inbox.2").unwrap(), None);
}

#[test]
fn a_transcript_append_and_its_key_value_changes_commit_together() {
    let (_dir, mut s) = store();
    let id = s.create_session(&NewSession::default()).unwrap().id;
    s.kv_set("inbox.1", "pending").unwrap();
    let moved = s
        .append_messages_with_kv(
            &id,
            &[LedgerEntry::new(Message::user("hello"))],
            &[
                KvWrite::Delete("inbox.1"),
                KvWrite::Set {
                    key: "turn.k",
                    value: "running",
                },
            ],
        )
        .unwrap();
    assert!(moved);
    assert_eq!(s.load_transcript(&id).unwrap().len(), 1);
    assert_eq!(s.kv_get("inbox.1").unwrap(), None);
    assert_eq!(s.kv_get("turn.k").unwrap().as_deref(), Some("running"));

    // A failed claim rolls the append back too.
    s.kv_set("seen.x", "1").unwrap();
    let moved = s
        .append_messages_with_kv(
            &id,
            &[LedgerEntry::new(Message::user("twice"))],
            &[KvWrite::Claim {
                key: "seen.x",
                value: "2",
            }],
        )
        .unwrap();
    assert!(!moved);
    assert_eq!(s.load_transcript(&id).unwrap().len(), 1);

    // An unknown session changes nothing.
    let err = s
        .append_messages_with_kv(
            "no-such-session",
            &[LedgerEntry::new(Message::user("lost?"))],
            &[KvWrite::Delete("turn.k")],
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::SessionNotFound(_)));
    assert_eq!(s.kv_get("turn.k").unwrap().as_deref(), Some("running"));
}

#[test]
fn old_timestamped_keys_are_pruned_by_prefix_and_nothing_else() {
    let (_dir, mut s) = store();
    for (k, v) in [
        ("gateway.seen.a", "1000"),
        ("gateway.seen.b", "5000"),
        ("gateway.seen.c", "999"),
        ("gateway.seen.not-a-time", "abc"),
        ("gateway.seenother", "1"),
        ("gateway.inbox.1", "1"),
        ("telegram.offset", "7"),
    ] {
        s.kv_set(k, v).unwrap();
    }
    assert_eq!(s.kv_prune_below("gateway.seen.", 2000).unwrap(), 2);
    let left: Vec<String> = s.kv_scan("").unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        left,
        [
            "gateway.inbox.1",
            "gateway.seen.b",
            "gateway.seen.not-a-time",
            "gateway.seenother",
            "telegram.offset"
        ]
    );
}
