//! The SQLite backend: one connection to one database file (or memory).
//!
//! WAL, `synchronous = NORMAL` by default, FTS5 indexed by catch-up, forward
//! migrations in `PRAGMA user_version` (see `schema.rs`). Each area's SQL
//! lives in its own file and implements that area's backend trait.

pub mod agent_db;
mod compaction;
pub(crate) mod file;
mod jobs;
mod kv;
mod lease;
mod memory;
mod migrate;
mod schema;
mod search;
mod sessions;
mod transcript;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hermes_core::Clock;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

use super::backend::{Backend, Location};
use super::{BUSY_TIMEOUT, StoreError, Synchronous, SystemClock};

/// Bytes the `-wal` file is truncated to after a checkpoint, if larger.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// WAL pages after which a commit checkpoints (SQLite's default is 1000).
/// The store does not checkpoint on close, so the next process to open the
/// file rebuilds its WAL index by reading the whole WAL: ≈ 2 k
/// instructions and a `pread` per page (callgrind, issue 39). 256 pages
/// (1 MB) bounds that for a long-running program; the CLI, which starts
/// often, sets fewer (`Store::set_wal_autocheckpoint`). A checkpoint costs
/// two fsyncs, so not at every exit: a one-shot turn without tools writes
/// 18 pages.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 256;

/// Dirty pages a write transaction may hold before SQLite writes some to
/// the WAL ahead of its commit, whatever the cache size
/// (`Store::set_cache_pages`): SQLite's default cache, 2,000 KiB, in 4 KiB
/// pages.
const CACHE_SPILL_PAGES: u32 = 500;

/// Each connection's lookaside, SQLite's own pool of small blocks: 8 slots
/// of SQLite's default 1,200 bytes (its buffer then also holds small
/// 128-byte slots), where its default of 40 took a 48 KB block of every
/// connection. A 0-turn one-shot ran no more instructions with 8 (2.805 M
/// against 2.802 M, a 20-turn one 6.262 M against 6.262 M) and 17 fewer
/// page faults (324 -> 307); without a lookaside at all it ran 1.5 % more
/// (issue 39: callgrind, BENCHMARKS.md "Start-up").
const LOOKASIDE_SLOT_SIZE: u16 = 1200;
const LOOKASIDE_SLOTS: u16 = 8;

/// Process-wide settings of the SQLite library, made once, before this
/// process opens its first connection: `sqlite3_config` is refused once
/// the library has initialised, which the first open does. Every
/// connection the store opens calls this first.
///
/// Memory statistics off: with them on, every allocation and free of
/// SQLite's takes a process-wide mutex to count bytes nothing here reads
/// (no soft heap limit, no `sqlite3_memory_used`) — ≈ 2,600 lock and
/// unlock pairs, 4 % of a 0-turn one-shot's instructions (issue 39).
pub(crate) fn configure_library() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `SQLITE_CONFIG_MEMSTATUS` takes one int. `call_once`
        // runs this before any connection of the store exists, and no
        // other code of this program opens SQLite (a tidy test keeps
        // `Connection::open` in this crate); if the library were
        // initialised anyway, SQLite refuses with SQLITE_MISUSE and
        // changes nothing.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                std::ffi::c_int::from(0u8),
            )
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(rc, "SQLite kept its memory statistics on");
        }
        // SQLite's blocks from the program's allocator (`memory`).
        let rc = memory::use_global_allocator();
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(rc, "SQLite kept libc's malloc");
        }
        // No initial bulk allocation of page-cache slots: SQLite wrote a
        // header into each of 20 slots of every new cache, 22 pages, and
        // every insert or status update of `sessions` made a cache of its
        // own (until schema version 12 its CHECK `status IN (…)` was an
        // ephemeral b-tree) — ≈ 40 of a one-shot's page faults. Pages are
        // then allocated as a cache needs them (issue 39;
        // benchmarks/runs/2026-12-05-a-start-up-arena.md).
        //
        // SAFETY: `SQLITE_CONFIG_PAGECACHE` takes a buffer, a slot size and
        // a slot count; no buffer and no slots is its documented "no
        // initial bulk allocation". Same timing as above.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_PAGECACHE,
                std::ptr::null_mut::<std::ffi::c_void>(),
                std::ffi::c_int::from(0u8),
                std::ffi::c_int::from(0u8),
            )
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(rc, "SQLite kept its initial page-cache allocation");
        }
        // A smaller lookaside (see `LOOKASIDE_SLOTS`).
        //
        // SAFETY: `SQLITE_CONFIG_LOOKASIDE` takes two ints, the slot size
        // and the slot count, the defaults of every connection opened
        // after. Same timing as above.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_LOOKASIDE,
                std::ffi::c_int::from(LOOKASIDE_SLOT_SIZE),
                std::ffi::c_int::from(LOOKASIDE_SLOTS),
            )
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(rc, "SQLite kept its default lookaside");
        }
    });
}

/// The SQLite backend of a [`super::Store`].
pub(super) struct Sqlite {
    conn: Connection,
    clock: Arc<dyn Clock>,
    location: Location,
}

impl fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sqlite")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Sqlite {
    /// Opens (creating if needed) the database at `path`: creates missing
    /// parent directories, creates a new file with mode `0600`, switches to
    /// WAL with `synchronous = NORMAL` (see the module docs), and migrates
    /// an older schema.
    pub(super) fn open(path: &Path) -> Result<Sqlite, StoreError> {
        create_private_file(path)?;
        configure_library();
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Sqlite::init(conn, path.to_path_buf(), true)
    }

    /// An in-memory database (no WAL, nothing survives the store). For tests
    /// and benchmarks that do not need a file.
    pub(super) fn open_in_memory() -> Result<Sqlite, StoreError> {
        let path = PathBuf::from(":memory:");
        configure_library();
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Sqlite::init(conn, path, false)
    }

    fn init(mut conn: Connection, path: PathBuf, wal: bool) -> Result<Sqlite, StoreError> {
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
        // A file with tables but no hermes schema is another program's —
        // hermes-agent's `state.db` under the same `~/.hermes`, say: the
        // first migration would fail on its `sessions` table, and must not
        // try. Nothing about the file has changed yet.
        if found == 0 {
            match file::classify(&conn).map_err(open_err)? {
                file::SqliteFile::Empty | file::SqliteFile::Hermes { .. } => {}
                other => {
                    return Err(StoreError::Foreign {
                        path,
                        what: other.describe(),
                    });
                }
            }
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
            // No checkpoint when the last connection closes: it cost every
            // one-shot run three fsyncs at exit (the WAL, the database, and
            // the directory again when the next run recreated the deleted
            // WAL) — issue 39. What a run committed is in the WAL either way
            // (durability against a killed process is unchanged: the kill -9
            // suite), the next open reads the WAL, and the automatic
            // checkpoint still folds it in at WAL_AUTOCHECKPOINT_PAGES.
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .map_err(open_err)?;
            conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
                .map_err(open_err)?;
        }
        conn.pragma_update(None, "synchronous", Synchronous::default().as_pragma())
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(open_err)?;
        migrate::migrate(&mut conn, &path)?;
        let location = if wal {
            Location::File(path)
        } else {
            Location::Memory
        };
        Ok(Sqlite {
            conn,
            clock: Arc::new(SystemClock),
            location,
        })
    }
}

impl Backend for Sqlite {
    fn location(&self) -> &Location {
        &self.location
    }

    fn reopen(&self) -> Result<Box<dyn Backend>, StoreError> {
        let mut again = match &self.location {
            Location::File(path) => Sqlite::open(path)?,
            // Another connection to an in-memory database is another
            // database: nothing to share.
            _ => Sqlite::open_in_memory()?,
        };
        again.clock = Arc::clone(&self.clock);
        Ok(Box::new(again))
    }

    fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    fn set_synchronous(&mut self, mode: Synchronous) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "synchronous", mode.as_pragma())?;
        Ok(())
    }

    fn set_wal_autocheckpoint(&mut self, pages: u32) -> Result<(), StoreError> {
        self.conn.pragma_update(None, "wal_autocheckpoint", pages)?;
        Ok(())
    }

    fn set_cache_pages(&mut self, pages: u32) -> Result<(), StoreError> {
        self.conn.pragma_update(None, "cache_size", pages)?;
        // Dirty pages of a transaction larger than the cache would
        // otherwise be written to the WAL before its commit (`cache_spill`
        // follows `cache_size` unless set): still correct, but more writes.
        self.conn
            .pragma_update(None, "cache_spill", pages.max(CACHE_SPILL_PAGES))?;
        Ok(())
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
    super::to_i64(what, value)
}

fn from_i64(session_id: &str, what: &str, value: i64) -> Result<u64, StoreError> {
    super::from_i64(session_id, what, value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::search::fts_query;
    use super::sessions::insert_session;
    use super::transcript::{INSERT_SQL, LOAD_SQL};
    use super::*;
    use crate::backend::{KeyValue, Search, Sessions, Transcripts};
    use crate::{ID_ATTEMPTS, NewSession};
    use hermes_core::{EntryMeta, LedgerEntry, Message, Usage};

    #[test]
    fn session_id_collision_is_retried() {
        let store = Sqlite::open_in_memory().unwrap();
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
        let store = Sqlite::open_in_memory().unwrap();
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
        let mut store = Sqlite::open_in_memory().unwrap();
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
            store.append(&id, &[entry], &[], &[]).unwrap();
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
        let store = Sqlite::open_in_memory().unwrap();
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
        let mut store = Sqlite::open(&dir.path().join("s.db")).unwrap();
        let pragma = |store: &Sqlite, name: &str| -> i64 {
            store
                .conn
                .pragma_query_value(None, name, |row| row.get(0))
                .unwrap()
        };
        // 1 = NORMAL, 2 = FULL.
        assert_eq!(pragma(&store, "synchronous"), 1);
        assert_eq!(pragma(&store, "journal_size_limit"), WAL_SIZE_LIMIT);
        assert_eq!(
            pragma(&store, "wal_autocheckpoint"),
            WAL_AUTOCHECKPOINT_PAGES
        );
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
        store.set_wal_autocheckpoint(64).unwrap();
        assert_eq!(pragma(&store, "wal_autocheckpoint"), 64);
        store.set_cache_pages(8).unwrap();
        assert_eq!(pragma(&store, "cache_size"), 8);
        assert_eq!(pragma(&store, "cache_spill"), i64::from(CACHE_SPILL_PAGES));
    }

    /// A transaction of many more pages than a small cache holds writes
    /// nothing to the WAL before its commit, and commits whole: another
    /// connection reads all of it.
    #[test]
    fn a_small_cache_holds_a_large_transaction_until_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let wal = dir.path().join("s.db-wal");
        let mut store = Sqlite::open(&path).unwrap();
        store.set_cache_pages(8).unwrap();
        let value = "v".repeat(3_000);
        let before = fs::metadata(&wal).unwrap().len();
        let tx = WriteTx::begin(&store.conn).unwrap();
        for i in 0..200 {
            tx.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2)",
                rusqlite::params![format!("k{i}"), value],
            )
            .unwrap();
        }
        assert_eq!(fs::metadata(&wal).unwrap().len(), before, "nothing spilled");
        tx.commit().unwrap();
        assert!(fs::metadata(&wal).unwrap().len() > before + 200 * 3_000);

        let id = store.create_session(&NewSession::default()).unwrap().id;
        let entries: Vec<LedgerEntry> = (0..200)
            .map(|i| LedgerEntry {
                message: Message::assistant(format!("{i} {}", "more words ".repeat(300))),
                meta: EntryMeta::default(),
            })
            .collect();
        store.replace_transcript(&id, &entries).unwrap();
        let other = Sqlite::open(&path).unwrap();
        assert_eq!(other.load_transcript(&id).unwrap(), entries);
        assert_eq!(
            other.kv_get("k199").unwrap().as_deref(),
            Some(value.as_str())
        );
    }
}
