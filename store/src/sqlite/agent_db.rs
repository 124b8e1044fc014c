//! Reading hermes-agent's (the Python program's) `state.db`, read-only, for
//! `hermes import hermes-agent` (issue 45, item 1). Known: hermes-agent
//! 0.19 (schema 22). The file, its WAL and its folder are left as they are.

use std::path::Path;

use rusqlite::Connection;

use super::file::{classify, open_read_only};
use crate::{SqliteFile, StoreError};

/// The hermes-agent `state.db` schema versions this build has been tested with.
pub const KNOWN_AGENT_SCHEMAS: &[i64] = &[22];

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
/// schema version. A file that is not hermes-agent's is an error.
pub fn read_agent_sessions(path: &Path) -> Result<(Option<i64>, Vec<AgentSession>), StoreError> {
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
    let sessions = read_all(&conn).map_err(open_err)?;
    Ok((schema, sessions))
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
