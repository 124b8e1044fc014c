//! Transcripts on both backends: every message kind round-trips, batches
//! are atomic, undo and replace, odd text (NUL), hand-edited rows, and a
//! reader and writers working at once.

use hermes_core::{LedgerEntry, Message, ToolCall, Usage};
use hermes_runtime::store::{NewSession, SessionStatus, Store, StoreError};

use super::support::{T0, TestClock, assistant, every_kind, gateway_session, user};
use crate::backends::{self, Db, both};

fn every_message_kind_and_meta_field_round_trips_through_a_file(db: Db) {
    let clock = TestClock::at(T0);
    let entries = every_kind();
    let id = {
        let mut store = db.open_with(&clock);
        let s = store.create_session(&gateway_session("k")).unwrap();
        // Two appends: sequence numbers continue across calls.
        store.append_messages(&s.id, &entries[..3]).unwrap();
        store.append_messages(&s.id, &entries[3..]).unwrap();
        assert_eq!(store.load_transcript(&s.id).unwrap(), entries);
        s.id
    };
    // And after reopening the file.
    let store = db.open_with(&clock);
    assert_eq!(store.load_transcript(&id).unwrap(), entries);
    let record = store.session(&id).unwrap().unwrap();
    assert_eq!(record.message_count, entries.len() as u64);
}

fn unknown_sessions_are_a_typed_error_and_change_nothing(db: Db) {
    let mut store = db.open();
    let missing = "20260101_000000_000000";
    assert!(store.session(missing).unwrap().is_none());
    let errs = [
        store.append_messages(missing, &[user("x", 1)]).unwrap_err(),
        store.load_transcript(missing).unwrap_err(),
        store.undo_last_turn(missing).unwrap_err(),
        store.set_model(missing, "m").unwrap_err(),
        store.set_system_prompt(missing, "p").unwrap_err(),
        store.set_status(missing, SessionStatus::Ended).unwrap_err(),
        store.set_title(missing, Some("t")).unwrap_err(),
    ];
    for err in errs {
        assert!(
            matches!(&err, StoreError::SessionNotFound(id) if id == missing),
            "{err}"
        );
        assert!(err.to_string().contains(missing));
    }
    assert!(store.list_sessions(10).unwrap().is_empty());
    assert!(store.search("x", 10).unwrap().is_empty());
}

fn a_failing_batch_stores_nothing(db: Db) {
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap();
    store.append_messages(&s.id, &[user("kept", 1)]).unwrap();
    let too_big = LedgerEntry::at(Message::assistant("late"), u64::MAX);
    let err = store
        .append_messages(&s.id, &[user("lost", 2), too_big])
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfRange {
                what: "timestamp_ms",
                value: u64::MAX
            }
        ),
        "{err}"
    );
    assert_eq!(store.load_transcript(&s.id).unwrap(), vec![user("kept", 1)]);
    assert!(store.search("lost", 5).unwrap().is_empty());
    // The store is still usable after the failed transaction.
    store.append_messages(&s.id, &[user("next", 3)]).unwrap();
    assert_eq!(store.load_transcript(&s.id).unwrap().len(), 2);
}

fn provider_token_counts_beyond_the_database_range_do_not_fail_the_append(db: Db) {
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap();
    let mut answer = assistant("the answer", 1);
    answer.meta.usage = Some(Usage {
        prompt_tokens: u64::MAX,
        completion_tokens: 7,
        total_tokens: u64::MAX,
        cached_tokens: u64::MAX,
        cache_write_tokens: 3,
    });
    store.append_messages(&s.id, &[answer]).unwrap();
    let stored = store.load_transcript(&s.id).unwrap();
    assert_eq!(stored[0].message.content(), Some("the answer"));
    let max = i64::MAX.unsigned_abs();
    assert_eq!(
        stored[0].meta.usage,
        Some(Usage {
            prompt_tokens: max,
            completion_tokens: 7,
            total_tokens: max,
            cached_tokens: max,
            cache_write_tokens: 3,
        })
    );
}

fn undo_drops_the_last_user_message_and_everything_after_it(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let s = store.create_session(&NewSession::default()).unwrap();
    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 0, "empty transcript");

    let turn1 = vec![user("first question", 1), assistant("first answer", 2)];
    let turn2 = vec![
        user("second question", 3),
        LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("c1", "web", "{}")],
        }),
        LedgerEntry::new(Message::tool("c1", "result")),
        assistant("second answer", 4),
    ];
    store.append_messages(&s.id, &turn1).unwrap();
    store.append_messages(&s.id, &turn2).unwrap();

    clock.advance(1_000);
    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 4);
    assert_eq!(store.load_transcript(&s.id).unwrap(), turn1);
    let record = store.session(&s.id).unwrap().unwrap();
    assert_eq!(record.message_count, 2);
    assert_eq!(record.updated_at_ms, T0 + 1_000);
    assert!(
        store.search("second", 10).unwrap().is_empty(),
        "undone text leaves the index"
    );

    // New messages continue the sequence where the transcript now ends.
    store.append_messages(&s.id, &[user("again", 5)]).unwrap();
    let hits = store.search("again", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].seq, 2);

    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 1);
    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 2);
    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 0);
    assert!(store.load_transcript(&s.id).unwrap().is_empty());

    // A transcript with no user message at all is left alone.
    store
        .append_messages(&s.id, &[assistant("unprompted", 6)])
        .unwrap();
    assert_eq!(store.undo_last_turn(&s.id).unwrap(), 0);
    assert_eq!(store.load_transcript(&s.id).unwrap().len(), 1);
}

fn replacing_a_transcript_is_atomic_and_reindexes_search(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let s = store.create_session(&NewSession::default()).unwrap();
    let long = vec![
        user("tell me about volcanoes", 1),
        assistant("volcanoes are long story", 2),
        user("and glaciers", 3),
        assistant("glaciers are ice", 4),
    ];
    store.append_messages(&s.id, &long).unwrap();

    // A failing replacement keeps the old transcript.
    let bad = vec![user("summary", u64::MAX)];
    assert!(store.replace_transcript(&s.id, &bad).is_err());
    assert_eq!(store.load_transcript(&s.id).unwrap(), long);

    clock.advance(50);
    let summary = vec![
        user("[summary] we discussed volcanoes", 5),
        assistant("ok", 6),
    ];
    store.replace_transcript(&s.id, &summary).unwrap();
    assert_eq!(store.load_transcript(&s.id).unwrap(), summary);
    let record = store.session(&s.id).unwrap().unwrap();
    assert_eq!(record.message_count, 2);
    assert_eq!(record.updated_at_ms, T0 + 50);
    assert!(store.search("glaciers", 10).unwrap().is_empty());
    let hits = store.search("volcanoes", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].seq, 0);
    // Appends continue after the replacement.
    store.append_messages(&s.id, &[user("next", 7)]).unwrap();
    assert_eq!(store.search("next", 10).unwrap()[0].seq, 2);
    assert!(matches!(
        store.replace_transcript("nope", &summary),
        Err(StoreError::SessionNotFound(_))
    ));
}

fn a_reader_sees_consistent_snapshots_while_a_writer_appends(db: Db) {
    let mut writer = db.open();
    let id = writer.create_session(&NewSession::default()).unwrap().id;
    const TURNS: usize = 150;

    let target = db.target();
    let reader_id = id.clone();
    let reader = std::thread::spawn(move || {
        let reader = Store::open_target(&target).unwrap();
        let mut last = 0;
        let mut reads = 0;
        loop {
            let transcript = reader.load_transcript(&reader_id).unwrap();
            // Whole turns only: appends are atomic.
            assert_eq!(transcript.len() % 2, 0, "saw half a turn");
            assert!(transcript.len() >= last, "went backwards");
            for (i, pair) in transcript.chunks(2).enumerate() {
                assert_eq!(pair[0], user(&format!("q{i}"), i as u64));
                assert_eq!(pair[1], assistant(&format!("a{i}"), i as u64));
            }
            last = transcript.len();
            reads += 1;
            if last == TURNS * 2 {
                return reads;
            }
            std::thread::yield_now();
        }
    });
    for i in 0..TURNS {
        writer
            .append_messages(
                &id,
                &[
                    user(&format!("q{i}"), i as u64),
                    assistant(&format!("a{i}"), i as u64),
                ],
            )
            .unwrap();
    }
    let reads = reader.join().unwrap();
    assert!(reads >= 1);
    assert_eq!(writer.load_transcript(&id).unwrap().len(), TURNS * 2);
}

fn two_writers_on_one_file_both_land(db: Db) {
    let id = db.open().create_session(&NewSession::default()).unwrap().id;
    let threads: Vec<_> = (0..2)
        .map(|w| {
            let target = db.target();
            let id = id.clone();
            std::thread::spawn(move || {
                let mut store = Store::open_target(&target).unwrap();
                for i in 0..50 {
                    store
                        .append_messages(&id, &[user(&format!("w{w} m{i}"), i)])
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let transcript = db.open().load_transcript(&id).unwrap();
    assert_eq!(transcript.len(), 100);
    for w in 0..2 {
        let mine: Vec<String> = transcript
            .iter()
            .filter_map(|e| e.message.content())
            .filter(|c| c.starts_with(&format!("w{w} ")))
            .map(str::to_owned)
            .collect();
        let expected: Vec<String> = (0..50).map(|i| format!("w{w} m{i}")).collect();
        assert_eq!(mine, expected, "each writer's messages in its own order");
    }
}

fn hand_edited_rows_are_a_typed_error_not_a_panic(db: Db) {
    let id = {
        let mut store = db.open();
        let id = store.create_session(&NewSession::default()).unwrap().id;
        store
            .append_messages(&id, &[user("fine", 1), assistant("fine too", 2)])
            .unwrap();
        id
    };
    db.exec("UPDATE messages SET tool_calls = '{broken' WHERE seq = 1");
    let err = db.open().load_transcript(&id).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("message 1"), "{err}");

    db.exec("UPDATE messages SET tool_calls = NULL, role = 'system' WHERE seq = 1");
    let err = db.open().load_transcript(&id).unwrap_err();
    assert!(err.to_string().contains("unknown role"), "{err}");

    db.exec("UPDATE messages SET role = 'assistant', timestamp_ms = -5 WHERE seq = 1");
    let err = db.open().load_transcript(&id).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

/// PostgreSQL's `text` cannot hold U+0000; a tool that read a binary file
/// produces it. Everything must come back exactly, on both backends.
fn text_with_nul_and_odd_characters_round_trips(db: Db) {
    let mut store = db.open();
    let odd = "binary\u{0}file \u{FFFF} \u{FFFF}0 end\u{0}";
    let s = store
        .create_session(&NewSession {
            chat_id: Some("chat\u{0}id"),
            system_prompt: Some(odd),
            ..NewSession::default()
        })
        .unwrap();
    let entries = vec![
        user(odd, 1),
        LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("c\u{0}1", "read_file", "{\"p\":\"\\u0000\"}")],
        }),
        LedgerEntry::new(Message::tool("c\u{0}1", odd)),
    ];
    store.append_messages(&s.id, &entries).unwrap();
    store.set_title(&s.id, Some(odd)).unwrap();
    store.kv_set("k", odd).unwrap();
    drop(store);
    let store = db.open();
    assert_eq!(store.load_transcript(&s.id).unwrap(), entries);
    let record = store.session(&s.id).unwrap().unwrap();
    assert_eq!(record.system_prompt.as_deref(), Some(odd));
    assert_eq!(record.title.as_deref(), Some(odd));
    assert_eq!(record.chat_id.as_deref(), Some("chat\u{0}id"));
    assert_eq!(store.kv_get("k").unwrap().as_deref(), Some(odd));
    assert_eq!(store.search("binary", 10).unwrap().len(), 2);
}

both!(
    every_message_kind_and_meta_field_round_trips_through_a_file,
    unknown_sessions_are_a_typed_error_and_change_nothing,
    a_failing_batch_stores_nothing,
    provider_token_counts_beyond_the_database_range_do_not_fail_the_append,
    undo_drops_the_last_user_message_and_everything_after_it,
    replacing_a_transcript_is_atomic_and_reindexes_search,
    a_reader_sees_consistent_snapshots_while_a_writer_appends,
    two_writers_on_one_file_both_land,
    hand_edited_rows_are_a_typed_error_not_a_panic,
    text_with_nul_and_odd_characters_round_trips,
);
