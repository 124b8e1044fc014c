//! Session management the CLI offers (`sessions show/delete/rename`, id
//! prefixes, `--continue` per directory) against real databases, on both
//! backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use backends::{Db, both};

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{NewSession, Store, StoreError};

fn cli_in(dir: &str) -> NewSession<'_> {
    NewSession {
        platform: Some("cli"),
        workdir: Some(dir),
        ..NewSession::default()
    }
}

fn store(db: Db) -> (Db, Store) {
    let store = db.open();
    (db, store)
}

fn a_session_is_found_by_its_id_or_a_unique_prefix(db: Db) {
    let (_db, mut store) = store(db);
    let a = store.create_session(&cli_in("/a")).unwrap();
    let b = store.create_session(&cli_in("/b")).unwrap();
    assert_eq!(store.find_session(&a.id).unwrap().unwrap().id, a.id);
    // The random suffix tells two sessions of the same second apart.
    let common =
        a.id.chars()
            .zip(b.id.chars())
            .take_while(|(x, y)| x == y)
            .count();
    let unique_a = &a.id[..common + 1];
    assert_eq!(store.find_session(unique_a).unwrap().unwrap().id, a.id);
    match store.find_session(&a.id[..common]) {
        Err(StoreError::AmbiguousId { candidates, .. }) => {
            assert_eq!(candidates.len(), 2);
            assert!(candidates.contains(&a.id) && candidates.contains(&b.id));
        }
        other => panic!("expected an ambiguity, got {other:?}"),
    }
    assert_eq!(store.find_session("zzz").unwrap(), None);
    assert_eq!(store.find_session("").unwrap(), None);
    // `_` is a character of ids, not a wildcard.
    let underscore_prefix = format!("{}_", &a.id[..8]);
    let by_date = store.find_session(&underscore_prefix);
    assert!(matches!(by_date, Err(StoreError::AmbiguousId { .. })));
    assert_eq!(store.find_session("2%").unwrap(), None);
}

fn continue_finds_the_latest_session_of_a_directory(db: Db) {
    let (_db, mut store) = store(db);
    let here = store.create_session(&cli_in("/project")).unwrap();
    let elsewhere = store.create_session(&cli_in("/other")).unwrap();
    store
        .append_messages(&elsewhere.id, &[LedgerEntry::at(Message::user("x"), 1)])
        .unwrap();
    let found = store.latest_session_in("cli", "/project").unwrap().unwrap();
    assert_eq!(found.id, here.id);
    assert_eq!(found.workdir.as_deref(), Some("/project"));
    assert_eq!(store.latest_session_in("cli", "/nowhere").unwrap(), None);
    assert_eq!(
        store.latest_session_in("telegram", "/project").unwrap(),
        None
    );
}

fn deleting_a_session_removes_its_messages_and_search_hits(db: Db) {
    let (_db, mut store) = store(db);
    let gone = store.create_session(&cli_in("/a")).unwrap();
    let kept = store.create_session(&cli_in("/a")).unwrap();
    for (id, text) in [(&gone.id, "pineapple gone"), (&kept.id, "pineapple kept")] {
        store
            .append_messages(id, &[LedgerEntry::at(Message::user(text), 1)])
            .unwrap();
    }
    // One indexed before the delete, one appended after the last search.
    assert_eq!(store.search("pineapple", 10).unwrap().len(), 2);
    store
        .append_messages(
            &gone.id,
            &[LedgerEntry::at(Message::user("pineapple more"), 2)],
        )
        .unwrap();
    store.delete_session(&gone.id).unwrap();
    assert_eq!(store.session(&gone.id).unwrap(), None);
    let hits = store.search("pineapple", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, kept.id);
    assert!(matches!(
        store.delete_session(&gone.id),
        Err(StoreError::SessionNotFound(_))
    ));
    assert_eq!(store.load_transcript(&kept.id).unwrap().len(), 1);
}

both!(
    a_session_is_found_by_its_id_or_a_unique_prefix,
    continue_finds_the_latest_session_of_a_directory,
    deleting_a_session_removes_its_messages_and_search_hits,
);
