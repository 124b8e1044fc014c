//! Reading hermes-agent's (the Python program's) `state.db`, read-only, for
//! `hermes import hermes-agent` (issue 45, item 1). Known: hermes-agent
//! 0.19 (schema 22). The file, its WAL and its folder are left as they are.

use std::path::Path;

use rusqlite::Connection;

use super::file::{classify, open_read_only};
use crate::{SqliteFile, StoreError};

/// The hermes-agent `state.db` schema versions this build has been tested with.
pub const KNOWN_AGENT_SCHEMAS: &[i64] = &[22];

/// The tables of hermes-agent 0.19's `state.db` (schema 22). The import
/// reads `sessions` and `messages`; the others (usage, delegation and
/// routing state, its search indexes) have no counterpart here. A table not
/// in this list is from another version: reported, and skipped.
const KNOWN_TABLES: &[&str] = &[
    "async_delegations",
    "compression_locks",
    "gateway_routing",
    "messages",
    "messages_fts",
    "messages_fts_config",
    "messages_fts_content",
    "messages_fts_data",
    "messages_fts_docsize",
    "messages_fts_idx",
    "messages_fts_trigram",
    "messages_fts_trigram_config",
    "messages_fts_trigram_content",
    "messages_fts_trigram_data",
    "messages_fts_trigram_docsize",
    "messages_fts_trigram_idx",
    "schema_version",
    "session_model_usage",
    "sessions",
    "sqlite_sequence",
    "state_meta",
];

/// The columns of `sessions` at schema 22 (those the import reads are
/// `id, source, user_id, chat_id, model, title, started_at`).
const KNOWN_SESSION_COLUMNS: &[&str] = &[
    "id",
    "source",
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
    "expiry_finalized",
    "model",
    "model_config",
    "system_prompt",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "api_call_count",
    "handoff_state",
    "handoff_platform",
    "handoff_error",
    "compression_failure_cooldown_until",
    "compression_failure_error",
    "compression_fallback_streak",
    "profile_name",
    "rewind_count",
    "archived",
];

/// The columns of `messages` at schema 22 (those the import reads are
/// `role, content, tool_call_id, tool_calls, timestamp`).
const KNOWN_MESSAGE_COLUMNS: &[&str] = &[
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "effect_disposition",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "platform_message_id",
    "observed",
    "active",
    "compacted",
    "api_content",
];

/// What a hermes-agent `state.db` holds for the import.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDb {
    /// Its schema version (`schema_version`), when it says.
    pub schema: Option<i64>,
    /// Every session with its messages.
    pub sessions: Vec<AgentSession>,
    /// Tables (`NAME`) and columns (`TABLE.COLUMN`) this import does not
    /// know: another version's, skipped.
    pub unknown: Vec<String>,
}

/// One hermes-agent session with its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSession {
    /// Its id in hermes-agent's database.
    pub id: String,
    /// Where it came from: `cli`, `telegram`, ….
    pub source: String,
    /// Platform user id (gateway sessions).
    pub user_id: Option<String>,
    /// Platform chat id (gateway sessions).
    pub chat_id: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Title.
    pub title: Option<String>,
    /// Start, milliseconds since the epoch.
    pub started_at_ms: u64,
    /// Its messages, oldest first.
    pub messages: Vec<AgentMessage>,
}

/// One hermes-agent message.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentMessage {
    /// `user`, `assistant`, `tool` (or anything else it stored).
    pub role: String,
    /// Text.
    pub content: Option<String>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// An assistant message's tool calls, OpenAI JSON.
    pub tool_calls: Option<String>,
    /// When, milliseconds since the epoch.
    pub timestamp_ms: u64,
}

fn secs_to_ms(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        (secs * 1000.0) as u64
    } else {
        0
    }
}

/// Every session of the hermes-agent `state.db` at `path`, with its
/// schema version and what it holds that this import does not know. A file
/// that is not hermes-agent's is an error.
pub fn read_agent_sessions(path: &Path) -> Result<AgentDb, StoreError> {
    let open_err = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let conn = open_read_only(path).map_err(open_err)?;
    let schema = match classify(&conn).map_err(open_err)? {
        SqliteFile::HermesAgent { schema } => schema,
        other => {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
                what: other.describe(),
            });
        }
    };
    let unknown = unknown_parts(&conn).map_err(open_err)?;
    let sessions = read_all(&conn).map_err(open_err)?;
    Ok(AgentDb {
        schema,
        sessions,
        unknown,
    })
}

/// The tables, and the columns of `sessions` and `messages`, that are not
/// schema 22's.
fn unknown_parts(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
    let tables = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut unknown: Vec<String> = tables
        .iter()
        .filter(|t| !KNOWN_TABLES.contains(&t.as_str()))
        .cloned()
        .collect();
    for (table, known) in [
        ("sessions", KNOWN_SESSION_COLUMNS),
        ("messages", KNOWN_MESSAGE_COLUMNS),
    ] {
        let mut stmt = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
        let columns = stmt
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        unknown.extend(
            columns
                .into_iter()
                .filter(|c| !known.contains(&c.as_str()))
                .map(|c| format!("{table}.{c}")),
        );
    }
    Ok(unknown)
}

fn read_all(conn: &Connection) -> rusqlite::Result<Vec<AgentSession>> {
    let mut stmt = conn.prepare(
        "SELECT id, source, user_id, chat_id, model, title, started_at FROM sessions \
         ORDER BY started_at, id",
    )?;
    let mut sessions = stmt
        .query_map([], |row| {
            Ok(AgentSession {
                id: row.get(0)?,
                source: row.get(1)?,
                user_id: row.get(2)?,
                chat_id: row.get(3)?,
                model: row.get(4)?,
                title: row.get(5)?,
                started_at_ms: secs_to_ms(row.get(6)?),
                messages: Vec::new(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut stmt = conn.prepare(
        "SELECT role, content, tool_call_id, tool_calls, timestamp FROM messages \
         WHERE session_id = ?1 ORDER BY id",
    )?;
    for session in &mut sessions {
        session.messages = stmt
            .query_map([&session.id], |row| {
                Ok(AgentMessage {
                    role: row.get(0)?,
                    content: row.get(1)?,
                    tool_call_id: row.get(2)?,
                    tool_calls: row.get(3)?,
                    timestamp_ms: secs_to_ms(row.get(4)?),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
    }
    Ok(sessions)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hermes_core::{LedgerEntry, Message};

    use crate::{ImportedSession, NewSession, Store};

    fn session(marker: &str, created_at_ms: u64) -> ImportedSession<'static> {
        ImportedSession {
            new: NewSession {
                platform: Some("telegram"),
                chat_id: Some("42"),
                ..NewSession::default()
            },
            title: Some("gears"),
            created_at_ms,
            entries: vec![LedgerEntry::at(
                Message::user("which gear?"),
                created_at_ms.saturating_add(5),
            )],
            marker: marker.to_owned(),
        }
    }

    #[test]
    fn an_import_is_one_transaction_and_never_repeats_a_session() {
        let mut store = Store::open_in_memory().unwrap();
        // The second session's time does not fit the column: the first,
        // already written in the same transaction, is rolled back with it.
        let bad = [session("m/1", 1_000), session("m/2", u64::MAX)];
        assert!(store.import_sessions(&bad).is_err());
        assert!(store.list_sessions(10).unwrap().is_empty());
        assert_eq!(store.kv_get("m/1").unwrap(), None);

        assert_eq!(store.import_sessions(&[session("m/1", 1_000)]).unwrap(), 1);
        let good = [session("m/1", 1_000), session("m/2", 2_000)];
        assert_eq!(
            store.import_sessions(&good).unwrap(),
            1,
            "m/1 is not imported twice"
        );
        let sessions = store.list_sessions(10).unwrap();
        assert_eq!(sessions.len(), 2);
        let first = sessions.iter().find(|s| s.created_at_ms == 1_000).unwrap();
        assert_eq!(first.updated_at_ms, 1_005, "the last message's time");
        assert_eq!(first.title.as_deref(), Some("gears"));
        assert_eq!(first.platform.as_deref(), Some("telegram"));
        assert_eq!(store.load_transcript(&first.id).unwrap().len(), 1);
    }
}
