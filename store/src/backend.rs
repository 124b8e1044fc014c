//! What a storage backend provides: the contract behind [`super::Store`].
//!
//! One trait per area (sessions, transcripts, search, compactions, key-value
//! state, leases), each implemented in that area's file of each backend
//! (`sqlite/`, `postgres/`), and [`Backend`] tying them together. The
//! methods are synchronous: callers run them on a plain thread or tokio's
//! blocking pool. [`super::Store`] is the public face: it documents each
//! operation once and forwards to its backend.
//!
//! Every backend keeps the same promises (the store's module docs): one
//! transaction per call, `Ok` only after the commit, exact round trips,
//! no SQL built from data. The tests in `std-runtime/tests/store*` run
//! against both.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hermes_core::context::Compaction;
use hermes_core::{Clock, LedgerEntry};

use super::jobs::{Claim, JobRecord, RunRecord, RunUpdate};
use super::records::{
    Fence, ImportedSession, KvWrite, LeaseGrant, LeaseRecord, ModelUsage, NewSession, SearchHit,
    SearchScope, SessionChange, SessionRecord, StoredCompaction,
};
use super::{StoreError, Synchronous};

/// Which database a store talks to.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file.
    File(PathBuf),
    /// A SQLite database in memory (tests, benchmarks).
    Memory,
    /// A PostgreSQL database.
    Postgres {
        /// The URL as configured (may hold a password: never log it).
        url: String,
        /// The URL with its password masked, for messages.
        shown: String,
    },
}

impl Location {
    /// A path for messages and for callers that open files beside the
    /// database: the file, `:memory:`, or the masked URL.
    pub fn path(&self) -> &Path {
        match self {
            Location::File(p) => p,
            Location::Memory => Path::new(":memory:"),
            Location::Postgres { shown, .. } => Path::new(shown.as_str()),
        }
    }

    /// Which kind of backend.
    pub fn kind(&self) -> BackendKind {
        match self {
            Location::File(_) | Location::Memory => BackendKind::Sqlite,
            Location::Postgres { .. } => BackendKind::Postgres,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Memory => f.write_str(":memory:"),
            Location::Postgres { shown, .. } => f.write_str(shown),
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the raw URL: it may carry a password.
        write!(f, "Location({self})")
    }
}

/// The two backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// One SQLite file on this machine (the embedded default).
    Sqlite,
    /// A PostgreSQL server that several gateways share.
    Postgres,
}

impl BackendKind {
    /// `sqlite` / `postgresql`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgresql",
        }
    }
}

/// Sessions: rows, lookups, lifecycle.
pub(crate) trait Sessions {
    fn create_session(&mut self, new: &NewSession<'_>) -> Result<SessionRecord, StoreError>;
    /// Writes every session not yet imported, in one transaction; returns
    /// how many were written.
    fn import_sessions(&mut self, _sessions: &[ImportedSession<'_>]) -> Result<usize, StoreError> {
        Err(StoreError::Unsupported("importing sessions", "PostgreSQL"))
    }
    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// The most recently updated session, of one platform if given.
    fn latest_session(&self, platform: Option<&str>) -> Result<Option<SessionRecord>, StoreError>;
    fn latest_session_in(
        &self,
        platform: &str,
        workdir: &str,
    ) -> Result<Option<SessionRecord>, StoreError>;
    fn find_session(&self, id_or_prefix: &str) -> Result<Option<SessionRecord>, StoreError>;
    fn delete_session(&mut self, id: &str) -> Result<(), StoreError>;
    fn active_session_for_key(&self, key: &str) -> Result<Option<SessionRecord>, StoreError>;
    fn update_session(&mut self, id: &str, change: SessionChange<'_>) -> Result<(), StoreError>;
    fn reset(&mut self, key: &str, new: &NewSession<'_>) -> Result<SessionRecord, StoreError>;
    fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError>;
    fn suspend_recent_unclean(&mut self, within_ms: u64) -> Result<Vec<String>, StoreError>;
    fn mark_clean_shutdown(&mut self) -> Result<(), StoreError>;
}

/// Transcripts: the messages of a session.
pub(crate) trait Transcripts {
    fn load_transcript(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError>;
    /// Appends `entries` and applies `writes` in one transaction, if every
    /// fence still holds; `Ok(false)` when a claim or a consume in `writes`
    /// failed (nothing written).
    fn append(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        writes: &[KvWrite<'_>],
        fences: &[Fence],
    ) -> Result<bool, StoreError>;
    fn undo_last_turn(&mut self, id: &str) -> Result<usize, StoreError>;
    fn replace_transcript(&mut self, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError>;
    /// Token totals per answering model, most used first.
    fn session_usage(&self, id: &str) -> Result<Vec<ModelUsage>, StoreError>;
}

/// Full-text search.
pub(crate) trait Search {
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError>;
    /// [`Search::search`] within `scope`, leaving out session `exclude`.
    fn search_in(
        &self,
        query: &str,
        scope: SearchScope<'_>,
        exclude: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, StoreError>;
    fn catch_up_search_index(&self) -> Result<u64, StoreError>;
}

/// Compacted views (SPEC X1).
pub(crate) trait Compactions {
    fn record_compaction(
        &mut self,
        id: &str,
        compaction: &Compaction,
    ) -> Result<StoredCompaction, StoreError>;
    fn latest_compaction(&self, id: &str) -> Result<Option<StoredCompaction>, StoreError>;
    fn compactions(&self, id: &str) -> Result<Vec<StoredCompaction>, StoreError>;
    fn load_view(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError>;
}

/// Small key-value state.
pub(crate) trait KeyValue {
    fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError>;
    fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError>;
    fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError>;
    fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError>;
    fn kv_commit(&mut self, writes: &[KvWrite<'_>], fences: &[Fence]) -> Result<bool, StoreError>;
    fn kv_prune_below(&mut self, prefix: &str, below: u64) -> Result<usize, StoreError>;
}

/// Leases with fencing epochs, and wake-ups between processes.
pub(crate) trait Leases {
    fn lease_acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        state: Option<&str>,
        take_over: bool,
    ) -> Result<LeaseGrant, StoreError>;
    fn lease_renew(&mut self, fence: &Fence, ttl_ms: u64) -> Result<Option<u64>, StoreError>;
    fn lease_set_state(&mut self, fence: &Fence, state: Option<&str>) -> Result<(), StoreError>;
    fn lease_release(&mut self, fence: &Fence, state: Option<&str>) -> Result<bool, StoreError>;
    fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StoreError>;
    fn leases(&self, prefix: &str) -> Result<Vec<LeaseRecord>, StoreError>;
    fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError>;
    fn listen(
        &self,
        channels: &[&str],
        sink: super::NotifySink,
    ) -> Result<Option<super::Listener>, StoreError>;
}

/// Scheduled jobs and their runs (SPEC Y1, `store/src/jobs.rs`).
pub(crate) trait Jobs {
    fn job_insert(&mut self, job: &JobRecord) -> Result<(), StoreError>;
    fn find_job(&self, id_or_prefix: &str) -> Result<Option<JobRecord>, StoreError>;
    fn jobs(&self, all: bool) -> Result<Vec<JobRecord>, StoreError>;
    fn job_update(&mut self, job: &JobRecord) -> Result<bool, StoreError>;
    fn job_delete(&mut self, id: &str) -> Result<bool, StoreError>;
    fn due_jobs(&self, now_ms: u64, limit: usize) -> Result<Vec<JobRecord>, StoreError>;
    fn job_claim(&mut self, claim: &Claim<'_>) -> Result<bool, StoreError>;
    fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError>;
    fn job_runs(&self, job_id: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError>;
    fn run_update(
        &mut self,
        run_id: &str,
        update: &RunUpdate,
        fence: &Fence,
    ) -> Result<(), StoreError>;
    fn run_failed_after_delivery(
        &mut self,
        run_id: &str,
        error: &str,
        outcome: &str,
    ) -> Result<bool, StoreError>;
}

/// A storage backend: every area, plus the connection itself.
pub(crate) trait Backend:
    Sessions + Transcripts + Search + Compactions + KeyValue + Leases + Jobs + Send + fmt::Debug
{
    fn location(&self) -> &Location;
    /// A second connection to the same database (an in-memory SQLite
    /// database gets a new, empty one).
    fn reopen(&self) -> Result<Box<dyn Backend>, StoreError>;
    fn set_clock(&mut self, clock: Arc<dyn Clock>);
    fn set_synchronous(&mut self, mode: Synchronous) -> Result<(), StoreError>;
    fn set_wal_autocheckpoint(&mut self, pages: u32) -> Result<(), StoreError>;
    fn set_cache_pages(&mut self, pages: u32) -> Result<(), StoreError>;
}
