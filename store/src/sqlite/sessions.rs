//! Session rows on SQLite: creating, finding, listing and updating sessions,
//! and the gateway's lifecycle (reset, crash recovery, clean shutdown).

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::transcript::insert_entries;
use super::{Sqlite, WriteTx, from_i64, to_i64};
use crate::backend::Sessions;
use crate::records::{SessionChange, one_of};
use crate::{
    ID_ATTEMPTS, ImportedSession, NewSession, SessionRecord, SessionStatus, StoreError, id,
};

/// Columns of a session row, in the order [`raw_session`] reads them. The
/// prompt has a table of its own (schema V11).
const SESSION_COLUMNS: &str = "s.id, s.session_key, s.source_platform, s.source_chat_id, \
     s.source_user_id, s.model, \
     (SELECT p.system_prompt FROM session_prompts p WHERE p.session_id = s.id), \
     s.created_at_ms, s.updated_at_ms, s.status, \
     (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), s.title, s.workdir";

impl Sessions for Sqlite {
    fn create_session(&mut self, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        let now = self.clock.now_ms();
        let tx = WriteTx::begin(&self.conn)?;
        let id = insert_session(&tx, new, now, || id::session_id(now, id::random_suffix()))?;
        tx.commit()?;
        // The row is what was just inserted: reading it back cost a
        // statement's parse and a query at every CLI start (≈ 0.13 M
        // instructions, issue 39). A test compares the two.
        Ok(SessionRecord {
            id,
            session_key: new.session_key.map(str::to_owned),
            platform: new.platform.map(str::to_owned),
            chat_id: new.chat_id.map(str::to_owned),
            user_id: new.user_id.map(str::to_owned),
            model: new.model.map(str::to_owned),
            system_prompt: new.system_prompt.map(str::to_owned),
            created_at_ms: now,
            updated_at_ms: now,
            status: SessionStatus::Active,
            message_count: 0,
            title: new.title.map(str::to_owned),
            workdir: new.workdir.map(str::to_owned),
        })
    }

    fn import_sessions(&mut self, sessions: &[ImportedSession<'_>]) -> Result<usize, StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        let mut written = 0;
        for session in sessions {
            let done = tx
                .prepare_cached("SELECT 1 FROM kv WHERE key = ?1")?
                .query_row([&session.marker], |_| Ok(()))
                .optional()?
                .is_some();
            if done {
                continue;
            }
            let at = session.created_at_ms;
            let id = insert_session(&tx, &session.new, at, || {
                id::session_id(at, id::random_suffix())
            })?;
            tx.prepare_cached("UPDATE sessions SET title = ?2, status = 'ended' WHERE id = ?1")?
                .execute(params![id, session.title])?;
            insert_entries(&tx, &id, &session.entries)?;
            let last = session
                .entries
                .iter()
                .map(|e| e.meta.timestamp_ms)
                .fold(at, u64::max);
            touch(&tx, &id, to_i64("updated_at_ms", last)?)?;
            tx.prepare_cached("INSERT INTO kv (key, value) VALUES (?1, ?2)")?
                .execute(params![session.marker, id])?;
            written += 1;
        }
        tx.commit()?;
        Ok(written)
    }

    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        fetch_session(&self.conn, id)
    }

    fn latest_session(&self, platform: Option<&str>) -> Result<Option<SessionRecord>, StoreError> {
        let row = match platform {
            None => {
                let sql = format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
                );
                let mut stmt = self.conn.prepare_cached(&sql)?;
                stmt.query_row([], raw_session).optional()?
            }
            Some(platform) => {
                let sql = format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.source_platform = ?1 \
                     ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
                );
                let mut stmt = self.conn.prepare_cached(&sql)?;
                stmt.query_row([platform], raw_session).optional()?
            }
        };
        row.map(RawSession::into_record).transpose()
    }

    fn latest_session_in(
        &self,
        platform: &str,
        workdir: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.source_platform = ?1 AND s.workdir = ?2 \
             ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt
            .query_row([platform, workdir], raw_session)
            .optional()?;
        row.map(RawSession::into_record).transpose()
    }

    fn find_session(&self, id_or_prefix: &str) -> Result<Option<SessionRecord>, StoreError> {
        if let Some(exact) = fetch_session(&self.conn, id_or_prefix)? {
            return Ok(Some(exact));
        }
        if id_or_prefix.is_empty() {
            return Ok(None);
        }
        // `substr` rather than LIKE: an id prefix may hold `_`, LIKE's wildcard.
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE substr(s.id, 1, ?2) = ?1 \
             ORDER BY s.created_at_ms DESC, s.rowid DESC LIMIT 6"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let len = i64::try_from(id_or_prefix.chars().count()).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![id_or_prefix, len], raw_session)?;
        let mut found = Vec::new();
        for row in rows {
            found.push(row?.into_record()?);
        }
        one_of(id_or_prefix, found)
    }

    fn delete_session(&mut self, id: &str) -> Result<(), StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        // Messages go by `ON DELETE CASCADE`; their delete trigger keeps the
        // full-text index and its watermark right (schema V3).
        let deleted = tx
            .prepare_cached("DELETE FROM sessions WHERE id = ?1")?
            .execute([id])?;
        if deleted == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        tx.commit()?;
        Ok(())
    }

    fn active_session_for_key(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.session_key = ?1 AND s.status = 'active' \
             ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt.query_row([key], raw_session).optional()?;
        row.map(RawSession::into_record).transpose()
    }

    fn update_session(&mut self, id: &str, change: SessionChange<'_>) -> Result<(), StoreError> {
        let mut stmt;
        let changed = match change {
            SessionChange::SystemPrompt(prompt) => {
                let tx = WriteTx::begin(&self.conn)?;
                if !mark_unclean(&tx, id)? {
                    return Err(StoreError::SessionNotFound(id.to_owned()));
                }
                set_prompt(&tx, id, prompt)?;
                tx.commit()?;
                return Ok(());
            }
            SessionChange::Model(model) => {
                stmt = self.conn.prepare_cached(
                    "UPDATE sessions SET model = ?2, clean_shutdown = 0 WHERE id = ?1",
                )?;
                stmt.execute(params![id, model])?
            }
            SessionChange::Title(title) => {
                stmt = self.conn.prepare_cached(
                    "UPDATE sessions SET title = ?2, clean_shutdown = 0 WHERE id = ?1",
                )?;
                stmt.execute(params![id, title])?
            }
            SessionChange::Status(status) => {
                stmt = self.conn.prepare_cached(
                    "UPDATE sessions SET status = ?2, clean_shutdown = 0 WHERE id = ?1",
                )?;
                stmt.execute(params![id, status.as_str()])?
            }
        };
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(())
    }

    fn reset(&mut self, key: &str, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        let now = self.clock.now_ms();
        let tx = WriteTx::begin(&self.conn)?;
        tx.prepare_cached(
            "UPDATE sessions SET status = 'ended', clean_shutdown = 0 \
             WHERE session_key = ?1 AND status = 'active'",
        )?
        .execute([key])?;
        let new = NewSession {
            session_key: Some(key),
            ..*new
        };
        let id = insert_session(&tx, &new, now, || id::session_id(now, id::random_suffix()))?;
        let record = fetch_session(&tx, &id)?.ok_or_else(|| StoreError::SessionNotFound(id))?;
        tx.commit()?;
        Ok(record)
    }

    fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.created_at_ms DESC, s.rowid DESC LIMIT ?1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map([limit], raw_session)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row?.into_record()?);
        }
        Ok(out)
    }

    fn suspend_recent_unclean(&mut self, within_ms: u64) -> Result<Vec<String>, StoreError> {
        let since = self.clock.now_ms().saturating_sub(within_ms);
        let since = to_i64("suspend window start", since)?;
        let tx = WriteTx::begin(&self.conn)?;
        let mut ids = Vec::new();
        {
            let mut stmt = tx.prepare_cached(
                "UPDATE sessions SET status = 'suspended' \
                 WHERE status = 'active' AND clean_shutdown = 0 AND updated_at_ms >= ?1 \
                 RETURNING id",
            )?;
            let rows = stmt.query_map([since], |row| row.get::<_, String>(0))?;
            for row in rows {
                ids.push(row?);
            }
        }
        tx.commit()?;
        ids.sort();
        Ok(ids)
    }

    fn mark_clean_shutdown(&mut self) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE sessions SET clean_shutdown = 1 WHERE clean_shutdown = 0")?
            .execute([])?;
        Ok(())
    }
}

/// Inserts a session under a fresh id from `next_id`, retrying when the id is
/// taken. Returns the id.
pub(super) fn insert_session(
    conn: &Connection,
    new: &NewSession<'_>,
    now: u64,
    mut next_id: impl FnMut() -> String,
) -> Result<String, StoreError> {
    let now = to_i64("created_at_ms", now)?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO sessions (id, session_key, source_platform, source_chat_id, source_user_id, \
         model, created_at_ms, updated_at_ms, status, clean_shutdown, workdir, title) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, 'active', 0, ?8, ?9)",
    )?;
    for _ in 0..ID_ATTEMPTS {
        let id = next_id();
        let result = stmt.execute(params![
            id,
            new.session_key,
            new.platform,
            new.chat_id,
            new.user_id,
            new.model,
            now,
            new.workdir,
            new.title,
        ]);
        match result {
            Ok(_) => {
                if let Some(prompt) = new.system_prompt {
                    // A new session has no prompt yet: a plain insert,
                    // cheaper to prepare at every start than the upsert.
                    conn.prepare_cached(
                        "INSERT INTO session_prompts (session_id, system_prompt) VALUES (?1, ?2)",
                    )?
                    .execute(params![id, prompt])?;
                }
                return Ok(id);
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
            {
                tracing::debug!(%id, "session id taken, retrying");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::IdsExhausted)
}

pub(super) fn session_exists(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Stores `prompt` as session `id`'s system prompt, replacing any.
fn set_prompt(conn: &Connection, id: &str, prompt: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO session_prompts (session_id, system_prompt) VALUES (?1, ?2) \
         ON CONFLICT (session_id) DO UPDATE SET system_prompt = excluded.system_prompt",
    )?
    .execute(params![id, prompt])?;
    Ok(())
}

/// Marks session `id` touched by a process that has not stopped cleanly;
/// false if there is no such session.
fn mark_unclean(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached("UPDATE sessions SET clean_shutdown = 0 WHERE id = ?1")?
        .execute([id])?;
    Ok(changed > 0)
}

/// Records a transcript change: bumps `updated_at_ms` (never backwards, so a
/// clock step back cannot reorder sessions) and marks the session unclean.
/// `false` when there is no such session.
pub(super) fn touch(conn: &Connection, id: &str, now: i64) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE sessions SET updated_at_ms = MAX(updated_at_ms, ?2), clean_shutdown = 0 \
             WHERE id = ?1",
        )?
        .execute(params![id, now])?;
    Ok(changed > 0)
}

fn fetch_session(conn: &Connection, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?1");
    let row = conn
        .prepare_cached(&sql)?
        .query_row([id], raw_session)
        .optional()?;
    row.map(RawSession::into_record).transpose()
}

/// A session row before validation (rusqlite row closures cannot return our error).
struct RawSession {
    id: String,
    session_key: Option<String>,
    platform: Option<String>,
    chat_id: Option<String>,
    user_id: Option<String>,
    model: Option<String>,
    system_prompt: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
    status: String,
    message_count: i64,
    title: Option<String>,
    workdir: Option<String>,
}

fn raw_session(row: &Row<'_>) -> rusqlite::Result<RawSession> {
    Ok(RawSession {
        id: row.get(0)?,
        session_key: row.get(1)?,
        platform: row.get(2)?,
        chat_id: row.get(3)?,
        user_id: row.get(4)?,
        model: row.get(5)?,
        system_prompt: row.get(6)?,
        created_at_ms: row.get(7)?,
        updated_at_ms: row.get(8)?,
        status: row.get(9)?,
        message_count: row.get(10)?,
        title: row.get(11)?,
        workdir: row.get(12)?,
    })
}

impl RawSession {
    fn into_record(self) -> Result<SessionRecord, StoreError> {
        let Some(status) = SessionStatus::parse(&self.status) else {
            return Err(StoreError::Corrupt {
                session_id: self.id,
                what: format!("unknown status {:?}", self.status),
            });
        };
        Ok(SessionRecord {
            created_at_ms: from_i64(&self.id, "created_at_ms", self.created_at_ms)?,
            updated_at_ms: from_i64(&self.id, "updated_at_ms", self.updated_at_ms)?,
            message_count: from_i64(&self.id, "message_count", self.message_count)?,
            id: self.id,
            session_key: self.session_key,
            platform: self.platform,
            chat_id: self.chat_id,
            user_id: self.user_id,
            model: self.model,
            system_prompt: self.system_prompt,
            status,
            title: self.title,
            workdir: self.workdir,
        })
    }
}
