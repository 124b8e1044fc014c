//! Persistence of sessions, transcripts, small adapter state and leases,
//! in SQLite (the embedded default) or PostgreSQL (several gateways sharing
//! one database, SPEC X8).
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
//!   one that did not (see `std-runtime/tests/store_durability.rs`, 20 kill
//!   rounds).
//! - **Durability level: WAL with `synchronous = NORMAL` by default.** A
//!   commit appends its pages to the WAL with `write()` and returns; the WAL
//!   is fsynced before each checkpoint, not at each commit. A committed
//!   transaction is therefore in the OS page cache the moment `Ok` is
//!   returned, which is exactly what a process death cannot take away. A
//!   power cut or kernel crash keeps the database *consistent* (WAL frames
//!   are checksummed; a torn tail is discarded on recovery) but may lose the
//!   last commits since the previous checkpoint. Closing the store does not
//!   checkpoint (no fsync at a one-shot run's exit); the next open reads the
//!   WAL, and the automatic checkpoint folds it in at 256 pages.
//!   Deployments that must keep
//!   acknowledged writes through a power cut call
//!   [`Store::set_synchronous`]`(`[`Synchronous::Full`]`)`, which fsyncs
//!   the WAL at every commit (an fsync per write: appends measured about
//!   3× slower on the development VM; see `BENCHMARKS.md`).
//! - **Cheap appends, exact search.** The full-text index is brought up to
//!   date by [`Store::search`] (and [`Store::catch_up_search_index`]), not
//!   by every append: appends stay small write transactions, and a search
//!   first indexes whatever was appended since the previous one, so results
//!   are exactly what is stored. Deletes (undo, replace) remove their rows
//!   from the index in the same transaction. See `store/src/sqlite/schema.rs`, V3.
//! - **Compaction is lossless** (SPEC X1). A compaction adds a record
//!   beside the messages ([`Store::record_compaction`]); no message is
//!   deleted or edited, so search and exports see every original, while
//!   [`Store::load_view`] gives the compacted view later turns start from.
//!   See `store/src/compaction.rs` and `store/src/sqlite/schema.rs`, V4.
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
//! # Backends
//! [`Store::open`] opens a SQLite file, [`Store::open_url`] a PostgreSQL
//! database (`postgresql://…`), [`Store::open_target`] whichever the
//! settings name. The API is the same, and so are the guarantees above,
//! with these differences:
//! - PostgreSQL's durability is the server's (`synchronous_commit`, on by
//!   default: a commit is flushed to the server's WAL before `Ok`).
//!   [`Store::set_synchronous`] maps `Normal` to `synchronous_commit = off`
//!   for this connection, which keeps consistency and may lose the last
//!   commits if the server crashes.
//! - Full-text search is a `tsvector` column filled in the same
//!   transaction as the message (so there is nothing to catch up), from
//!   words cut and folded in Rust exactly as SQLite's `unicode61`
//!   tokenizer with `remove_diacritics 2` does (see `postgres/fts.rs`):
//!   the same query finds the same messages on both backends, whatever the
//!   server's locale.
//! - Leases ([`Store::lease_acquire`]) lapse by the database server's
//!   clock, so gateways on several machines need no synchronised clocks;
//!   on SQLite by the store's clock. Wake-ups between processes
//!   ([`Store::notify`], [`Store::listen`]) are `LISTEN`/`NOTIFY`;
//!   SQLite has none (`listen` gives `None`: poll).
//!
//! A [`Store`] owns one connection. It is `Send`; callers that share it put it
//! behind a `Mutex`. Several stores (processes or threads) may open the same
//! database: with SQLite, WAL lets readers proceed while one writer commits,
//! and writers wait up to [`BUSY_TIMEOUT`] for each other; with PostgreSQL,
//! as many as the server allows. The PostgreSQL connection lives on a thread
//! of its own, so a store may be called from any thread, a tokio worker
//! included (the synchronous client would panic there).

mod api;
mod backend;
mod codec;
mod compaction;
mod error;
mod id;
mod jobs;
mod lease;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
mod sqlite;
// Public for the runtime's fuzz entry (`stored_tool_calls`), not an API.
#[doc(hidden)]
pub mod tool_calls;

pub use backend::{BackendKind, Location};
pub use error::StoreError;
pub use jobs::{
    Claim, JobRecord, JobState, RunRecord, RunState, RunUpdate, job_lease, new_job_id, new_run_id,
};
pub use lease::{Listener, Notification, NotifySink};
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub use postgres::search_vector;
pub use records::{
    Fence, ImportedSession, KvWrite, LeaseGrant, LeaseRecord, ModelUsage, NewSession,
    PreviousHolder, SearchHit, SearchScope, SessionRecord, SessionStatus, StoredCompaction,
};
pub use sqlite::agent_db::{
    AgentDb, AgentMessage, AgentSession, KNOWN_AGENT_SCHEMAS, read_agent_sessions,
};
pub use sqlite::file::{
    SQLITE_SCHEMA, SqliteFile, inspect as inspect_sqlite, snapshot as snapshot_sqlite,
};

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hermes_core::Clock;

use backend::Backend;

/// How long a write waits for another connection's write to finish before
/// failing with "database is locked" (SQLite), and how long a PostgreSQL
/// statement may wait for a lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Which database to open: what the settings say (`[store] url` /
/// `HERMES_DATABASE_URL`, else `$HERMES_HOME/state.db`).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreTarget {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL URL (may hold a password).
    Postgres(String),
}

impl StoreTarget {
    /// The URL with its password masked, or the file path.
    pub fn shown(&self) -> String {
        match self {
            StoreTarget::Sqlite(p) => p.display().to_string(),
            StoreTarget::Postgres(url) => mask_url(url),
        }
    }

    /// Which backend it selects.
    pub fn kind(&self) -> BackendKind {
        match self {
            StoreTarget::Sqlite(_) => BackendKind::Sqlite,
            StoreTarget::Postgres(_) => BackendKind::Postgres,
        }
    }
}

impl fmt::Debug for StoreTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreTarget({})", self.shown())
    }
}

/// Whether `url` names a PostgreSQL database (`postgresql://` or
/// `postgres://`), as opposed to anything else a store setting might hold.
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("postgresql://") || lower.starts_with("postgres://")
}

/// `url` with the password (userinfo after `:`, or a `password=` query
/// parameter) replaced by `***`, for messages and logs.
pub fn mask_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = rest_start..rest_start + at;
            if let Some(colon) = out[userinfo.clone()].find(':') {
                out.replace_range(userinfo.start + colon + 1..userinfo.end, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

/// The session store. See the module docs for its guarantees.
pub struct Store {
    backend: Box<dyn Backend>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("location", self.backend.location())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path`: creates
    /// missing parent directories, creates a new file with mode `0600`,
    /// switches to WAL with `synchronous = NORMAL` (see the module docs),
    /// and migrates an older schema.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            backend: Box::new(sqlite::Sqlite::open(path)?),
        })
    }

    /// An in-memory SQLite database (no WAL, nothing survives the store).
    /// For tests and benchmarks that do not need a file.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Ok(Store {
            backend: Box::new(sqlite::Sqlite::open_in_memory()?),
        })
    }

    /// Connects to the PostgreSQL database at `url` (`postgresql://user:pw@host:5432/db`,
    /// `postgresql:///db?host=/run/postgresql` or `postgresql://%2Frun%2Fpostgresql/db`
    /// for a unix socket, and the other libpq URL forms) and migrates an
    /// older schema. [`StoreError::BadUrl`] for anything else, or when this
    /// build has no PostgreSQL support (cargo feature `postgres`).
    pub fn open_url(url: &str) -> Result<Store, StoreError> {
        if !is_postgres_url(url) {
            return Err(StoreError::BadUrl(format!(
                "the store URL {} is not a PostgreSQL URL (postgresql://…)",
                mask_url(url)
            )));
        }
        #[cfg(feature = "postgres")]
        {
            Ok(Store {
                backend: Box::new(postgres::Postgres::connect(url)?),
            })
        }
        #[cfg(not(feature = "postgres"))]
        {
            Err(StoreError::BadUrl(format!(
                "this hermes was built without PostgreSQL support; cannot open {}",
                mask_url(url)
            )))
        }
    }

    /// Opens what `target` names.
    pub fn open_target(target: &StoreTarget) -> Result<Store, StoreError> {
        match target {
            StoreTarget::Sqlite(path) => Store::open(path),
            StoreTarget::Postgres(url) => Store::open_url(url),
        }
    }

    /// A second connection to the same database, with the same clock (an
    /// in-memory database gets a new, empty one). The gateway's inbox
    /// writes through its own connection this way.
    pub fn reopen(&self) -> Result<Store, StoreError> {
        Ok(Store {
            backend: self.backend.reopen()?,
        })
    }

    /// Replaces the clock that stamps `created_at_ms` / `updated_at_ms` and
    /// names new sessions (default: [`SystemClock`]). Leases on PostgreSQL
    /// keep the server's clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.backend.set_clock(clock);
        self
    }

    /// Changes the `synchronous` setting of this connection (default
    /// [`Synchronous::Normal`]; [`Synchronous::Full`] for power-loss
    /// durability). Applies to this connection only, not to other stores
    /// open on the same database. On PostgreSQL, `Full` is
    /// `synchronous_commit = on` (the server's default) and `Normal` is
    /// `off`.
    pub fn set_synchronous(&mut self, mode: Synchronous) -> Result<(), StoreError> {
        self.backend.set_synchronous(mode)
    }

    /// SQLite: the WAL pages after which a commit of this connection
    /// checkpoints them into the database. The next process to open the
    /// file reads the whole WAL before its first query, so a program that
    /// starts often (the CLI) keeps it shorter than a long-running one
    /// needs to. No effect on PostgreSQL.
    pub fn set_wal_autocheckpoint(&mut self, pages: u32) -> Result<(), StoreError> {
        self.backend.set_wal_autocheckpoint(pages)
    }

    /// SQLite: how many database pages this connection keeps cached
    /// between statements (SQLite's default is 2 MB worth). A short-lived
    /// process reads each page it needs once or twice, so a small cache
    /// costs it a few `pread`s of pages the kernel already holds, and
    /// saves memory it would otherwise touch page by page; a long-running
    /// one keeps the default. A transaction may still hold more pages than
    /// this while it runs. No effect on PostgreSQL.
    pub fn set_cache_pages(&mut self, pages: u32) -> Result<(), StoreError> {
        self.backend.set_cache_pages(pages)
    }

    /// The path this store was opened with: the file, `:memory:` for an
    /// in-memory store, the masked URL for PostgreSQL.
    pub fn path(&self) -> &Path {
        self.backend.location().path()
    }

    /// Where the data lives.
    pub fn location(&self) -> &Location {
        self.backend.location()
    }

    /// Which backend this store uses.
    pub fn kind(&self) -> BackendKind {
        self.backend.location().kind()
    }

    /// Whether nothing survives this store (an in-memory database).
    pub fn is_volatile(&self) -> bool {
        matches!(self.backend.location(), Location::Memory)
    }
}

/// The smallest string above every string starting with `prefix` (for an
/// index range scan), or `None` when there is none (an empty prefix).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        if let Some(next) = char::from_u32(u32::from(last) + 1) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
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
    fn urls_are_recognised_and_passwords_masked() {
        assert!(is_postgres_url("postgresql://h/db"));
        assert!(is_postgres_url("Postgres://h/db"));
        assert!(!is_postgres_url("/var/lib/hermes/state.db"));
        assert!(!is_postgres_url("sqlite:///x"));
        assert_eq!(
            mask_url("postgresql://hermes:s3cr%40t@db.example:5432/hermes"),
            "postgresql://hermes:***@db.example:5432/hermes"
        );
        assert_eq!(
            mask_url("postgresql://hermes@db/h?password=x&sslmode=require"),
            "postgresql://hermes@db/h?password=***&sslmode=require"
        );
        assert_eq!(
            mask_url("postgresql:///h?host=/run/postgresql"),
            "postgresql:///h?host=/run/postgresql"
        );
        // An `@` in the path is not userinfo.
        assert_eq!(mask_url("postgresql://h/a:b@c"), "postgresql://h/a:b@c");
    }

    #[test]
    fn store_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Store>();
    }
}
