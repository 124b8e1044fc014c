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
//! - **Compaction is lossless** (SPEC X1). A compaction adds a record
//!   beside the messages ([`Store::record_compaction`]); no message is
//!   deleted or edited, so search and exports see every original, while
//!   [`Store::load_view`] gives the compacted view later turns start from.
//!   See `store/compaction.rs` and `store/schema.rs`, V4.
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

mod compaction;
mod id;
mod kv;
mod migrate;
mod schema;
mod search;
mod sessions;
pub(crate) mod tool_calls;
mod transcript;
mod usage;

pub use compaction::StoredCompaction;
pub use search::SearchHit;
pub use sessions::{NewSession, SessionRecord, SessionStatus};
pub use usage::ModelUsage;

pub use kv::KvWrite;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hermes_core::Clock;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

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
    /// An id prefix matches several sessions; the caller should ask for more
    /// of the id.
    #[error("{prefix:?} matches several sessions ({}); give more of the id", candidates.join(", "))]
    AmbiguousId {
        /// What was given.
        prefix: String,
        /// Some of the sessions it matches, newest first.
        candidates: Vec<String>,
    },
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
    /// A compaction described a view of the transcript other than the
    /// stored one (the caller's ledger was out of date). Nothing was
    /// recorded; the next load gives the stored view.
    #[error(
        "the compaction of session {session_id:?} describes {described} entries but its stored view has {stored}; not recorded"
    )]
    StaleView {
        /// The session.
        session_id: String,
        /// Entries in the stored view.
        stored: u64,
        /// Entries the compaction described.
        described: u64,
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
        let found = migrate::user_version(&conn).map_err(open_err)?;
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
        migrate::migrate(&mut conn, &path)?;
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

    use super::search::fts_query;
    use super::sessions::insert_session;
    use super::transcript::{INSERT_SQL, LOAD_SQL};
    use super::*;
    use hermes_core::{EntryMeta, LedgerEntry, Message, Usage};

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
