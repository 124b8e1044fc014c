//! Session rows: creating, finding, listing and updating sessions, and the
//! gateway's lifecycle (reset, crash recovery, clean shutdown).

use std::fmt;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{ID_ATTEMPTS, Store, StoreError, WriteTx, from_i64, id, to_i64};

/// Lifecycle of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    /// The current conversation of its session key.
    Active,
    /// Closed by a reset (`/new`), expiry, or the user; kept for history and search.
    Ended,
    /// Was running when the process died (SPEC G11); the next message starts fresh.
    Suspended,
}

impl SessionStatus {
    /// The spelling stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Ended => "ended",
            SessionStatus::Suspended => "suspended",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(SessionStatus::Active),
            "ended" => Some(SessionStatus::Ended),
            "suspended" => Some(SessionStatus::Suspended),
            _ => None,
        }
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session as stored, with its message count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// `YYYYMMDD_HHMMSS_xxxxxx` (UTC creation time + random suffix).
    pub id: String,
    /// The gateway's session key (SPEC G2); `None` for CLI sessions.
    pub session_key: Option<String>,
    /// Platform the session came from (`telegram`, `wecom`, `cli`, …).
    pub platform: Option<String>,
    /// Platform chat id.
    pub chat_id: Option<String>,
    /// Platform user id.
    pub user_id: Option<String>,
    /// Model name in use.
    pub model: Option<String>,
    /// The system prompt assembled once for this session (SPEC L6); reused on resume.
    pub system_prompt: Option<String>,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Last change to the transcript (creation, append, undo), ms since the
    /// Unix epoch. Idle expiry (SPEC G10) and crash recovery (G11) read it.
    pub updated_at_ms: u64,
    /// Lifecycle state.
    pub status: SessionStatus,
    /// Number of stored messages.
    pub message_count: u64,
    /// Optional human title.
    pub title: Option<String>,
    /// The working directory the session was started in (the CLI's
    /// `--continue` picks the latest session of the current directory);
    /// `None` for gateway sessions and sessions stored before schema 4.
    pub workdir: Option<String>,
}

/// What a new session starts with. All fields optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NewSession<'a> {
    /// The gateway's session key (SPEC G2).
    pub session_key: Option<&'a str>,
    /// Platform name.
    pub platform: Option<&'a str>,
    /// Platform chat id.
    pub chat_id: Option<&'a str>,
    /// Platform user id.
    pub user_id: Option<&'a str>,
    /// Model name.
    pub model: Option<&'a str>,
    /// System prompt, if already assembled.
    pub system_prompt: Option<&'a str>,
    /// Working directory (CLI sessions).
    pub workdir: Option<&'a str>,
}

/// Columns of a session row, in the order [`raw_session`] reads them.
const SESSION_COLUMNS: &str = "s.id, s.session_key, s.source_platform, s.source_chat_id, \
     s.source_user_id, s.model, s.system_prompt, s.created_at_ms, s.updated_at_ms, s.status, \
     (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), s.title, s.workdir";

impl Store {
    /// Creates an active session. Its id is unique even among sessions
    /// created in the same millisecond.
    pub fn create_session(&mut self, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        let now = self.clock.now_ms();
        let tx = WriteTx::begin(&self.conn)?;
        let id = insert_session(&tx, new, now, || id::session_id(now, id::random_suffix()))?;
        let record = fetch_session(&tx, &id)?.ok_or_else(|| StoreError::SessionNotFound(id))?;
        tx.commit()?;
        Ok(record)
    }

    /// The session with this id, if any.
    pub fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        fetch_session(&self.conn, id)
    }

    /// The session whose transcript changed most recently (any status), for
    /// "continue where I left off".
    pub fn latest_session(&self) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt.query_row([], raw_session).optional()?;
        row.map(RawSession::into_record).transpose()
    }

    /// Like [`latest_session`](Self::latest_session), among the sessions of
    /// one platform (the CLI continues its own sessions, not a chat user's).
    pub fn latest_session_on(&self, platform: &str) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.source_platform = ?1 \
             ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt.query_row([platform], raw_session).optional()?;
        row.map(RawSession::into_record).transpose()
    }

    /// Like [`latest_session_on`](Self::latest_session_on), among the
    /// sessions started in `workdir` (the CLI's `--continue`).
    pub fn latest_session_in(
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

    /// The session `id_or_prefix` names: the one with exactly that id, else
    /// the only one whose id starts with it. Several candidates are
    /// [`StoreError::AmbiguousId`] (naming a few), none is `Ok(None)`.
    pub fn find_session(&self, id_or_prefix: &str) -> Result<Option<SessionRecord>, StoreError> {
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
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(StoreError::AmbiguousId {
                prefix: id_or_prefix.to_owned(),
                candidates: found.into_iter().map(|s| s.id).collect(),
            }),
        }
    }

    /// Deletes the session with its transcript (and its rows in the search
    /// index). [`StoreError::SessionNotFound`] when there is none.
    pub fn delete_session(&mut self, id: &str) -> Result<(), StoreError> {
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

    /// The active session of a gateway session key (SPEC G2), if any. Should
    /// several be active (a crash between two writes of an older version, or
    /// hand edits), the most recently updated wins.
    pub fn active_session_for_key(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.session_key = ?1 AND s.status = 'active' \
             ORDER BY s.updated_at_ms DESC, s.rowid DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt.query_row([key], raw_session).optional()?;
        row.map(RawSession::into_record).transpose()
    }

    /// Stores the session's system prompt (assembled once, SPEC L6).
    pub fn set_system_prompt(&mut self, id: &str, prompt: &str) -> Result<(), StoreError> {
        self.update_session_column(
            id,
            "UPDATE sessions SET system_prompt = ?2, clean_shutdown = 0 WHERE id = ?1",
            prompt,
        )
    }

    /// Stores the session's model name (`/model`).
    pub fn set_model(&mut self, id: &str, model: &str) -> Result<(), StoreError> {
        self.update_session_column(
            id,
            "UPDATE sessions SET model = ?2, clean_shutdown = 0 WHERE id = ?1",
            model,
        )
    }

    /// Sets the session's title (`None` clears it).
    pub fn set_title(&mut self, id: &str, title: Option<&str>) -> Result<(), StoreError> {
        self.update_session_column(
            id,
            "UPDATE sessions SET title = ?2, clean_shutdown = 0 WHERE id = ?1",
            title,
        )
    }

    /// Sets the session's status. Does not change `updated_at_ms`, which
    /// tracks the transcript only.
    pub fn set_status(&mut self, id: &str, status: SessionStatus) -> Result<(), StoreError> {
        self.update_session_column(
            id,
            "UPDATE sessions SET status = ?2, clean_shutdown = 0 WHERE id = ?1",
            status.as_str(),
        )
    }

    fn update_session_column(
        &mut self,
        id: &str,
        sql: &str,
        value: impl rusqlite::ToSql,
    ) -> Result<(), StoreError> {
        let changed = self.conn.prepare_cached(sql)?.execute(params![id, value])?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(())
    }
}

impl Store {
    /// `/new`: ends the active session(s) of `key` and creates a new active
    /// one, atomically. The new session's key is `key` whatever
    /// `new.session_key` says.
    pub fn reset(&mut self, key: &str, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
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

    /// Up to `limit` sessions, newest (by creation) first.
    pub fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
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
}

impl Store {
    /// Crash recovery (SPEC G11): marks suspended every active session whose
    /// transcript changed within the last `within_ms` and that was touched by
    /// a process which did not stop cleanly (see [`Store::mark_clean_shutdown`]).
    /// Returns their ids. Call once at start-up, before serving messages.
    pub fn suspend_recent_unclean(&mut self, within_ms: u64) -> Result<Vec<String>, StoreError> {
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

    /// Records that the process is stopping cleanly: every session touched
    /// since the last clean shutdown is marked clean.
    ///
    /// Design: each write to a session clears that session's
    /// `clean_shutdown` flag, and this sets it again. A process that crashes
    /// therefore leaves the sessions it touched flagged unclean — exactly the
    /// ones [`Store::suspend_recent_unclean`] must suspend — while another
    /// process merely opening the database (a CLI listing sessions) changes
    /// nothing.
    pub fn mark_clean_shutdown(&mut self) -> Result<(), StoreError> {
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
         model, system_prompt, created_at_ms, updated_at_ms, status, clean_shutdown, workdir) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 'active', 0, ?9)",
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
            new.system_prompt,
            now,
            new.workdir,
        ]);
        match result {
            Ok(_) => return Ok(id),
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
