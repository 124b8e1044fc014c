//! The store's one error type, for every backend.

use std::io;
use std::path::PathBuf;

use super::ID_ATTEMPTS;

/// Errors of the store. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The operation is not implemented for this backend (importing
    /// another program's sessions is SQLite-only for now).
    #[error("{0} is not available with the {1} store")]
    Unsupported(&'static str, &'static str),
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
    /// The file is another program's database (hermes-agent's `state.db`,
    /// say), which this store must not migrate; it is left untouched. The
    /// caller explains the ways on (`hermes import hermes-agent`, another
    /// `HERMES_HOME`); not retryable.
    #[error("database {path} is {what}, not this hermes's; it is left untouched")]
    Foreign {
        /// The database path.
        path: PathBuf,
        /// What the file was recognised as.
        what: String,
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
    /// A write carried a [`Fence`](super::Fence) that no longer holds:
    /// another holder acquired the lease since (this process was stopped,
    /// cut off or presumed dead). Nothing was written; the caller must stop
    /// acting for that lease.
    #[error(
        "lease {name:?} is no longer held by {owner:?} under epoch {epoch} (another instance took over); the write was refused"
    )]
    Fenced {
        /// The lease.
        name: String,
        /// The owner the write claimed to be.
        owner: String,
        /// The epoch the write claimed.
        epoch: i64,
    },
    /// The store URL cannot be used (not `postgresql://…` / `postgres://…`,
    /// malformed, or this build has no PostgreSQL support). Fix the
    /// setting; not retryable.
    #[error("{0}")]
    BadUrl(String),
    /// The PostgreSQL server could not be reached or refused the login.
    /// Check the URL (shown with its password masked), that the server
    /// runs and accepts this user; often transient.
    #[cfg(feature = "postgres")]
    #[error("cannot connect to the database {url}: {source}")]
    Connect {
        /// The URL, password masked.
        url: String,
        /// The client's error.
        #[source]
        source: postgres::Error,
    },
    /// A PostgreSQL schema step failed; the database is left at the
    /// previous version (each step is one transaction).
    #[cfg(feature = "postgres")]
    #[error("cannot migrate database {url} to schema {version}: {source}")]
    PgMigration {
        /// The URL, password masked.
        url: String,
        /// The version that failed.
        version: u32,
        /// The server's error.
        #[source]
        source: postgres::Error,
    },
    /// Any other PostgreSQL failure (connection lost, a statement refused,
    /// the server shutting down). Often transient; the transaction did not
    /// commit.
    #[cfg(feature = "postgres")]
    #[error("database error: {0}")]
    Postgres(#[from] postgres::Error),
    /// A notification channel name that cannot be listened on (only
    /// lower-case letters, digits and `_`). A bug in the caller.
    #[error("{0:?} is not a notification channel name (lower-case letters, digits, _)")]
    BadChannel(String),
    /// The connection's worker thread is gone (it panicked). Open the store
    /// again.
    #[error("the database connection's thread has stopped; reopen the store")]
    ConnectionGone,
}
