//! The values the store hands out and takes in, the same for every backend.

use std::fmt;

use hermes_core::{Role, SummaryPlacement, Usage};

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
    /// Title, if known when it starts (the CLI's first message).
    pub title: Option<&'a str>,
}

/// A whole session from another program, written by
/// [`crate::Store::import_sessions`] with its own timestamps.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedSession<'a> {
    /// Platform, chat, user, model of the new row.
    pub new: NewSession<'a>,
    /// Title.
    pub title: Option<&'a str>,
    /// When it started (`created_at_ms`).
    pub created_at_ms: u64,
    /// Its messages, each stamped with its own time.
    pub entries: Vec<hermes_core::LedgerEntry>,
    /// The kv key that marks it imported; a session whose key exists is
    /// skipped (a second import adds nothing twice).
    pub marker: String,
}

/// One change to a session row (see [`crate::Store::set_model`] and
/// its siblings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionChange<'a> {
    SystemPrompt(&'a str),
    Model(&'a str),
    Title(Option<&'a str>),
    Status(SessionStatus),
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

/// Which sessions [`crate::Store::search_in`] looks in. The
/// `session_search` tool takes it from the runtime (the session it serves),
/// never from the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchScope<'a> {
    /// The sessions of one session key: one chat, or one user in a group
    /// chat, across `/new` and expiry.
    SessionKey(&'a str),
    /// Sessions started on `platform` without a session key: the local
    /// user's (`cli`).
    Platform(&'a str),
    /// This one session.
    Session(&'a str),
}

impl SearchScope<'_> {
    /// The scope's kind as the SQL of both backends numbers it, and its
    /// value.
    pub(crate) fn sql(&self) -> (i32, &str) {
        match self {
            SearchScope::SessionKey(k) => (1, k),
            SearchScope::Platform(p) => (2, p),
            SearchScope::Session(id) => (3, id),
        }
    }
}

/// The `WHERE` condition of a scoped search over `messages m JOIN sessions
/// s`; SQLite puts its parameters for the scope's kind and value
/// ([`SearchScope::sql`]) in place of `KIND` and `VALUE`, PostgreSQL
/// spells the same condition in its prepared statement.
pub(crate) const SCOPE_CONDITION: &str = "((KIND = 1 AND s.session_key = VALUE) \
     OR (KIND = 2 AND s.source_platform = VALUE AND s.session_key IS NULL) \
     OR (KIND = 3 AND m.session_id = VALUE))";

/// A compaction as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCompaction {
    /// Messages with `seq < head_end` are kept at the front.
    pub head_end: u64,
    /// Messages with `seq >= tail_start` are kept after the summary.
    pub tail_start: u64,
    /// One past the last message when the compaction was made.
    pub end_seq: u64,
    /// How the summary sits in the view.
    pub placement: SummaryPlacement,
    /// How many entries of the previous view it replaced.
    pub replaced: u64,
    /// The summary, framed as the view shows it.
    pub summary: String,
    /// Estimated request tokens before.
    pub tokens_before: u64,
    /// Estimated request tokens after.
    pub tokens_after: u64,
    /// When it was made, ms since the Unix epoch.
    pub created_at_ms: u64,
}

/// One change in a [`crate::Store::kv_commit`] batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvWrite<'a> {
    /// Inserts `key` only if it is absent. If it is present the whole batch
    /// is abandoned and the commit returns `Ok(false)`.
    Claim {
        /// The key.
        key: &'a str,
        /// Its value.
        value: &'a str,
    },
    /// Inserts or replaces `key`.
    Set {
        /// The key.
        key: &'a str,
        /// Its value.
        value: &'a str,
    },
    /// Deletes `key` (absent is fine).
    Delete(&'a str),
    /// Deletes `key`, which must be present: if it is absent (another
    /// process consumed it first) the whole batch is abandoned and the
    /// commit returns `Ok(false)`. Taking a queued item exactly once.
    Consume(&'a str),
    /// Adds `amount` to the whole number stored at `key` (absent counts as
    /// 0), atomically: two processes adding to one key at once both count
    /// (the row is locked, not read and rewritten). Spending accounts
    /// (issue 44) live in such keys, written in the transaction that
    /// stores the messages they pay for.
    Add {
        /// The key.
        key: &'a str,
        /// What to add (may be negative).
        amount: i64,
    },
    /// Adds `amount` to the whole number at `key` (absent counts as 0)
    /// only if that number is below `below`; otherwise the whole batch is
    /// abandoned and the commit returns `Ok(false)`. The test and the add
    /// are one step under the row's lock, so of two processes reserving
    /// the last of a budget at once exactly one succeeds (issue 44's
    /// reservations before a model call).
    AddBelow {
        /// The key.
        key: &'a str,
        /// What to add.
        amount: i64,
        /// The value the current one must be below.
        below: i64,
    },
}

/// A write condition: the lease `name` is still held by `owner` under
/// `epoch` (nobody acquired it since). A write carrying a fence checks it
/// in its own transaction, so a holder that lost its lease — stopped,
/// partitioned, presumed dead — cannot write after the next holder
/// started ([`crate::StoreError::Fenced`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The lease.
    pub name: String,
    /// The holder.
    pub owner: String,
    /// The holder's epoch.
    pub epoch: i64,
}

/// A lease as stored: who holds it, under which epoch, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The lease's name (`bot:telegram:123`, `session:<key>`).
    pub name: String,
    /// The holder, `None` once released.
    pub owner: Option<String>,
    /// Bumped by every acquisition; the fencing token.
    pub epoch: i64,
    /// When it lapses unless renewed, ms since the Unix epoch on the
    /// database's clock (see [`crate::Store::lease_acquire`]).
    pub expires_at_ms: u64,
    /// When the current holder acquired it.
    pub acquired_at_ms: u64,
    /// When it was last renewed.
    pub renewed_at_ms: u64,
    /// The holder's note (a running turn, for instance); `None` when idle.
    pub state: Option<String>,
    /// The database's clock when this record was read.
    pub now_ms: u64,
}

impl LeaseRecord {
    /// Held by someone and not lapsed at the time it was read.
    pub fn is_live(&self) -> bool {
        self.owner.is_some() && self.expires_at_ms > self.now_ms
    }

    /// The fence of the current holder, if any.
    pub fn fence(&self) -> Option<Fence> {
        Some(Fence {
            name: self.name.clone(),
            owner: self.owner.clone()?,
            epoch: self.epoch,
        })
    }
}

/// What [`crate::Store::lease_acquire`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The lease is ours under a new epoch.
    Granted {
        /// Our fence.
        fence: Fence,
        /// When it lapses unless renewed (database clock).
        expires_at_ms: u64,
        /// The database's clock at the grant.
        now_ms: u64,
        /// What the previous holder left, if the lease existed: who, and
        /// whether it lapsed (`true`) rather than being released, and its
        /// state (a turn that was running when its holder died).
        previous: Option<PreviousHolder>,
    },
    /// Someone else holds it.
    Held(LeaseRecord),
}

/// The holder before a grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviousHolder {
    /// Who held it (`None` when it had been released).
    pub owner: Option<String>,
    /// Its epoch.
    pub epoch: i64,
    /// The state it left (`None` when released idle).
    pub state: Option<String>,
    /// It lapsed while held (its holder died, stopped or was cut off),
    /// rather than being released.
    pub lapsed: bool,
}

/// The one session a prefix names among `found` (newest first, at most a
/// few), or [`StoreError::AmbiguousId`].
pub(crate) fn one_of(
    prefix: &str,
    mut found: Vec<SessionRecord>,
) -> Result<Option<SessionRecord>, super::StoreError> {
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(super::StoreError::AmbiguousId {
            prefix: prefix.to_owned(),
            candidates: found.into_iter().map(|s| s.id).collect(),
        }),
    }
}

/// The token usage of one answering model within a session (SPEC X3: prices
/// need the model, and with a fallback chain one session may have several).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    /// The configured model name stored with the messages (`None` for
    /// messages written before models were recorded).
    pub model: Option<String>,
    /// Model calls that reported usage.
    pub calls: u64,
    /// Their summed counts (saturating).
    pub usage: Usage,
}
