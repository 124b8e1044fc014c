//! What only the SQLite backend has: migrations from old files (v1, v2),
//! refusing a newer schema or a non-database file, WAL and pragmas, file
//! modes.

use std::path::Path;

use hermes_core::{EntryMeta, FinishReason, LedgerEntry, Message, ToolCall, Usage};
use hermes_runtime::store::{NewSession, Store, StoreError};
use rusqlite::Connection;

use super::search::assert_index_matches_messages;
use super::support::{LATEST_SCHEMA, assistant, user};

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

/// Every append bumps the session row, and SQLite rewrites a whole row to
/// change a column: the prompt lives in a table of its own (schema V11), is
/// replaced there, and goes with its session.
#[test]
fn a_session_prompt_is_kept_apart_from_the_row_each_append_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut store = Store::open(&path).unwrap();
    let prompt = "You are hermes. ".repeat(1_000);
    let id = store
        .create_session(&NewSession {
            system_prompt: Some(&prompt),
            ..NewSession::default()
        })
        .unwrap()
        .id;
    let other = store.create_session(&NewSession::default()).unwrap().id;
    store.append_messages(&id, &[user("hi", 1)]).unwrap();
    store.set_system_prompt(&id, "shorter").unwrap();
    assert_eq!(
        store
            .session(&id)
            .unwrap()
            .unwrap()
            .system_prompt
            .as_deref(),
        Some("shorter")
    );
    assert_eq!(store.session(&other).unwrap().unwrap().system_prompt, None);
    assert!(matches!(
        store.set_system_prompt("no-such-session", "x"),
        Err(StoreError::SessionNotFound(_))
    ));

    let conn = Connection::open(&path).unwrap();
    let in_row: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info('sessions') WHERE name = 'system_prompt'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(in_row, 0, "the session row has no prompt column");
    let prompts = |conn: &Connection| -> Vec<(String, String)> {
        let mut stmt = conn
            .prepare("SELECT session_id, system_prompt FROM session_prompts")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(prompts(&conn), vec![(id.clone(), "shorter".to_owned())]);
    store.delete_session(&id).unwrap();
    assert!(prompts(&conn).is_empty(), "deleted with its session");
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

/// Issue 39: closing the store does not checkpoint (three fsyncs at the exit
/// of every one-shot run did); what was committed stays in the WAL and the
/// next open reads it from there.
#[test]
fn closing_keeps_the_wal_and_the_next_open_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut store = Store::open(&path).unwrap();
    let s = store.create_session(&NewSession::default()).unwrap();
    store.append_messages(&s.id, &[user("kept", 1)]).unwrap();
    drop(store);

    let wal = path.with_file_name("state.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert!(wal_len > 0, "the WAL was checkpointed and removed on close");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.load_transcript(&s.id).unwrap(), vec![user("kept", 1)]);
}
