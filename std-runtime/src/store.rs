//! SQLite persistence of sessions, transcripts and small adapter state.
//!
//! The gateway and the CLI load a session's transcript before every run and
//! append what the run added afterwards (SPEC G5), so the store — not the
//! agent — is where a conversation lives.
//!
//! Guarantees:
//! - **Acknowledged means stored** (SPEC E3). Every write is one transaction;
//!   a method returns `Ok` only after that transaction committed. A process
//!   killed at any point (SIGKILL, panic, OOM kill) leaves a database that
//!   opens cleanly and holds every write that returned `Ok`, and no part of
//!   one that did not (see `tests/store_durability.rs`, 20 kill rounds).
//! - **Durability level: WAL with `synchronous = NORMAL` by default.** A
//!   commit appends its pages to the WAL with `write()` and returns; the WAL
//!   is fsynced before each checkpoint, not at each commit. A committed
//!   transaction is therefore in the OS page cache the moment `Ok` is
//!   returned, which is exactly what a process death cannot take away. A
//!   power cut or kernel crash keeps the database *consistent* (WAL frames
//!   are checksummed; a torn tail is discarded on recovery) but may lose the
//!   last commits since the previous checkpoint. Deployments that must keep
//!   acknowledged writes through a power cut call
//!   [`Store::set_synchronous`]`(`[`Synchronous::Full`]`)`, which fsyncs
//!   the WAL at every commit (an fsync per write: appends measured about
//!   3× slower on the development VM; see `BENCHMARKS.md`).
//! - **Cheap appends, exact search.** The full-text index is brought up to
//!   date by [`Store::search`] (and [`Store::catch_up_search_index`]), not
//!   by every append: appends stay small write transactions, and a search
//!   first indexes whatever was appended since the previous one, so results
//!   are exactly what is stored. Deletes (undo, replace) remove their rows
//!   from the index in the same transaction. See `store/schema.rs`, V3.
//! - **Exact round trip.** [`Store::load_transcript`] returns the very
//!   [`LedgerEntry`] values given to [`Store::append_messages`]: message kind,
//!   `None` versus empty assistant text, tool calls, and every [`EntryMeta`]
//!   field.
//! - **No SQL built from data.** Every value travels as a bound parameter;
//!   full-text queries are quoted term by term so user text cannot inject FTS5
//!   syntax.
//! - **Private file.** A database file the store creates is mode `0600`
//!   (transcripts hold whatever users tell the bot); SQLite gives the `-wal`
//!   and `-shm` files the same mode. An existing file's mode is left alone.
//! - **Schema versioning.** `PRAGMA user_version` with ordered forward
//!   migrations; a database from a newer hermes is refused with
//!   [`StoreError::NewerSchema`] instead of being misread.
//!
//! A [`Store`] owns one connection. It is `Send`; callers that share it put it
//! behind a `Mutex`. Several stores (processes or threads) may open the same
//! file: WAL lets readers proceed while one writer commits, and writers wait
//! up to [`BUSY_TIMEOUT`] for each other.

mod id;
mod schema;
mod tool_calls;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hermes_core::{Clock, EntryMeta, FinishReason, LedgerEntry, Message, Role, Usage};
use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

/// How long a write waits for another connection's write to finish before
/// failing with "database is locked".
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes the `-wal` file is truncated to after a checkpoint, if larger.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// How many random session-id suffixes are tried before giving up.
const ID_ATTEMPTS: usize = 16;

/// The wall clock, for callers (and the store itself) that want real time.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 is a broken machine; 0 keeps ordering sane
        // rather than failing every write.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

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
}

/// One full-text search result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    /// Session holding the message.
    pub session_id: String,
    /// Position of the message in its session's transcript.
    pub seq: u64,
    /// Role of the message.
    pub role: Role,
    /// Excerpt around the match, matched terms in `[` `]`.
    pub snippet: String,
}

/// The `synchronous` setting of the database connection (WAL mode).
///
/// Both settings make an acknowledged write survive the death of the process
/// and keep the file consistent through a power cut; they differ only in
/// whether the last commits survive a power cut or kernel crash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL at every commit: acknowledged writes also survive power
    /// loss. Costs an fsync per write transaction.
    Full,
    /// fsync only at checkpoints (the default): acknowledged writes survive
    /// any process death (SPEC E3); a power cut may lose the commits since
    /// the last checkpoint but never corrupts the database.
    #[default]
    Normal,
}

impl Synchronous {
    /// The PRAGMA value.
    const fn as_pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Errors of the store. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database file or its directory could not be created. Fix the path
    /// or permissions; not retryable as is.
    #[error("cannot create database file {path}: {source}: check the path and its permissions")]
    Create {
        /// The database path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// SQLite could not open or configure the file (not a database, read-only
    /// file system, …). Not retryable as is.
    #[error(
        "cannot open database {path}: {source}: check that it is a hermes database and is writable"
    )]
    Open {
        /// The database path.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer hermes. Upgrade hermes; this build
    /// must not touch it.
    #[error(
        "database {path} is from a newer hermes (schema {found} > {supported}): upgrade hermes"
    )]
    NewerSchema {
        /// The database path (`:memory:` for in-memory stores).
        path: PathBuf,
        /// The database's `user_version`.
        found: u32,
        /// The newest schema this build knows.
        supported: u32,
    },
    /// A migration step failed; the database is left at the previous version
    /// (each step is one transaction). Report it as a bug with the message.
    #[error("cannot migrate database {path} to schema {version}: {source}")]
    Migration {
        /// The database path.
        path: PathBuf,
        /// The version that failed.
        version: u32,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// No session has this id. The caller should create one (or fix the id).
    #[error("no session with id {0:?}")]
    SessionNotFound(String),
    /// A stored row cannot be turned back into a message or session: the
    /// database was edited outside hermes. Not retryable.
    #[error(
        "stored data of session {session_id:?} is unreadable ({what}); was the database edited by hand?"
    )]
    Corrupt {
        /// The session whose data is bad.
        session_id: String,
        /// What is wrong, and where.
        what: String,
    },
    /// A number does not fit SQLite's signed 64-bit integers.
    #[error("{what} = {value} is too large to store (max {max})", max = i64::MAX)]
    OutOfRange {
        /// Which field.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// Every attempted session id was taken; something generates ids far too
    /// fast or the random source is broken. Retrying later may work.
    #[error("could not find a free session id after {ID_ATTEMPTS} attempts")]
    IdsExhausted,
    /// Any other SQLite failure (disk full, I/O error, database locked for
    /// longer than the busy timeout). Often transient; the write did not happen.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// The session store. See the module docs for its guarantees.
pub struct Store {
    conn: Connection,
    clock: Arc<dyn Clock>,
    /// For error messages; `:memory:` for in-memory stores.
    path: PathBuf,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// One message of a session, numbered after its last one; see
/// [`insert_entries`].
const INSERT_SQL: &str = "INSERT INTO messages (session_id, seq, role, content, tool_calls, \
     tool_call_id, reasoning, prompt_tokens, completion_tokens, total_tokens, finish_reason, \
     interrupted, timestamp_ms) \
     VALUES (?1, (SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?1), \
     ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// A session's messages in order; see [`Store::load_transcript`]. The column
/// order is what [`decode_message`] reads.
const LOAD_SQL: &str = "SELECT m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, \
     m.reasoning, m.prompt_tokens, m.completion_tokens, m.total_tokens, m.finish_reason, \
     m.interrupted, m.timestamp_ms \
     FROM sessions s LEFT JOIN messages m ON m.session_id = s.id \
     WHERE s.id = ?1 ORDER BY m.seq";

/// Columns of a session row, in the order [`session_from_row`] reads them.
const SESSION_COLUMNS: &str = "s.id, s.session_key, s.source_platform, s.source_chat_id, \
     s.source_user_id, s.model, s.system_prompt, s.created_at_ms, s.updated_at_ms, s.status, \
     (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), s.title";

impl Store {
    /// Opens (creating if needed) the database at `path`: creates missing
    /// parent directories, creates a new file with mode `0600`, switches to
    /// WAL with `synchronous = NORMAL` (see the module docs), and migrates
    /// an older schema.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        create_private_file(path)?;
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Store::init(conn, path.to_path_buf(), true)
    }

    /// An in-memory database (no WAL, nothing survives the store). For tests
    /// and benchmarks that do not need a file.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Store::init(conn, path, false)
    }

    fn init(mut conn: Connection, path: PathBuf, wal: bool) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // Query-planner stability: plans never depend on bound values. The
        // bundled SQLite (STAT4) otherwise marks parameters of some hot
        // statements (the append INSERT, the transcript load) as
        // "re-prepare when rebound", and rusqlite clears the bindings of
        // every statement it returns to its cache, so each use re-parsed
        // and re-planned the statement — more work than the rest of an
        // append. We never run ANALYZE, so nothing is lost.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(open_err)?;
        // Refuse a newer schema before changing anything about the file.
        let found = user_version(&conn).map_err(open_err)?;
        if found > schema::LATEST_VERSION {
            return Err(StoreError::NewerSchema {
                path,
                found,
                supported: schema::LATEST_VERSION,
            });
        }
        if wal {
            let mode: String = conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
                .map_err(open_err)?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(path = %path.display(), %mode, "SQLite refused WAL mode");
            }
            // The WAL is reused from the start after each checkpoint, not
            // shrunk; this caps what a one-off big transaction (a long
            // transcript replaced) leaves on disk. No cost on the hot path.
            conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
                .map_err(open_err)?;
        }
        conn.pragma_update(None, "synchronous", Synchronous::default().as_pragma())
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(open_err)?;
        migrate(&mut conn, &path)?;
        Ok(Store {
            conn,
            clock: Arc::new(SystemClock),
            path,
        })
    }

    /// Replaces the clock that stamps `created_at_ms` / `updated_at_ms` and
    /// names new sessions (default: [`SystemClock`]).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Changes the `synchronous` setting of this connection (default
    /// [`Synchronous::Normal`]; [`Synchronous::Full`] for power-loss
    /// durability). Applies to this connection only, not to other stores
    /// open on the same file.
    pub fn set_synchronous(&mut self, mode: Synchronous) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "synchronous", mode.as_pragma())?;
        Ok(())
    }

    /// The path this store was opened with (`:memory:` for in-memory stores).
    pub fn path(&self) -> &Path {
        &self.path
    }

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

    /// The session's transcript in order, exactly as appended.
    pub fn load_transcript(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        // One statement, so the existence check and the rows come from the
        // same snapshot even while another connection writes, without the
        // cost of an explicit BEGIN/COMMIT: the session row LEFT JOINed to
        // its messages gives no row for an unknown session and one row of
        // NULLs for an empty transcript. The (session_id, seq) index yields
        // the messages already in order (no sort).
        let mut stmt = self.conn.prepare_cached(LOAD_SQL)?;
        let mut rows = stmt.query([id])?;
        let mut out = Vec::new();
        let mut session_found = false;
        while let Some(row) = rows.next()? {
            session_found = true;
            // `role` is NOT NULL in the table, so NULL here is the LEFT
            // JOIN's one row for a session without messages.
            let role = row.get_ref(1)?;
            if role == ValueRef::Null {
                continue;
            }
            out.push(decode_message(row, role, id)?);
        }
        if !session_found {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(out)
    }

    /// Appends `entries` to the session's transcript in ONE transaction and
    /// bumps `updated_at_ms`. When this returns `Ok`, every entry is durable;
    /// on `Err`, none was stored.
    pub fn append_messages(&mut self, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        if entries.is_empty() {
            return if session_exists(&self.conn, id)? {
                Ok(())
            } else {
                Err(StoreError::SessionNotFound(id.to_owned()))
            };
        }
        let tx = WriteTx::begin(&self.conn)?;
        // The hot path of every run: the bump proves the session exists
        // (no separate existence check), and each INSERT computes its own
        // sequence number (no separate MAX(seq) query). Deliberately not
        // `UPDATE … RETURNING`: SQLite re-prepares such a statement on every
        // execution, which cost more than the rest of the append.
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        insert_entries(&tx, id, entries)?;
        tx.commit()?;
        Ok(())
    }

    /// `/undo`: deletes the last user message and everything after it;
    /// returns how many messages were deleted (0 when there is no user
    /// message).
    pub fn undo_last_turn(&mut self, id: &str) -> Result<usize, StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let tx = WriteTx::begin(&self.conn)?;
        // Bumped first to learn whether the session exists; dropping `tx`
        // when there is nothing to undo rolls the bump back.
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        let last_user: Option<i64> = tx
            .prepare_cached(
                "SELECT MAX(seq) FROM messages WHERE session_id = ?1 AND role = 'user'",
            )?
            .query_row([id], |row| row.get(0))?;
        let Some(from) = last_user else {
            return Ok(0);
        };
        let deleted = tx
            .prepare_cached("DELETE FROM messages WHERE session_id = ?1 AND seq >= ?2")?
            .execute(params![id, from])?;
        tx.commit()?;
        Ok(deleted)
    }

    /// `/compress` and similar rewrites: replaces the whole transcript with
    /// `entries` in one transaction (sequence numbers restart at 0) and
    /// bumps `updated_at_ms`. On `Err` the old transcript is untouched.
    pub fn replace_transcript(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
    ) -> Result<(), StoreError> {
        let now = to_i64("updated_at_ms", self.clock.now_ms())?;
        let tx = WriteTx::begin(&self.conn)?;
        if !touch(&tx, id, now)? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        tx.prepare_cached("DELETE FROM messages WHERE session_id = ?1")?
            .execute([id])?;
        insert_entries(&tx, id, entries)?;
        tx.commit()?;
        Ok(())
    }

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

    /// Full-text search over message content, best match first.
    ///
    /// `query` is user text, not FTS5 syntax: each whitespace-separated word
    /// is searched as a quoted phrase and all must match, so quotes, `AND`,
    /// `*`, `NEAR(` or column filters are just words. Words without any
    /// letter or digit are dropped; a query with none left finds nothing.
    ///
    /// Results are exact: the search first indexes every message appended
    /// since the last search (see [`Store::catch_up_search_index`]), which
    /// is a short write transaction and may wait for another writer.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(fts_query) = fts_query(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.catch_up_search_index()?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT m.session_id, m.seq, m.role, \
             snippet(messages_fts, 0, '[', ']', '…', 16) \
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
             WHERE messages_fts MATCH ?1 ORDER BY rank, m.id LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![fts_query, limit], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (session_id, seq, role, snippet) = row?;
            let Some(role) = Role::parse(&role) else {
                return Err(StoreError::Corrupt {
                    session_id,
                    what: format!("message {seq} has unknown role {role:?}"),
                });
            };
            let seq = from_i64(&session_id, "seq", seq)?;
            out.push(SearchHit {
                session_id,
                seq,
                role,
                snippet: snippet.unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Adds every message not yet in the full-text index to it; returns how
    /// many were added. [`Store::search`] does this itself; a long-running
    /// process may also call it when idle so that the first search after a
    /// busy period does not pay for indexing all of it (≈ 10–15 µs per message).
    ///
    /// One `INSERT … SELECT` of the messages above the indexed watermark and
    /// the watermark bump, in one `IMMEDIATE` transaction (so two processes
    /// never index a row twice). Checked first without a write lock, so the
    /// common up-to-date case costs one indexed read.
    pub fn catch_up_search_index(&self) -> Result<u64, StoreError> {
        let (indexed, newest) = fts_watermark(&self.conn)?;
        if newest <= indexed {
            return Ok(0);
        }
        let tx = WriteTx::begin(&self.conn)?;
        // Re-read under the write lock: another connection may have indexed
        // (or deleted) in between.
        let (indexed, newest) = fts_watermark(&tx)?;
        if newest <= indexed {
            return Ok(0);
        }
        let added = tx
            .prepare_cached(
                "INSERT INTO messages_fts (rowid, content) \
                 SELECT id, content FROM messages WHERE id > ?1 AND id <= ?2 ORDER BY id",
            )?
            .execute(params![indexed, newest])?;
        tx.prepare_cached("UPDATE messages_fts_state SET indexed_upto = ?1 WHERE id = 0")?
            .execute([newest])?;
        tx.commit()?;
        Ok(u64::try_from(added).unwrap_or(u64::MAX))
    }

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

    /// Reads a small adapter-state value (e.g. the Telegram update offset).
    pub fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM kv WHERE key = ?1")?
            .query_row([key], |row| row.get(0))
            .optional()?)
    }

    /// Writes (inserts or replaces) a small adapter-state value, durably.
    pub fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute([key, value])?;
        Ok(())
    }

    /// The values whose keys start with `prefix`, in key order.
    pub fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT key, value FROM kv WHERE substr(key, 1, ?2) = ?1 ORDER BY key",
        )?;
        let rows = stmt.query_map(
            rusqlite::params![
                prefix,
                i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX)
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Deletes these keys (absent ones are ignored), in one transaction.
    pub fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        {
            let mut stmt = self.conn.prepare_cached("DELETE FROM kv WHERE key = ?1")?;
            for key in keys {
                stmt.execute([key])?;
            }
        }
        Ok(tx.commit()?)
    }
}

/// A write transaction (`BEGIN IMMEDIATE`), rolled back on drop unless
/// committed — like `rusqlite::Transaction`, but its `BEGIN`, `COMMIT` and
/// `ROLLBACK` are cached statements: rusqlite parses and prepares them anew
/// on every transaction, which was a tenth of the cost of an append.
///
/// IMMEDIATE takes the write lock at the start (waiting up to
/// [`BUSY_TIMEOUT`]), so a transaction never fails half-way because another
/// connection wrote first.
struct WriteTx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> WriteTx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(WriteTx { conn, open: true })
    }

    /// Commits; on `Err` nothing was committed (the drop rolls back
    /// whatever SQLite did not already roll back).
    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // SQLite itself ends the transaction after some errors (I/O, full
        // disk); rolling back then would only fail.
        if self.open && !self.conn.is_autocommit() {
            let rolled_back = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut stmt| stmt.execute([]));
            if let Err(e) = rolled_back {
                tracing::warn!(error = %e, "rollback failed");
            }
        }
    }
}

/// Creates `path` with mode `0600` (and its missing parent directories with
/// `0700`) unless it already exists, so SQLite never creates it with the
/// process umask.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let create_err = |source| StoreError::Create {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(parent).map_err(create_err)?;
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(create_err(e)),
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Runs the migration steps the database has not seen yet.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    // The common case, an up-to-date database, takes no write lock, so
    // opening a store never waits for (or delays) another process's writes.
    let current = user_version(conn).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    if current == schema::LATEST_VERSION {
        return Ok(());
    }
    for step in schema::MIGRATIONS {
        let mig_err = |source| StoreError::Migration {
            path: path.to_path_buf(),
            version: step.version,
            source,
        };
        // IMMEDIATE takes the write lock first, so two processes opening an
        // old database at once run each step exactly once.
        let tx = Transaction::new(conn, TransactionBehavior::Immediate).map_err(mig_err)?;
        let current = user_version(&tx).map_err(mig_err)?;
        if current > schema::LATEST_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.to_path_buf(),
                found: current,
                supported: schema::LATEST_VERSION,
            });
        }
        if current >= step.version {
            continue;
        }
        tracing::info!(path = %path.display(), version = step.version, what = step.what, "migrating database");
        tx.execute_batch(step.sql).map_err(mig_err)?;
        tx.pragma_update(None, "user_version", step.version)
            .map_err(mig_err)?;
        tx.commit().map_err(mig_err)?;
    }
    Ok(())
}

/// Inserts a session under a fresh id from `next_id`, retrying when the id is
/// taken. Returns the id.
fn insert_session(
    conn: &Connection,
    new: &NewSession<'_>,
    now: u64,
    mut next_id: impl FnMut() -> String,
) -> Result<String, StoreError> {
    let now = to_i64("created_at_ms", now)?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO sessions (id, session_key, source_platform, source_chat_id, source_user_id, \
         model, system_prompt, created_at_ms, updated_at_ms, status, clean_shutdown) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 'active', 0)",
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

/// Appends `entries` to the messages of session `id`, numbering them after
/// its last message (from 0 for an empty transcript). Each row's `seq` is a
/// subquery on the `(session_id, seq)` index, which is cheaper than a
/// separate statement and sees the rows inserted before it.
fn insert_entries(conn: &Connection, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError> {
    let mut insert = conn.prepare_cached(INSERT_SQL)?;
    for entry in entries {
        let tool_calls = match entry.message.tool_calls() {
            [] => None,
            calls => Some(
                serde_json::to_string(calls).map_err(|e| StoreError::Corrupt {
                    session_id: id.to_owned(),
                    what: format!("tool calls do not serialize: {e}"),
                })?,
            ),
        };
        let tool_call_id = match &entry.message {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        };
        let meta = &entry.meta;
        let usage = meta.usage.as_ref();
        insert.execute(params![
            id,
            entry.message.role().as_str(),
            entry.message.content(),
            tool_calls,
            tool_call_id,
            meta.reasoning,
            usage
                .map(|u| to_i64("prompt_tokens", u.prompt_tokens))
                .transpose()?,
            usage
                .map(|u| to_i64("completion_tokens", u.completion_tokens))
                .transpose()?,
            usage
                .map(|u| to_i64("total_tokens", u.total_tokens))
                .transpose()?,
            meta.finish_reason.as_ref().map(FinishReason::as_str),
            meta.interrupted,
            to_i64("timestamp_ms", meta.timestamp_ms)?,
        ])?;
    }
    Ok(())
}

/// `(indexed_upto, MAX(messages.id))`: the full-text watermark and the
/// newest message id (0 for none). See `store/schema.rs`, V3.
fn fts_watermark(conn: &Connection) -> Result<(i64, i64), StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT indexed_upto, (SELECT COALESCE(MAX(id), 0) FROM messages) \
             FROM messages_fts_state WHERE id = 0",
        )?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    row.ok_or_else(|| StoreError::Sqlite(rusqlite::Error::QueryReturnedNoRows))
}

fn session_exists(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?
        .query_row([id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Records a transcript change: bumps `updated_at_ms` (never backwards, so a
/// clock step back cannot reorder sessions) and marks the session unclean.
/// `false` when there is no such session.
fn touch(conn: &Connection, id: &str, now: i64) -> Result<bool, StoreError> {
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
        })
    }
}

/// Decodes one row of [`LOAD_SQL`] into an entry.
///
/// Load is on the path of every run (SPEC G5), so this borrows each column
/// from SQLite (`get_ref`) and allocates once per string that ends up in the
/// entry: role and finish reason are matched in place, `seq` is read only
/// for an error message, and tool-call JSON is parsed straight from SQLite's
/// buffer (`store/tool_calls.rs`), only when present. Anything that
/// does not fit the schema — a wrong type, invalid UTF-8, a negative count —
/// is a typed [`StoreError::Corrupt`], never a panic.
fn decode_message(
    row: &Row<'_>,
    role: ValueRef<'_>,
    session_id: &str,
) -> Result<LedgerEntry, StoreError> {
    // `seq` is only for error messages, so it is read only for them.
    let corrupt = |what: String| {
        let seq = row.get_ref(0).ok().and_then(|v| v.as_i64().ok());
        StoreError::Corrupt {
            session_id: session_id.to_owned(),
            what: match seq {
                Some(seq) => format!("message {seq}: {what}"),
                None => format!("message with unreadable seq: {what}"),
            },
        }
    };
    let text = |idx: usize, name: &str| -> Result<Option<&str>, StoreError> {
        row.get_ref(idx)?
            .as_str_or_null()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let int = |idx: usize, name: &str| -> Result<Option<i64>, StoreError> {
        row.get_ref(idx)?
            .as_i64_or_null()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let count = |idx: usize, name: &str| -> Result<Option<u64>, StoreError> {
        int(idx, name)?
            .map(|v| u64::try_from(v).map_err(|_| corrupt(format!("{name} is negative ({v})"))))
            .transpose()
    };

    let role = role.as_str().map_err(|e| corrupt(format!("role: {e}")))?;
    let content = text(2, "content")?;
    let message = match Role::parse(role) {
        Some(Role::User) => Message::User {
            content: content
                .ok_or_else(|| corrupt("user message without content".into()))?
                .to_owned(),
        },
        Some(Role::Assistant) => Message::Assistant {
            content: content.map(str::to_owned),
            tool_calls: match text(3, "tool_calls")? {
                None => Vec::new(),
                Some(json) => tool_calls::decode(json)
                    .map_err(|e| corrupt(format!("tool calls are not valid JSON: {e}")))?,
            },
        },
        Some(Role::Tool) => Message::Tool {
            tool_call_id: text(4, "tool_call_id")?
                .ok_or_else(|| corrupt("tool result without tool_call_id".into()))?
                .to_owned(),
            content: content
                .ok_or_else(|| corrupt("tool result without content".into()))?
                .to_owned(),
        },
        None => return Err(corrupt(format!("unknown role {role:?}"))),
    };
    let usage = match (
        count(6, "prompt_tokens")?,
        count(7, "completion_tokens")?,
        count(8, "total_tokens")?,
    ) {
        (None, None, None) => None,
        (p, c, t) => Some(Usage {
            prompt_tokens: p.unwrap_or(0),
            completion_tokens: c.unwrap_or(0),
            total_tokens: t.unwrap_or(0),
        }),
    };
    Ok(LedgerEntry {
        message,
        meta: EntryMeta {
            reasoning: text(5, "reasoning")?.map(str::to_owned),
            usage,
            timestamp_ms: count(11, "timestamp_ms")?
                .ok_or_else(|| corrupt("timestamp_ms is NULL".into()))?,
            finish_reason: text(9, "finish_reason")?.map(decode_finish_reason),
            interrupted: int(10, "interrupted")?.is_some_and(|v| v != 0),
        },
    })
}

/// Inverse of [`FinishReason::as_str`]. Unlike [`FinishReason::parse`] it does
/// not fold the legacy `function_call` into `ToolCalls`, so a stored
/// `Other("function_call")` comes back unchanged.
fn decode_finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" => FinishReason::Stop,
        "tool_calls" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other(s.to_owned()),
    }
}

/// Turns user text into an FTS5 query that cannot be a syntax error: every
/// word becomes a double-quoted string (inner quotes doubled), joined by
/// spaces (implicit AND). `None` when no word has a letter or digit.
fn fts_query(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

fn to_i64(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

fn from_i64(session_id: &str, what: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt {
        session_id: session_id.to_owned(),
        what: format!("{what} is negative ({value})"),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn session_id_collision_is_retried() {
        let store = Store::open_in_memory().unwrap();
        let new = NewSession::default();
        let first = insert_session(&store.conn, &new, 5, || "same".to_owned()).unwrap();
        assert_eq!(first, "same");
        let mut ids = ["same", "same", "other"].into_iter();
        let second =
            insert_session(&store.conn, &new, 5, || ids.next().unwrap().to_owned()).unwrap();
        assert_eq!(second, "other");
        assert_eq!(ids.next(), None, "each candidate tried once");
    }

    #[test]
    fn session_ids_give_up_after_bounded_attempts() {
        let store = Store::open_in_memory().unwrap();
        let new = NewSession::default();
        insert_session(&store.conn, &new, 5, || "taken".to_owned()).unwrap();
        let mut tries = 0;
        let err = insert_session(&store.conn, &new, 5, || {
            tries += 1;
            "taken".to_owned()
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::IdsExhausted), "{err}");
        assert_eq!(tries, ID_ATTEMPTS);
    }

    #[test]
    fn fts_query_quotes_every_word() {
        assert_eq!(fts_query("  "), None);
        assert_eq!(fts_query("* ( ) \" -"), None);
        assert_eq!(
            fts_query("a AND b*").as_deref(),
            Some("\"a\" \"AND\" \"b*\"")
        );
        assert_eq!(
            fts_query("say \"hi\"").as_deref(),
            Some("\"say\" \"\"\"hi\"\"\"")
        );
    }

    #[test]
    fn migrations_are_numbered_in_order() {
        for (i, step) in schema::MIGRATIONS.iter().enumerate() {
            assert_eq!(step.version as usize, i + 1, "{}", step.what);
        }
    }

    #[test]
    fn hot_statements_are_not_re_prepared_on_reuse() {
        let mut store = Store::open_in_memory().unwrap();
        let id = store.create_session(&NewSession::default()).unwrap().id;
        for i in 0..5 {
            let entry = LedgerEntry {
                message: Message::assistant(format!("answer {i}")),
                meta: EntryMeta {
                    usage: (i % 2 == 0).then(Usage::default),
                    interrupted: i % 3 == 0,
                    timestamp_ms: i,
                    ..EntryMeta::default()
                },
            };
            store.append_messages(&id, &[entry]).unwrap();
            assert_eq!(store.load_transcript(&id).unwrap().len() as u64, i + 1);
            assert_eq!(store.search(&format!("{i}"), 1).unwrap().len(), 1);
        }
        for sql in [INSERT_SQL, LOAD_SQL] {
            let stmt = store.conn.prepare_cached(sql).unwrap();
            let reprepared = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(reprepared, 0, "{sql}");
        }
    }

    #[test]
    fn write_tx_rolls_back_unless_committed() {
        let store = Store::open_in_memory().unwrap();
        let put = |tx: &WriteTx<'_>, key: &str| {
            tx.execute("INSERT INTO kv (key, value) VALUES (?1, 'v')", [key])
                .unwrap();
        };
        {
            let tx = WriteTx::begin(&store.conn).unwrap();
            put(&tx, "dropped");
        }
        assert!(store.conn.is_autocommit(), "transaction ended by the drop");
        let tx = WriteTx::begin(&store.conn).unwrap();
        put(&tx, "kept");
        tx.commit().unwrap();
        assert_eq!(store.kv_get("dropped").unwrap(), None);
        assert_eq!(store.kv_get("kept").unwrap().as_deref(), Some("v"));
        // A failed COMMIT-less path (error inside) leaves no transaction open.
        let tx = WriteTx::begin(&store.conn).unwrap();
        assert!(
            tx.execute("INSERT INTO kv (key, value) VALUES ('kept', 'again')", [])
                .is_err()
        );
        drop(tx);
        assert!(store.conn.is_autocommit());
        assert!(WriteTx::begin(&store.conn).unwrap().commit().is_ok());
    }

    #[test]
    fn connection_settings_are_the_documented_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let pragma = |store: &Store, name: &str| -> i64 {
            store
                .conn
                .pragma_query_value(None, name, |row| row.get(0))
                .unwrap()
        };
        // 1 = NORMAL, 2 = FULL.
        assert_eq!(pragma(&store, "synchronous"), 1);
        assert_eq!(pragma(&store, "journal_size_limit"), WAL_SIZE_LIMIT);
        assert_eq!(pragma(&store, "foreign_keys"), 1);
        assert!(
            store
                .conn
                .db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG)
                .unwrap()
        );
        store.set_synchronous(Synchronous::Full).unwrap();
        assert_eq!(pragma(&store, "synchronous"), 2);
        store.set_synchronous(Synchronous::Normal).unwrap();
        assert_eq!(pragma(&store, "synchronous"), 1);
    }

    #[test]
    fn store_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Store>();
    }
}
