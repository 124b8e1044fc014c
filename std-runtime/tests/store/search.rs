//! Full-text search on both backends: user text is words, not query
//! syntax, and the index stays consistent with the messages through
//! appends, undo and deletes.

use std::path::Path;

use hermes_core::{LedgerEntry, Message, Role, ToolCall};
use hermes_runtime::store::{BackendKind, NewSession};
use rusqlite::Connection;

use super::support::{assistant, user};
use crate::backends::{self, Db, both};

fn search_treats_user_text_as_words_not_syntax(db: Db) {
    let mut store = db.open();
    let a = store.create_session(&NewSession::default()).unwrap();
    let b = store.create_session(&NewSession::default()).unwrap();
    store
        .append_messages(
            &a.id,
            &[
                user("Please book the flight to Hà Nội tomorrow", 1),
                assistant("I booked flight VN123 AND a hotel", 2),
                LedgerEntry::new(Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall::new("c", "book", r#"{"hotel":"x"}"#)],
                }),
                LedgerEntry::new(Message::tool("c", "confirmation: ok \"quoted\" text")),
            ],
        )
        .unwrap();
    store
        .append_messages(&b.id, &[user("日本語のテキスト and emoji 🚀 rocket", 3)])
        .unwrap();

    let hits = store.search("flight", 10).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.session_id == a.id));
    let mut roles: Vec<Role> = hits.iter().map(|h| h.role).collect();
    roles.sort_by_key(|r| r.as_str());
    assert_eq!(roles, vec![Role::Assistant, Role::User]);
    assert!(
        hits.iter().all(|h| h.snippet.contains("[flight]")),
        "{hits:?}"
    );

    // Every word must match (implicit AND).
    let hits = store.search("flight hotel", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].seq, hits[0].role), (1, Role::Assistant));

    // FTS5 operators and punctuation in user text are plain words.
    let hits = store.search("AND", 10).unwrap();
    assert_eq!(hits.len(), 2, "the word 'and' appears twice: {hits:?}");
    for odd in [
        "\"",
        "\"\"",
        "\"unbalanced",
        "flight\"",
        "*",
        "flig*",
        "NOT",
        "OR",
        "NEAR(",
        "a:b",
        "content:flight",
        "(",
        ")",
        "-",
        "^",
        "+",
        "{",
        "}",
        "'",
        "''",
        "\\",
        "%",
        "_",
        ";--",
        "flight OR",
        "AND AND",
        "NEAR(flight hotel)",
        "\u{0}",
        "   ",
        "",
        "\t\n",
    ] {
        let result = store.search(odd, 10);
        assert!(result.is_ok(), "{odd:?}: {result:?}");
    }
    assert!(store.search("*", 10).unwrap().is_empty());
    assert!(store.search("", 10).unwrap().is_empty());
    // `*` is not a prefix operator here: "flig*" is the word "flig".
    assert!(store.search("flig*", 10).unwrap().is_empty());
    // Quotes in the query are ignored as punctuation by the tokenizer.
    assert_eq!(store.search("\"quoted\"", 10).unwrap().len(), 1);
    // A column filter in user text does not restrict anything.
    assert_eq!(store.search("content:flight", 10).unwrap().len(), 0);

    // Unicode: diacritics folded, emoji and CJK do not break anything.
    assert_eq!(store.search("Hà", 10).unwrap().len(), 1);
    assert_eq!(store.search("ha noi", 10).unwrap().len(), 1);
    assert_eq!(store.search("NỘI", 10).unwrap().len(), 1);
    let hits = store.search("rocket 🚀", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, b.id);
    assert_eq!(store.search("日本語のテキスト", 10).unwrap().len(), 1);

    // Limits.
    assert_eq!(store.search("flight", 1).unwrap().len(), 1);
    assert!(store.search("flight", 0).unwrap().is_empty());
    // Tool-call arguments are not message content.
    assert!(
        store
            .search("hotel", 10)
            .unwrap()
            .iter()
            .all(|h| h.role != Role::Tool)
    );
}

/// FTS5's own check of the index against the `messages` table (`rank = 1`
/// compares with the external content): passes only when every message is
/// indexed with exactly its current text and nothing else is.
pub(crate) fn assert_index_matches_messages(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute(
        "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)",
        [],
    )
    .unwrap_or_else(|e| panic!("full-text index differs from the messages: {e}"));
}

fn full_text_index_stays_consistent(db: Db) {
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap();
    for i in 0..20 {
        store
            .append_messages(
                &s.id,
                &[
                    user(&format!("question {i}"), i),
                    LedgerEntry::new(Message::Assistant {
                        content: None,
                        tool_calls: vec![ToolCall::new("c", "t", "{}")],
                    }),
                    LedgerEntry::new(Message::tool("c", format!("answer {i}"))),
                ],
            )
            .unwrap();
        // Searches at irregular points, so undo deletes indexed rows (after
        // a search) as well as rows the index has not seen yet.
        if i % 4 == 1 {
            assert!(!store.search("question", 1).unwrap().is_empty());
        }
        if i % 3 == 0 {
            store.undo_last_turn(&s.id).unwrap();
        }
    }
    drop(store);
    db.assert_index_sound();

    let store = db.open();
    let caught_up = store.catch_up_search_index().unwrap();
    match db.kind {
        BackendKind::Sqlite => assert!(caught_up > 0),
        BackendKind::Postgres => assert_eq!(caught_up, 0, "indexed as stored"),
    }
    assert_eq!(store.catch_up_search_index().unwrap(), 0, "nothing left");
    db.assert_index_consistent();
    let indexed = store.search("question", 100).unwrap().len();
    assert_eq!(indexed, 13, "7 of 20 turns were undone");
}

fn an_appended_message_is_found_by_the_very_next_search(db: Db) {
    let mut store = db.open();
    let a = store.create_session(&NewSession::default()).unwrap().id;
    let b = store.create_session(&NewSession::default()).unwrap().id;
    for i in 0..5u64 {
        store
            .append_messages(&a, &[user(&format!("albatross number{i}"), i)])
            .unwrap();
        let hits = store.search(&format!("number{i}"), 10).unwrap();
        assert_eq!(hits.len(), 1, "append {i} not found at once");
        assert_eq!((hits[0].session_id.as_str(), hits[0].seq), (a.as_str(), i));
        assert_eq!(
            store.search("albatross", 10).unwrap().len(),
            (i + 1) as usize
        );
    }
    // A message written by another connection is found too.
    let mut other = db.open();
    other
        .append_messages(&b, &[assistant("a pelican from elsewhere", 9)])
        .unwrap();
    let hits = store.search("pelican", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (hits[0].session_id.as_str(), hits[0].role),
        (b.as_str(), Role::Assistant)
    );
    drop((store, other));
    db.assert_index_consistent();
}

fn undone_messages_are_not_found_whether_or_not_they_were_indexed(db: Db) {
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap().id;
    store
        .append_messages(&s, &[user("keep the heron", 1)])
        .unwrap();

    // Undone before any search: never indexed.
    store
        .append_messages(&s, &[user("unseen flamingo", 2), assistant("pink", 3)])
        .unwrap();
    assert_eq!(store.undo_last_turn(&s).unwrap(), 2);
    assert!(store.search("flamingo", 10).unwrap().is_empty());

    // Undone after a search indexed it: removed from the index.
    store
        .append_messages(&s, &[user("seen flamingo", 4), assistant("pinker", 5)])
        .unwrap();
    assert_eq!(store.search("flamingo", 10).unwrap().len(), 1);
    assert_eq!(store.undo_last_turn(&s).unwrap(), 2);
    assert!(store.search("flamingo", 10).unwrap().is_empty());
    assert!(store.search("pinker", 10).unwrap().is_empty());

    // The undone rows had the highest ids, so the next messages reuse them;
    // they must be indexed as the new text, not taken for the old rows.
    store
        .append_messages(&s, &[user("a stork now", 6), assistant("white", 7)])
        .unwrap();
    assert!(store.search("flamingo", 10).unwrap().is_empty());
    let hits = store.search("stork", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].seq, 1);
    assert_eq!(store.search("heron", 10).unwrap().len(), 1);
    drop(store);
    db.assert_index_consistent();
}

fn deleting_unindexed_newest_rows_does_not_hide_later_messages(db: Db) {
    // Indexed rows deleted below an unindexed one, then the unindexed one
    // deleted: the highest remaining id drops below the indexed watermark,
    // and the next message reuses an id the index already "passed".
    let mut store = db.open();
    let s1 = store.create_session(&NewSession::default()).unwrap().id;
    let s2 = store.create_session(&NewSession::default()).unwrap().id;
    store.append_messages(&s1, &[user("keep", 1)]).unwrap();
    store.append_messages(&s1, &[user("alpha", 2)]).unwrap();
    assert_eq!(store.search("alpha", 10).unwrap().len(), 1);
    store.append_messages(&s2, &[user("gamma", 3)]).unwrap();
    assert_eq!(store.undo_last_turn(&s1).unwrap(), 1, "alpha, indexed");
    assert_eq!(store.undo_last_turn(&s2).unwrap(), 1, "gamma, not indexed");
    store.append_messages(&s2, &[user("delta", 4)]).unwrap();
    let hits = store.search("delta", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, s2);
    assert!(store.search("alpha", 10).unwrap().is_empty());
    assert!(store.search("gamma", 10).unwrap().is_empty());
    // The same through replace_transcript, which deletes a whole session.
    store.append_messages(&s2, &[user("epsilon", 5)]).unwrap();
    store.replace_transcript(&s2, &[user("zeta", 6)]).unwrap();
    store.append_messages(&s1, &[user("eta", 7)]).unwrap();
    for (word, n) in [
        ("delta", 0),
        ("epsilon", 0),
        ("zeta", 1),
        ("eta", 1),
        ("keep", 1),
    ] {
        assert_eq!(store.search(word, 10).unwrap().len(), n, "{word}");
    }
    drop(store);
    db.assert_index_consistent();
}

both!(
    search_treats_user_text_as_words_not_syntax,
    full_text_index_stays_consistent,
    an_appended_message_is_found_by_the_very_next_search,
    undone_messages_are_not_found_whether_or_not_they_were_indexed,
    deleting_unindexed_newest_rows_does_not_hide_later_messages,
);
