//! The store's operations, documented once, for every backend.

use std::time::Duration;

use hermes_core::LedgerEntry;
use hermes_core::context::Compaction;

use super::records::{ModelUsage, SessionChange};
use super::{
    Fence, ImportedSession, KvWrite, LeaseGrant, LeaseRecord, Listener, NewSession, NotifySink,
    SearchHit, SearchScope, SessionRecord, SessionStatus, Store, StoreError, StoredCompaction,
};

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Sessions.
impl Store {
    /// Creates an active session. Its id is unique even among sessions
    /// created in the same millisecond.
    pub fn create_session(&mut self, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        self.backend.create_session(new)
    }

    /// Writes every session of `sessions` whose marker is not in the kv
    /// table yet — rows, messages, markers — in ONE transaction: on `Err`
    /// nothing was written. Returns how many were written. SQLite only;
    /// PostgreSQL says [`StoreError::Unsupported`].
    pub fn import_sessions(
        &mut self,
        sessions: &[ImportedSession<'_>],
    ) -> Result<usize, StoreError> {
        self.backend.import_sessions(sessions)
    }

    /// The session with this id, if any.
    pub fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.session(id)
    }

    /// The session whose transcript changed most recently (any status), for
    /// "continue where I left off".
    pub fn latest_session(&self) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.latest_session(None)
    }

    /// Like [`latest_session`](Self::latest_session), among the sessions of
    /// one platform (the CLI continues its own sessions, not a chat user's).
    pub fn latest_session_on(&self, platform: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.latest_session(Some(platform))
    }

    /// Like [`latest_session_on`](Self::latest_session_on), among the
    /// sessions started in `workdir` (the CLI's `--continue`).
    pub fn latest_session_in(
        &self,
        platform: &str,
        workdir: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.latest_session_in(platform, workdir)
    }

    /// The session `id_or_prefix` names: the one with exactly that id, else
    /// the only one whose id starts with it. Several candidates are
    /// [`StoreError::AmbiguousId`] (naming a few), none is `Ok(None)`.
    pub fn find_session(&self, id_or_prefix: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.find_session(id_or_prefix)
    }

    /// Deletes the session with its transcript (and its rows in the search
    /// index). [`StoreError::SessionNotFound`] when there is none.
    pub fn delete_session(&mut self, id: &str) -> Result<(), StoreError> {
        self.backend.delete_session(id)
    }

    /// The active session of a gateway session key (SPEC G2), if any. Should
    /// several be active (a crash between two writes of an older version, or
    /// hand edits), the most recently updated wins.
    pub fn active_session_for_key(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.backend.active_session_for_key(key)
    }

    /// Stores the session's system prompt (assembled once, SPEC L6).
    pub fn set_system_prompt(&mut self, id: &str, prompt: &str) -> Result<(), StoreError> {
        self.backend
            .update_session(id, SessionChange::SystemPrompt(prompt))
    }

    /// Stores the session's model name (`/model`).
    pub fn set_model(&mut self, id: &str, model: &str) -> Result<(), StoreError> {
        self.backend.update_session(id, SessionChange::Model(model))
    }

    /// Sets the session's title (`None` clears it).
    pub fn set_title(&mut self, id: &str, title: Option<&str>) -> Result<(), StoreError> {
        self.backend.update_session(id, SessionChange::Title(title))
    }

    /// Sets the session's status. Does not change `updated_at_ms`, which
    /// tracks the transcript only.
    pub fn set_status(&mut self, id: &str, status: SessionStatus) -> Result<(), StoreError> {
        self.backend
            .update_session(id, SessionChange::Status(status))
    }

    /// `/new`: ends the active session(s) of `key` and creates a new active
    /// one, atomically. The new session's key is `key` whatever
    /// `new.session_key` says.
    pub fn reset(&mut self, key: &str, new: &NewSession<'_>) -> Result<SessionRecord, StoreError> {
        self.backend.reset(key, new)
    }

    /// Up to `limit` sessions, newest (by creation) first.
    pub fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        self.backend.list_sessions(limit)
    }

    /// Crash recovery (SPEC G11): marks suspended every active session whose
    /// transcript changed within the last `within_ms` and that was touched by
    /// a process which did not stop cleanly (see [`Store::mark_clean_shutdown`]).
    /// Returns their ids. Call once at start-up, before serving messages.
    pub fn suspend_recent_unclean(&mut self, within_ms: u64) -> Result<Vec<String>, StoreError> {
        self.backend.suspend_recent_unclean(within_ms)
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
        self.backend.mark_clean_shutdown()
    }
}

/// Transcripts.
impl Store {
    /// The session's transcript in order, exactly as appended.
    pub fn load_transcript(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.backend.load_transcript(id)
    }

    /// The token totals of session `id`, one row per answering model, most
    /// used first (ties by model name, no model first). Only messages that
    /// carry counts (assistant messages) count.
    pub fn session_usage(&self, id: &str) -> Result<Vec<ModelUsage>, StoreError> {
        self.backend.session_usage(id)
    }

    /// Appends `entries` to the session's transcript in ONE transaction and
    /// bumps `updated_at_ms`. When this returns `Ok`, every entry is durable;
    /// on `Err`, none was stored.
    pub fn append_messages(&mut self, id: &str, entries: &[LedgerEntry]) -> Result<(), StoreError> {
        self.backend.append(id, entries, &[], &[]).map(|_| ())
    }

    /// Like [`Store::append_messages`], only if `fence` still holds (checked
    /// in the same transaction): a holder that lost its lease gets
    /// [`StoreError::Fenced`] and nothing is written.
    pub fn append_messages_fenced(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        self.backend
            .append(id, entries, &[], std::slice::from_ref(fence))
            .map(|_| ())
    }

    /// Appends `entries` to the session's transcript (as
    /// [`Store::append_messages`]) and applies `writes`, in ONE transaction:
    /// a crash leaves either both or neither. `Ok(false)` — nothing written —
    /// when a claim failed.
    pub fn append_messages_with_kv(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        writes: &[KvWrite<'_>],
    ) -> Result<bool, StoreError> {
        self.backend.append(id, entries, writes, &[])
    }

    /// [`Store::append_messages_with_kv`] under fences: every one must
    /// still hold (see [`Store::append_messages_fenced`]).
    pub fn append_messages_with_kv_fenced(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
        writes: &[KvWrite<'_>],
        fences: &[Fence],
    ) -> Result<bool, StoreError> {
        self.backend.append(id, entries, writes, fences)
    }

    /// `/undo`: deletes the last user message and everything after it;
    /// returns how many messages were deleted (0 when there is no user
    /// message).
    pub fn undo_last_turn(&mut self, id: &str) -> Result<usize, StoreError> {
        self.backend.undo_last_turn(id)
    }

    /// A wholesale rewrite (imports, repairs): replaces the whole transcript
    /// with `entries` in one transaction (sequence numbers restart at 0),
    /// drops the session's compactions and bumps `updated_at_ms`. On `Err`
    /// the old transcript is untouched. Not how `/compress` works: that
    /// keeps every original and records a compaction beside them
    /// ([`Store::record_compaction`]).
    pub fn replace_transcript(
        &mut self,
        id: &str,
        entries: &[LedgerEntry],
    ) -> Result<(), StoreError> {
        self.backend.replace_transcript(id, entries)
    }
}

/// Search.
impl Store {
    /// Full-text search over message content, best match first.
    ///
    /// `query` is user text, not query syntax: each whitespace-separated
    /// word is searched as a phrase of its parts and all must match, so
    /// quotes, `AND`, `*`, `NEAR(` or column filters are just words. Words
    /// without any letter or digit are dropped; a query with none left finds
    /// nothing. Matching ignores case and Latin diacritics (`ha noi` finds
    /// `Hà Nội`).
    ///
    /// Results are exact. On SQLite the search first indexes every message
    /// appended since the last search (see [`Store::catch_up_search_index`]),
    /// which is a short write transaction and may wait for another writer;
    /// on PostgreSQL messages are indexed as they are stored.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        self.backend.search(query, limit)
    }

    /// [`Store::search`] within the sessions of `scope`, leaving out session
    /// `exclude` (the one asking), best match first. Messages a compaction
    /// replaced are found too: the store keeps the originals.
    pub fn search_in(
        &self,
        query: &str,
        scope: SearchScope<'_>,
        exclude: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, StoreError> {
        self.backend.search_in(query, scope, exclude, limit)
    }

    /// Adds every message not yet in the full-text index to it; returns how
    /// many were added (always 0 on PostgreSQL). [`Store::search`] does this
    /// itself; a long-running process may also call it when idle so that the
    /// first search after a busy period does not pay for indexing all of it
    /// (≈ 10–15 µs per message on SQLite).
    pub fn catch_up_search_index(&self) -> Result<u64, StoreError> {
        self.backend.catch_up_search_index()
    }
}

/// Compactions (SPEC X1).
impl Store {
    /// Records a compaction the core made of this session's current view
    /// (what [`Store::load_view`] returned, plus what was appended since),
    /// in one transaction. Refused with [`StoreError::StaleView`] when the
    /// compaction describes a view of another length; the originals are
    /// never touched either way.
    pub fn record_compaction(
        &mut self,
        id: &str,
        compaction: &Compaction,
    ) -> Result<StoredCompaction, StoreError> {
        self.backend.record_compaction(id, compaction)
    }

    /// The session's latest compaction, if any.
    pub fn latest_compaction(&self, id: &str) -> Result<Option<StoredCompaction>, StoreError> {
        self.backend.latest_compaction(id)
    }

    /// Every compaction of the session, oldest first (for exports).
    pub fn compactions(&self, id: &str) -> Result<Vec<StoredCompaction>, StoreError> {
        self.backend.compactions(id)
    }

    /// What the model is given of this session: the transcript itself, or,
    /// after a compaction, the kept head, the summary (marked
    /// [`hermes_core::EntryMeta::compaction`]) and every message from the
    /// kept tail on. This is what a turn starts from (SPEC G5, X1); the
    /// originals stay available through [`Store::load_transcript`] and search.
    pub fn load_view(&self, id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.backend.load_view(id)
    }
}

/// Key-value state.
impl Store {
    /// Reads a small adapter-state value (e.g. the Telegram update offset).
    pub fn kv_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.backend.kv_get(key)
    }

    /// Writes (inserts or replaces) a small adapter-state value, durably.
    pub fn kv_set(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.backend.kv_set(key, value)
    }

    /// The values whose keys start with `prefix`, in key order (byte order
    /// of the UTF-8 keys on both backends).
    pub fn kv_scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.backend.kv_scan(prefix)
    }

    /// Deletes these keys (absent ones are ignored), in one transaction.
    pub fn kv_delete(&mut self, keys: &[&str]) -> Result<(), StoreError> {
        self.backend.kv_delete(keys)
    }

    /// Applies `writes` in order, in ONE transaction. `Ok(false)` — and
    /// nothing written — when a [`KvWrite::Claim`] found its key present or
    /// a [`KvWrite::Consume`] found it absent; `Ok(true)` once everything
    /// is durable.
    pub fn kv_commit(&mut self, writes: &[KvWrite<'_>]) -> Result<bool, StoreError> {
        self.backend.kv_commit(writes, &[])
    }

    /// [`Store::kv_commit`], only if every fence still holds (checked in
    /// the same transaction; [`StoreError::Fenced`] otherwise, nothing
    /// written).
    pub fn kv_commit_fenced(
        &mut self,
        writes: &[KvWrite<'_>],
        fences: &[Fence],
    ) -> Result<bool, StoreError> {
        self.backend.kv_commit(writes, fences)
    }

    /// Deletes the keys starting with `prefix` whose value is a whole number
    /// below `below` (values written as millisecond timestamps); other values
    /// are left alone. Returns how many were deleted.
    pub fn kv_prune_below(&mut self, prefix: &str, below: u64) -> Result<usize, StoreError> {
        self.backend.kv_prune_below(prefix, below)
    }
}

/// Leases (SPEC X8): who may act for a bot or a session, with fencing.
///
/// A lease is a row: holder, epoch, expiry, and a note from the holder. It
/// lapses `ttl` after its last acquisition or renewal unless renewed —
/// by the database server's clock on PostgreSQL, the store's clock on
/// SQLite. Every acquisition bumps the epoch; a write that carries the
/// holder's [`Fence`] is refused once anyone acquired the lease after it.
/// A holder must also stop acting by its own clock: measure `ttl` from
/// *before* the call that renewed it, and stop when it passes without a
/// renewal (its process may have been stopped, or cut off from the
/// database, while someone else took over).
impl Store {
    /// Acquires the lease `name` for `owner` if it is free, released,
    /// lapsed — or held by anyone when `take_over` (the caller knows the
    /// holder is gone: SQLite's one-gateway file lock is held). A grant
    /// always starts a new epoch, even for the same owner, and records
    /// `state`. Otherwise says who holds it. One transaction; concurrent
    /// callers get exactly one grant.
    pub fn lease_acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl: Duration,
        state: Option<&str>,
        take_over: bool,
    ) -> Result<LeaseGrant, StoreError> {
        self.backend
            .lease_acquire(name, owner, ms(ttl), state, take_over)
    }

    /// Extends a held lease by `ttl` from now; returns the new expiry, or
    /// `None` when the fence no longer holds (someone acquired it since).
    /// A lapsed lease nobody acquired is renewed: nobody acted meanwhile.
    pub fn lease_renew(&mut self, fence: &Fence, ttl: Duration) -> Result<Option<u64>, StoreError> {
        self.backend.lease_renew(fence, ms(ttl))
    }

    /// Replaces the holder's note; [`StoreError::Fenced`] when the fence no
    /// longer holds.
    pub fn lease_set_state(
        &mut self,
        fence: &Fence,
        state: Option<&str>,
    ) -> Result<(), StoreError> {
        self.backend.lease_set_state(fence, state)
    }

    /// Gives the lease up (keeping its epoch, so the next grant is newer),
    /// leaving `state`; `false` when the fence no longer held (nothing
    /// changed).
    pub fn lease_release(
        &mut self,
        fence: &Fence,
        state: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.backend.lease_release(fence, state)
    }

    /// The lease `name`, if it ever existed.
    pub fn lease(&self, name: &str) -> Result<Option<LeaseRecord>, StoreError> {
        self.backend.lease(name)
    }

    /// Every lease whose name starts with `prefix`, by name.
    pub fn leases(&self, prefix: &str) -> Result<Vec<LeaseRecord>, StoreError> {
        self.backend.leases(prefix)
    }

    /// Wakes every process listening on `channel` (PostgreSQL `NOTIFY`,
    /// sent when the surrounding transaction — here, the call — commits).
    /// Not durable: a listener that is not connected misses it, so
    /// listeners also poll. A no-op on SQLite.
    pub fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        self.backend.notify(channel, payload)
    }

    /// Starts listening on `channels` on a connection of its own;
    /// `sink` is called (on the listener's thread) for each notification.
    /// `None` when the backend has no notifications (SQLite): poll instead.
    /// Listening stops when the [`Listener`] is dropped.
    pub fn listen(
        &self,
        channels: &[&str],
        sink: NotifySink,
    ) -> Result<Option<Listener>, StoreError> {
        self.backend.listen(channels, sink)
    }
}
