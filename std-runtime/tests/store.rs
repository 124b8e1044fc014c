//! The store against real databases: each test of `both!` runs on a SQLite
//! file in a temp dir and on a fresh PostgreSQL database (a private server,
//! see `backends/mod.rs`); the rest test what only one backend has
//! (SQLite's migrations from old files, file modes, WAL; PostgreSQL's
//! schema table and connection errors).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backends;

use backends::{Db, both};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hermes_core::{Clock, EntryMeta, FinishReason, LedgerEntry, Message, Role, ToolCall, Usage};
use hermes_runtime::store::{BackendKind, NewSession, SessionStatus, Store, StoreError};
use rusqlite::Connection;

/// A clock the test moves by hand.
#[derive(Debug, Default)]
struct TestClock(AtomicU64);

impl TestClock {
    fn at(ms: u64) -> Arc<Self> {
        Arc::new(TestClock(AtomicU64::new(ms)))
    }
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The schema version this build migrates to.
const LATEST_SCHEMA: u32 = 8;
/// The PostgreSQL schema version this build migrates to.
const LATEST_PG_SCHEMA: u32 = 3;

/// 2026-11-30T00:15:03Z
const T0: u64 = 1_795_997_703_000;

fn gateway_session<'a>(key: &'a str) -> NewSession<'a> {
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

fn user(text: &str, ts: u64) -> LedgerEntry {
    LedgerEntry::at(Message::user(text), ts)
}

fn assistant(text: &str, ts: u64) -> LedgerEntry {
    LedgerEntry::at(Message::assistant(text), ts)
}

/// Every kind of message, with every metadata field exercised.
fn every_kind() -> Vec<LedgerEntry> {
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

fn session_fields_are_stored_and_updated(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let s = store
        .create_session(&gateway_session("agent:main:telegram:dm:42"))
        .unwrap();
    assert_eq!(s.session_key.as_deref(), Some("agent:main:telegram:dm:42"));
    assert_eq!(s.platform.as_deref(), Some("telegram"));
    assert_eq!(s.chat_id.as_deref(), Some("42"));
    assert_eq!(s.user_id.as_deref(), Some("7"));
    assert_eq!(s.model.as_deref(), Some("gpt-x"));
    assert_eq!(s.system_prompt, None);
    assert_eq!(s.title, None);
    assert_eq!((s.created_at_ms, s.updated_at_ms), (T0, T0));
    assert_eq!(s.status, SessionStatus::Active);
    assert_eq!(s.message_count, 0);
    assert!(s.id.starts_with("20261130_001503_"), "{}", s.id);

    store.set_system_prompt(&s.id, "You are Hermes.").unwrap();
    store.set_model(&s.id, "other-model").unwrap();
    store.set_title(&s.id, Some("Trip planning")).unwrap();
    clock.advance(5_000);
    store.append_messages(&s.id, &[user("hi", T0)]).unwrap();
    store.set_status(&s.id, SessionStatus::Ended).unwrap();
    let got = store.session(&s.id).unwrap().unwrap();
    assert_eq!(got.system_prompt.as_deref(), Some("You are Hermes."));
    assert_eq!(got.model.as_deref(), Some("other-model"));
    assert_eq!(got.title.as_deref(), Some("Trip planning"));
    assert_eq!(got.status, SessionStatus::Ended);
    assert_eq!(got.created_at_ms, T0);
    assert_eq!(got.updated_at_ms, T0 + 5_000);
    assert_eq!(got.message_count, 1);
    store.set_title(&s.id, None).unwrap();
    assert_eq!(store.session(&s.id).unwrap().unwrap().title, None);
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

fn reset_ends_the_active_session_and_starts_a_new_one(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let key = "agent:main:telegram:dm:42";
    let other_key = "agent:main:telegram:dm:43";
    assert!(store.active_session_for_key(key).unwrap().is_none());

    let old = store.create_session(&gateway_session(key)).unwrap();
    let other = store.create_session(&gateway_session(other_key)).unwrap();
    store
        .append_messages(&old.id, &[user("before reset", 1)])
        .unwrap();
    assert_eq!(
        store.active_session_for_key(key).unwrap().unwrap().id,
        old.id
    );

    clock.advance(10);
    // The key argument wins over the one in `new`.
    let new = store
        .reset(
            key,
            &NewSession {
                session_key: Some("ignored"),
                model: Some("m2"),
                ..NewSession::default()
            },
        )
        .unwrap();
    assert_ne!(new.id, old.id);
    assert_eq!(new.session_key.as_deref(), Some(key));
    assert_eq!(new.model.as_deref(), Some("m2"));
    assert_eq!(new.status, SessionStatus::Active);
    assert_eq!(new.message_count, 0);
    assert_eq!(new.created_at_ms, T0 + 10);

    let old_now = store.session(&old.id).unwrap().unwrap();
    assert_eq!(old_now.status, SessionStatus::Ended);
    assert_eq!(
        store.load_transcript(&old.id).unwrap(),
        vec![user("before reset", 1)]
    );
    assert_eq!(
        store.active_session_for_key(key).unwrap().unwrap().id,
        new.id
    );
    // Other keys are untouched.
    assert_eq!(
        store.active_session_for_key(other_key).unwrap().unwrap().id,
        other.id
    );

    // Reset of a key with no active session just creates one.
    let fresh = store
        .reset("agent:main:wecom:dm:1", &NewSession::default())
        .unwrap();
    assert_eq!(
        store
            .active_session_for_key("agent:main:wecom:dm:1")
            .unwrap()
            .unwrap()
            .id,
        fresh.id
    );
}

fn latest_session_on_a_platform_ignores_other_platforms(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    let cli = |p| NewSession {
        platform: Some(p),
        ..NewSession::default()
    };
    let older_cli = store.create_session(&cli("cli")).unwrap();
    clock.advance(10);
    let newer_cli = store.create_session(&cli("cli")).unwrap();
    clock.advance(10);
    let chat = store.create_session(&cli("telegram")).unwrap();
    clock.advance(10);
    store
        .append_messages(&older_cli.id, &[user("back", T0 + 30)])
        .unwrap();
    clock.advance(10);
    store
        .append_messages(&chat.id, &[user("hi", T0 + 40)])
        .unwrap();
    assert_eq!(store.latest_session().unwrap().unwrap().id, chat.id);
    assert_eq!(
        store.latest_session_on("cli").unwrap().unwrap().id,
        older_cli.id
    );
    assert_ne!(older_cli.id, newer_cli.id);
    assert_eq!(
        store.latest_session_on("telegram").unwrap().unwrap().id,
        chat.id
    );
}

fn listing_is_newest_first_and_latest_is_most_recently_updated(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock.clone());
    assert!(store.latest_session().unwrap().is_none());
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(store.create_session(&NewSession::default()).unwrap().id);
        clock.advance(1_000);
    }
    // Two created in the same millisecond: creation order still decides.
    ids.push(store.create_session(&NewSession::default()).unwrap().id);
    ids.push(store.create_session(&NewSession::default()).unwrap().id);

    let listed: Vec<String> = store
        .list_sessions(100)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(listed, expected);
    let first3: Vec<String> = store
        .list_sessions(3)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(first3, expected[..3]);
    assert!(store.list_sessions(0).unwrap().is_empty());

    assert_eq!(store.latest_session().unwrap().unwrap().id, ids[6]);
    clock.advance(1_000);
    store.append_messages(&ids[1], &[user("bump", 1)]).unwrap();
    assert_eq!(store.latest_session().unwrap().unwrap().id, ids[1]);
    assert!(
        store
            .latest_session_on("no-such-platform")
            .unwrap()
            .is_none()
    );
    // Updating does not change the creation order of the listing.
    assert_eq!(store.list_sessions(1).unwrap()[0].id, ids[6]);
}

fn session_ids_are_unique_within_one_millisecond(db: Db) {
    let clock = TestClock::at(T0);
    let mut store = db.open().with_clock(clock);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2_000 {
        let id = store.create_session(&NewSession::default()).unwrap().id;
        let (prefix, suffix) = id.split_at(16);
        assert_eq!(prefix, "20261130_001503_");
        assert_eq!(suffix.len(), 6);
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{id}"
        );
        assert!(seen.insert(id));
    }
}

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
fn assert_index_matches_messages(path: &Path) {
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

/// The version-1 schema exactly as hermes 0.1 wrote it (before titles and
/// full-text search), created by hand here so the migration is tested
/// against a real old file and not against the migration code itself.
const V1_SCHEMA: &str = "
CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL, session_key TEXT, source_platform TEXT, source_chat_id TEXT,
    source_user_id TEXT, model TEXT, system_prompt TEXT, created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended', 'suspended')),
    clean_shutdown INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_key ON sessions (session_key, status, updated_at_ms);
CREATE INDEX sessions_by_updated ON sessions (updated_at_ms);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT, tool_calls TEXT, tool_call_id TEXT,
    reasoning TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, total_tokens INTEGER,
    finish_reason TEXT, interrupted INTEGER NOT NULL DEFAULT 0, timestamp_ms INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
INSERT INTO sessions VALUES ('20250101_120000_abcdef', 'agent:main:telegram:dm:1', 'telegram',
    '1', '1', 'old-model', 'old prompt', 1735732800000, 1735732900000, 'active', 1);
INSERT INTO messages VALUES (1, '20250101_120000_abcdef', 0, 'user', 'remember the marmalade', NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, 0, 1735732800000);
INSERT INTO messages VALUES (2, '20250101_120000_abcdef', 1, 'assistant', NULL,
    '[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"memory\",\"arguments\":\"{}\"}}]',
    NULL, 'thinking', 10, 5, 15, 'tool_calls', 0, 1735732800001);
INSERT INTO messages VALUES (3, '20250101_120000_abcdef', 2, 'tool', 'saved marmalade', NULL,
    'c1', NULL, NULL, NULL, NULL, NULL, 0, 1735732800002);
INSERT INTO kv VALUES ('telegram.offset', '1234');
PRAGMA user_version = 1;
";

#[test]
fn a_version_1_database_is_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(V1_SCHEMA)
        .unwrap();

    let mut store = Store::open(&path).unwrap();
    let id = "20250101_120000_abcdef";
    let s = store.session(id).unwrap().unwrap();
    assert_eq!(s.title, None);
    assert_eq!(s.model.as_deref(), Some("old-model"));
    assert_eq!(s.system_prompt.as_deref(), Some("old prompt"));
    assert_eq!(s.message_count, 3);
    assert_eq!(
        store.load_transcript(id).unwrap(),
        vec![
            user("remember the marmalade", 1_735_732_800_000),
            LedgerEntry {
                message: Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall::new("c1", "memory", "{}")],
                },
                meta: EntryMeta {
                    reasoning: Some("thinking".into()),
                    usage: Some(Usage {
                        prompt_tokens: 10,
                        completion_tokens: 5,
                        total_tokens: 15,
                        ..Usage::default()
                    }),
                    timestamp_ms: 1_735_732_800_001,
                    finish_reason: Some(FinishReason::ToolCalls),
                    interrupted: false,
                    compaction: None,
                    ..EntryMeta::default()
                },
            },
            LedgerEntry::at(Message::tool("c1", "saved marmalade"), 1_735_732_800_002),
        ]
    );
    // Messages written by version 1 are searchable after the migration.
    let hits = store.search("marmalade", 10).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(
        store.kv_get("telegram.offset").unwrap().as_deref(),
        Some("1234")
    );
    // And the new schema works for new writes.
    store.set_title(id, Some("Jam")).unwrap();
    store
        .append_messages(id, &[user("more marmalade", 5)])
        .unwrap();
    assert_eq!(store.search("marmalade", 10).unwrap().len(), 3);
    drop(store);

    let conn = Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, LATEST_SCHEMA);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    conn.execute(
        "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')",
        [],
    )
    .unwrap();
    // Reopening a current database runs no step again.
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.search("marmalade", 10).unwrap().len(), 3);
}

/// What hermes 0.2 added on top of [`V1_SCHEMA`] (titles, and an FTS5 index
/// kept in sync by per-row triggers), by hand as well, followed by messages
/// written while those triggers were live.
const V2_UPGRADE: &str = "
ALTER TABLE sessions ADD COLUMN title TEXT;
CREATE INDEX sessions_by_created ON sessions (created_at_ms);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content = 'messages', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
PRAGMA user_version = 2;
INSERT INTO messages VALUES (4, '20250101_120000_abcdef', 3, 'user', 'and the toast', NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, 0, 1735732800003);
";

#[test]
fn a_version_2_database_switches_to_catch_up_indexing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("{V1_SCHEMA}{V2_UPGRADE}"))
        .unwrap();
    assert_index_matches_messages(&path);

    let mut store = Store::open(&path).unwrap();
    let id = "20250101_120000_abcdef";
    // Everything the old triggers indexed is still found, nothing twice.
    assert_eq!(store.search("marmalade", 10).unwrap().len(), 2);
    assert_eq!(store.catch_up_search_index().unwrap(), 0);
    assert_eq!(store.search("toast", 10).unwrap()[0].seq, 3);
    // New writes follow the new scheme.
    store
        .append_messages(id, &[user("butter please", 5), assistant("here", 6)])
        .unwrap();
    assert_eq!(store.search("butter", 10).unwrap().len(), 1);
    assert_eq!(store.undo_last_turn(id).unwrap(), 2);
    assert!(store.search("butter", 10).unwrap().is_empty());
    assert_eq!(store.load_transcript(id).unwrap().len(), 4);
    drop(store);

    let conn = Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, LATEST_SCHEMA);
    let insert_triggers: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'messages_fts_insert'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(insert_triggers, 0, "appends no longer index row by row");
    drop(conn);
    assert_index_matches_messages(&path);
}

#[test]
fn a_database_from_a_newer_hermes_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
            .unwrap();
    }
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: LATEST_SCHEMA,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("future.db"), "{text}");
    assert!(
        text.contains(&format!("schema 99 > {LATEST_SCHEMA}")),
        "{text}"
    );
    assert!(text.contains("upgrade hermes"), "{text}");

    let conn = Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 99);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "not switched to WAL");
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'sessions'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0);
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "these are my notes, not a database, and long enough to matter ".repeat(20),
    )
    .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .starts_with("these are my notes")
    );
}

#[test]
fn wal_mode_and_pragmas_are_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let _store = Store::open(&path).unwrap();
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal", "WAL is persistent in the file");
}

#[cfg(unix)]
#[test]
fn a_new_database_file_is_private_and_an_existing_one_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/state.db");
    let mut store = Store::open(&path).unwrap();
    let s = store.create_session(&NewSession::default()).unwrap();
    store.append_messages(&s.id, &[user("secret", 1)]).unwrap();
    assert_eq!(mode(&path), 0o600);
    let wal = path.with_file_name("state.db-wal");
    assert!(wal.exists());
    assert_eq!(mode(&wal), 0o600, "SQLite copies the database's mode");
    assert_eq!(mode(&dir.path().join("nested/deeper")), 0o700);
    drop(store);

    // An existing file is the user's business: its mode is not changed.
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    let _store = Store::open(&shared).unwrap();
    assert_eq!(mode(&shared), 0o640);
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

fn crash_recovery_suspends_only_recent_sessions_of_an_unclean_process(db: Db) {
    let clock = TestClock::at(T0);

    // Process 1: three sessions, then it dies without a clean shutdown.
    let (recent, old, ended) = {
        let mut store = db.open_with(&clock);
        let old = store.create_session(&gateway_session("old")).unwrap().id;
        clock.advance(600_000);
        let recent = store.create_session(&gateway_session("recent")).unwrap().id;
        let ended = store.create_session(&gateway_session("ended")).unwrap().id;
        store.set_status(&ended, SessionStatus::Ended).unwrap();
        clock.advance(30_000);
        store
            .append_messages(&recent, &[user("mid-run", 1)])
            .unwrap();
        (recent, old, ended)
        // dropped: no mark_clean_shutdown
    };

    // Process 2 starts 60 s later.
    clock.advance(60_000);
    let mut store = db.open_with(&clock);
    let suspended = store.suspend_recent_unclean(120_000).unwrap();
    assert_eq!(suspended, vec![recent.clone()]);
    assert_eq!(
        store.session(&recent).unwrap().unwrap().status,
        SessionStatus::Suspended
    );
    assert_eq!(
        store.session(&old).unwrap().unwrap().status,
        SessionStatus::Active
    );
    assert_eq!(
        store.session(&ended).unwrap().unwrap().status,
        SessionStatus::Ended
    );
    assert!(
        store.active_session_for_key("recent").unwrap().is_none(),
        "starts fresh"
    );
    // Suspending keeps the transcript and does not pretend it was updated.
    assert_eq!(store.load_transcript(&recent).unwrap().len(), 1);
    assert_eq!(
        store.session(&recent).unwrap().unwrap().updated_at_ms,
        T0 + 630_000
    );
    // Running it again finds nothing more.
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());

    // Process 2 works on a new session and shuts down cleanly.
    let fresh = store.create_session(&gateway_session("recent")).unwrap().id;
    store
        .append_messages(&fresh, &[user("hello again", 2)])
        .unwrap();
    store.mark_clean_shutdown().unwrap();
    drop(store);

    // A CLI opening the database in between changes nothing.
    clock.advance(1_000);
    let cli = db.open_with(&clock);
    assert_eq!(cli.list_sessions(10).unwrap().len(), 4);
    drop(cli);

    // Process 3: clean predecessor, nothing suspended.
    clock.advance(1_000);
    let mut store = db.open_with(&clock);
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());
    assert_eq!(
        store.session(&fresh).unwrap().unwrap().status,
        SessionStatus::Active
    );

    // Process 3 touches the session, then crashes: process 4 suspends it.
    store
        .append_messages(&fresh, &[assistant("answer", 3)])
        .unwrap();
    drop(store);
    clock.advance(5_000);
    let mut store = db.open_with(&clock);
    assert_eq!(store.suspend_recent_unclean(120_000).unwrap(), vec![fresh]);
}

fn kv_values_are_set_replaced_and_persist(db: Db) {
    {
        let mut store = db.open();
        assert_eq!(store.kv_get("telegram.offset").unwrap(), None);
        store.kv_set("telegram.offset", "100").unwrap();
        store.kv_set("telegram.offset", "101").unwrap();
        store
            .kv_set("it's; DROP TABLE kv; --", "\"quoted\" 'value' ✓")
            .unwrap();
        store.kv_set("empty", "").unwrap();
    }
    let store = db.open();
    assert_eq!(
        store.kv_get("telegram.offset").unwrap().as_deref(),
        Some("101")
    );
    assert_eq!(
        store.kv_get("it's; DROP TABLE kv; --").unwrap().as_deref(),
        Some("\"quoted\" 'value' ✓")
    );
    assert_eq!(store.kv_get("empty").unwrap().as_deref(), Some(""));
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

both!(
    every_message_kind_and_meta_field_round_trips_through_a_file,
    session_fields_are_stored_and_updated,
    unknown_sessions_are_a_typed_error_and_change_nothing,
    a_failing_batch_stores_nothing,
    provider_token_counts_beyond_the_database_range_do_not_fail_the_append,
    undo_drops_the_last_user_message_and_everything_after_it,
    replacing_a_transcript_is_atomic_and_reindexes_search,
    reset_ends_the_active_session_and_starts_a_new_one,
    latest_session_on_a_platform_ignores_other_platforms,
    listing_is_newest_first_and_latest_is_most_recently_updated,
    session_ids_are_unique_within_one_millisecond,
    search_treats_user_text_as_words_not_syntax,
    full_text_index_stays_consistent,
    an_appended_message_is_found_by_the_very_next_search,
    undone_messages_are_not_found_whether_or_not_they_were_indexed,
    deleting_unindexed_newest_rows_does_not_hide_later_messages,
    a_reader_sees_consistent_snapshots_while_a_writer_appends,
    two_writers_on_one_file_both_land,
    crash_recovery_suspends_only_recent_sessions_of_an_unclean_process,
    kv_values_are_set_replaced_and_persist,
    hand_edited_rows_are_a_typed_error_not_a_panic,
    text_with_nul_and_odd_characters_round_trips,
);

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

#[test]
fn postgres_a_database_from_a_newer_hermes_is_refused_untouched() {
    let db = Db::new(BackendKind::Postgres);
    drop(db.open());
    db.psql("UPDATE hermes_schema SET version = 99");
    let err = Store::open_url(db.url.as_ref().unwrap()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: LATEST_PG_SCHEMA,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade hermes"), "{err}");
    assert_eq!(db.psql("SELECT version FROM hermes_schema"), "99");
}

#[test]
fn postgres_gateways_starting_together_migrate_once() {
    let db = Db::new(BackendKind::Postgres);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let target = db.target();
            std::thread::spawn(move || {
                let mut store = Store::open_target(&target).unwrap();
                store.create_session(&NewSession::default()).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        db.psql("SELECT version FROM hermes_schema"),
        LATEST_PG_SCHEMA.to_string()
    );
    assert_eq!(db.open().list_sessions(10).unwrap().len(), 6);
}

/// A database of the first PostgreSQL schema (no cache counts, models or
/// reasoning details per message) is migrated in place and keeps its data.
#[test]
fn postgres_a_version_1_database_is_migrated_and_keeps_its_data() {
    let db = Db::new(BackendKind::Postgres);
    let mut store = db.open();
    let s = store.create_session(&NewSession::default()).unwrap();
    let old = [user("from version one", 1), assistant("still here", 2)];
    store.append_messages(&s.id, &old).unwrap();
    drop(store);
    db.psql(
        "ALTER TABLE messages DROP COLUMN cached_tokens, DROP COLUMN cache_write_tokens, \
         DROP COLUMN model, DROP COLUMN reasoning_details, DROP COLUMN attachments; \
         UPDATE hermes_schema SET version = 1",
    );
    let mut store = db.open();
    assert_eq!(
        db.psql("SELECT version FROM hermes_schema"),
        LATEST_PG_SCHEMA.to_string()
    );
    assert_eq!(store.load_transcript(&s.id).unwrap(), old);
    let mut newer = assistant("with a model", 3);
    newer.meta.model = Some("claude".into());
    newer.meta.reasoning_details = Some("[]".into());
    store.append_messages(&s.id, &[newer.clone()]).unwrap();
    assert_eq!(store.load_transcript(&s.id).unwrap()[2], newer);
    assert_eq!(store.search("version", 10).unwrap().len(), 1);
}

#[test]
fn postgres_connection_errors_are_clear_and_mask_the_password() {
    let server = hermes_tests::postgres::server();
    let url = format!(
        "postgresql://nobody:s3cret@/hermes_no_such_db?host={}",
        server.socket_dir.display()
    );
    let err = Store::open_url(&url).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    assert!(text.contains("nobody:***@"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    for bad in [
        "postgresql://h:notaport/db",
        "mysql://h/db",
        "/var/lib/state.db",
    ] {
        let err = Store::open_url(bad).unwrap_err();
        assert!(matches!(err, StoreError::BadUrl(_)), "{bad}: {err:?}");
    }
}

/// The URL boxes use to reach a database server elsewhere: user, password,
/// host and port over TCP. The test server listens on its unix socket only,
/// so a forwarder on 127.0.0.1 stands in for the network.
#[test]
fn postgres_a_tcp_url_with_user_password_host_and_port_reaches_the_server() {
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;

    let db = Db::new(BackendKind::Postgres);
    let server = hermes_tests::postgres::server();
    let socket = server.socket_dir.join(".s.PGSQL.5432");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let unix = UnixStream::connect(&socket).unwrap();
            let (mut tcp_in, mut unix_out) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut tcp_in, &mut unix_out));
            let (mut unix_in, mut tcp_out) = (unix, tcp);
            std::thread::spawn(move || std::io::copy(&mut unix_in, &mut tcp_out));
        }
    });
    let name = db.psql("SELECT current_database()");
    let url = format!(
        "postgresql://{}:s3cret-pw@127.0.0.1:{port}/{name}",
        server.user
    );
    let mut store = Store::open_url(&url).unwrap();
    let s = store.create_session(&NewSession::default()).unwrap();
    store
        .append_messages(&s.id, &[user("over tcp", 1)])
        .unwrap();
    assert_eq!(db.open().load_transcript(&s.id).unwrap().len(), 1);
    assert!(!format!("{store:?}").contains("s3cret-pw"));
}

#[test]
fn postgres_unix_socket_urls_in_both_spellings_reach_the_server() {
    let db = Db::new(BackendKind::Postgres);
    let server = hermes_tests::postgres::server();
    let name = db.psql("SELECT current_database()");
    let encoded: String = server.socket_dir.display().to_string().replace('/', "%2F");
    for url in [
        format!("postgresql://{encoded}/{name}?user={}", server.user),
        format!(
            "postgres:///{name}?host={}&user={}",
            server.socket_dir.display(),
            server.user
        ),
    ] {
        let mut store = Store::open_url(&url).unwrap();
        store.kv_set("reached", &url).unwrap();
    }
    assert_eq!(
        db.psql("SELECT count(*) FROM kv WHERE key = 'reached'"),
        "1"
    );
}
