//! Durable acceptance of user messages, exactly once (SPEC E3, X5).
//!
//! An adapter treats a message as delivered as soon as the handler returns
//! (Telegram then advances its stored update offset, so the platform never
//! sends it again). So the handler must make the message durable before it
//! returns; a turn may start much later (the session is busy, the worker
//! pool is full).
//!
//! # Why not append to the transcript at once
//! A message for a session whose turn is still running would land in the
//! transcript *before* that turn's reply (and, in queue mode, several waiting
//! messages before every reply to them), so the model would later read a
//! conversation in the wrong order. Instead, accepted messages are written
//! to this *inbox* — one small value in the store's key-value table — and
//! moved into the transcript, in arrival order, when their turn begins. A
//! message that a newer one replaced (interrupt mode) or that `/stop` dropped
//! is marked *unanswered* and stays here; the next turn of its session moves
//! it, ahead of its own message: it was accepted, so it is kept, just not
//! answered on its own (the model sees two consecutive user messages, which
//! is valid).
//!
//! # Exactly once
//! - **Accepted once.** Accepting writes, in ONE transaction, the message
//!   and a *seen* key for its identity (platform, chat, message id). A
//!   platform that delivers it again — Telegram after a kill between this
//!   write and its offset save, a webhook retry — finds the key, and the
//!   message is dropped, across restarts. Seen keys are pruned after
//!   `[gateway] dedup_retention_hours` (48 h; Telegram keeps undelivered
//!   updates for 24 h).
//! - **Transcribed once.** A turn's start moves its messages into the
//!   transcript, deletes them here and records the turn as running
//!   ([`TurnMarker`]), in one transaction
//!   ([`Store::append_messages_with_kv`]).
//! - **Answered once.** At start-up ([`crate::runner`]) messages still here
//!   were accepted but their turn never began (no side effects yet): they
//!   are queued again and answered. A turn marker still present belongs to a
//!   turn killed midway: it is not resumed (G11) — its tools may already have
//!   acted — but its session is suspended and its user gets one notice. A
//!   turn's marker is removed once its reply was handed to the adapter.
//!
//! The inbox uses its own connection to the same database, so accepting a
//! message never waits for the runner's store mutex (a turn may hold it),
//! only — briefly — for the database's write lock.
//!
//! # Several gateways on one database (SPEC X8)
//! Only the holder of a bot's lease accepts that bot's messages: acceptance
//! carries the lease's fence, so a gateway that lost the lease (stopped,
//! cut off) and still had a batch in hand writes nothing. Entries are keyed
//! by platform (`gateway.inbox.telegram.00000000000000000042`); the next
//! holder of a bot takes over the entries of its platform and numbers new
//! ones after them. A turn marker whose session lease lapsed belongs to a
//! turn killed midway: whoever acquires the lease next suspends the session
//! and owes its user the notice.

use std::collections::VecDeque;
use std::path::Path;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{Fence, KvWrite, Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::event::{ChatType, MediaRef, MessageEvent, MessageType, SessionSource};

/// The prefix of the key-value keys holding the inbox: one key per message
/// (`gateway.inbox.00000000000000000042`), so accepting or transcribing a
/// message writes only that message, however many are waiting.
pub const INBOX_KV_PREFIX: &str = "gateway.inbox.";

/// The prefix of the keys remembering accepted message ids (the value is
/// the acceptance time in ms, for pruning).
pub const SEEN_KV_PREFIX: &str = "gateway.seen.";

/// The prefix of the keys marking running turns, one per session key.
pub const TURN_KV_PREFIX: &str = "gateway.turn.";

/// The key of the message of `platform` with arrival number `id`
/// (zero-padded: key order is arrival order within a platform).
/// `writer` tells apart the processes (and so the bots) sharing one store:
/// each numbers its messages from 0, so the number alone collides (issue 44).
pub fn kv_key(platform: &str, writer: &str, id: u64) -> String {
    format!("{INBOX_KV_PREFIX}{platform}.{writer}.{id:020}")
}

/// A tag unique to this inbox's process and start (pid and start time):
/// two gateways on one database never write the same inbox key.
fn writer_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // Two inboxes of one process (tests) differ by the counter.
    static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:08x}{nanos:032x}{nth:04x}", std::process::id())
}

/// The key remembering that message `message_id` of `chat_id` on `platform`
/// was accepted; `None` for a message without an id (which cannot be
/// recognised again). The parts are JSON-quoted, so no id can make two
/// identities share a key.
pub fn seen_key(platform: &str, chat_id: &str, message_id: &str) -> Option<String> {
    if message_id.is_empty() {
        return None;
    }
    let parts = serde_json::to_string(&[platform, chat_id, message_id]).ok()?;
    Some(format!("{SEEN_KV_PREFIX}{parts}"))
}

/// The key of the running-turn marker of `session_key`.
pub fn turn_key(session_key: &str) -> String {
    format!("{TURN_KV_PREFIX}{session_key}")
}

/// A turn in progress, recorded when its messages enter the transcript and
/// removed once its reply was sent. Found by whoever acquires the session's
/// lease after it lapsed (at start-up, on SQLite), it means the turn was
/// killed midway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnMarker {
    /// The session key.
    pub key: String,
    /// The session the turn ran in.
    pub session_id: String,
    /// Where to tell the user.
    pub platform: String,
    /// The chat.
    pub chat_id: String,
    /// The message the turn answered (the notice replies to it).
    pub message_id: String,
    /// When the turn started.
    pub at_ms: u64,
    /// The bot (adapter's bot id) that served it: two bots of one platform
    /// on one database recover only their own turns. Empty in markers
    /// written before bots were told apart (any bot of the platform).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bot: String,
}

/// Whether [`Inbox::accept`] took the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// New: it is durable and held.
    New,
    /// Accepted before (a redelivery, possibly across a restart): dropped.
    Duplicate,
}

/// One accepted, not yet transcribed, user message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Arrival number (increasing within one process; resets are harmless
    /// because the inbox is emptied at start-up).
    pub id: u64,
    /// The session key it belongs to.
    pub key: String,
    /// Where it came from (to create the session if it has none).
    pub platform: String,
    /// The chat.
    pub chat_id: String,
    /// `true` for a DM.
    pub dm: bool,
    /// The sender.
    pub user_id: String,
    /// The text for the agent.
    pub text: String,
    /// When it was accepted (the transcript entry's timestamp).
    pub at_ms: u64,
    /// The platform's message id (a reply's target; empty if none). Absent
    /// in inboxes written before it was recorded.
    #[serde(default)]
    pub message_id: String,
    /// `false` once a newer message replaced it or `/stop` dropped it: it is
    /// transcribed ahead of its session's next message, not answered alone.
    #[serde(default = "yes")]
    pub answer: bool,
    /// Where it is stored (set when accepted or loaded).
    #[serde(skip)]
    pub db_key: String,
    /// Photos, voice notes and files of the message (SPEC X6), by their
    /// platform handles: downloaded when its turn starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<MediaRef>,
    /// The bot that accepted it (see [`TurnMarker::bot`]); empty: any bot
    /// of the platform (rows written before bots were told apart).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bot: String,
}

fn yes() -> bool {
    true
}

impl Pending {
    /// The transcript entry for this message as it was accepted: its text,
    /// and a note per medium it was sent with (a turn prepares media with
    /// [`crate::media`] instead; this is for messages no turn answers).
    pub fn entry(&self) -> LedgerEntry {
        let message = if self.media.is_empty() {
            Message::user(self.text.as_str())
        } else {
            crate::media::without_services(&self.text, &self.media).message
        };
        LedgerEntry::at(message, self.at_ms)
    }

    /// The event to run again after a restart.
    pub fn event(&self) -> MessageEvent {
        MessageEvent {
            message_id: self.message_id.clone(),
            text: self.text.clone(),
            source: self.source(),
            message_type: if self.media.is_empty() {
                MessageType::Text
            } else {
                MessageType::Mixed
            },
            media: self.media.clone(),
        }
    }

    /// The source, as far as the inbox remembers it (enough to create a
    /// session).
    pub fn source(&self) -> SessionSource {
        SessionSource {
            platform: self.platform.clone(),
            chat_id: self.chat_id.clone(),
            chat_type: if self.dm {
                ChatType::Dm
            } else {
                ChatType::Group
            },
            user_id: self.user_id.clone(),
            user_name: None,
            thread_id: None,
        }
    }
}

/// Why the inbox could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored value is not an inbox (written by something else, or
    /// damaged). Start-up stops rather than overwrite it: it may hold
    /// accepted messages.
    #[error("the stored gateway inbox ({INBOX_KV_PREFIX}*) is unreadable: {0}")]
    Corrupt(String),
}

/// The accepted messages not yet in a transcript, in arrival order.
pub struct Inbox {
    /// Its own connection; `None` for an in-memory store, where a crash
    /// loses the transcript too, so there is nothing to make durable.
    db: Option<Store>,
    /// This inbox's part of its keys ([`kv_key`]).
    writer: String,
    entries: VecDeque<Pending>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("durable", &self.db.is_some())
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl Inbox {
    /// An inbox that persists nothing (before start, or over an in-memory store).
    pub fn volatile() -> Self {
        Inbox {
            db: None,
            writer: String::new(),
            entries: VecDeque::new(),
        }
    }

    /// An inbox writing through its own connection to the runner's
    /// database (`Store::reopen`), or a volatile one for an in-memory
    /// store.
    pub fn with_store(store: Store) -> Self {
        if store.is_volatile() {
            return Self::volatile();
        }
        Inbox {
            db: Some(store),
            writer: writer_tag(),
            entries: VecDeque::new(),
        }
    }

    /// Opens the inbox's own connection to the SQLite database at `path`,
    /// or a volatile inbox for an in-memory store.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if path == Path::new(":memory:") || path.as_os_str().is_empty() {
            return Ok(Self::volatile());
        }
        Ok(Self::with_store(Store::open(path)?))
    }

    /// What previous holders of `platform`'s bot left (read when its lease
    /// is acquired, before it accepts anything), in arrival order. Entries
    /// of older versions (keyed by number alone) are included.
    pub fn load_left_over(&self, platform: &str, bot: &str) -> Result<Vec<Pending>, InboxError> {
        let Some(db) = &self.db else {
            return Ok(Vec::new());
        };
        let mut left = Vec::new();
        for (key, value) in db.kv_scan(INBOX_KV_PREFIX)? {
            let mut p: Pending = serde_json::from_str(&value)
                .map_err(|e| InboxError::Corrupt(format!("{key}: {e}")))?;
            if p.platform == platform && (p.bot.is_empty() || p.bot == bot) {
                p.db_key = key;
                left.push(p);
            }
        }
        // Rows of several processes (or of older versions, keyed by number
        // alone) are ordered by arrival time, then by number.
        left.sort_by_key(|p| (p.at_ms, p.id));
        Ok(left)
    }

    /// Forgets, in memory only, the waiting messages of `platform` (its
    /// bot's lease was lost: they stay stored for the next holder); returns
    /// their ids.
    pub fn forget_platform(&mut self, platform: &str) -> Vec<u64> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|p| p.platform == platform)
            .map(|p| p.id)
            .collect();
        self.entries.retain(|p| p.platform != platform);
        ids
    }

    /// Holds messages that are already durable (what a previous process
    /// left), so their turns find them.
    pub fn restore(&mut self, left: Vec<Pending>) {
        self.entries.extend(left);
    }

    /// Accepts `pending` unless its identity (`seen`, from [`seen_key`]) was
    /// accepted before: the message and its identity are written in one
    /// transaction, under `fences` (the bot's lease). On `Err` the message
    /// is still held in memory (and will be transcribed when its turn
    /// comes); only its durability failed — except for
    /// [`StoreError::Fenced`]: this process no longer serves the bot, and
    /// the message is not held (the platform will deliver it to the next
    /// holder).
    pub fn accept(
        &mut self,
        mut pending: Pending,
        seen: Option<&str>,
        fences: &[Fence],
    ) -> Result<Accepted, StoreError> {
        pending.db_key = kv_key(&pending.platform, &self.writer, pending.id);
        let written = match &mut self.db {
            None => Ok(true),
            Some(db) => match serde_json::to_string(&pending) {
                Ok(value) => {
                    let key = pending.db_key.clone();
                    let at = pending.at_ms.to_string();
                    let mut writes = Vec::with_capacity(2);
                    if let Some(seen) = seen {
                        writes.push(KvWrite::Claim {
                            key: seen,
                            value: &at,
                        });
                    }
                    writes.push(KvWrite::Set {
                        key: &key,
                        value: &value,
                    });
                    db.kv_commit_fenced(&writes, fences)
                }
                Err(e) => {
                    // Plain strings and integers always serialise; were it
                    // ever to fail, the message is still held in memory.
                    tracing::error!(error = %e, "could not serialise an inbox entry");
                    Ok(true)
                }
            },
        };
        match written {
            Ok(false) => Ok(Accepted::Duplicate),
            Ok(true) => {
                self.entries.push_back(pending);
                Ok(Accepted::New)
            }
            Err(e @ StoreError::Fenced { .. }) => Err(e),
            Err(e) => {
                self.entries.push_back(pending);
                Err(e)
            }
        }
    }

    /// Remembers `seen` (a command's identity) unless it was seen before:
    /// `Ok(false)` for a repeat. Commands are not queued here; this makes
    /// them run at most once, across restarts.
    pub fn claim(&mut self, seen: &str, now_ms: u64, fences: &[Fence]) -> Result<bool, StoreError> {
        let Some(db) = &mut self.db else {
            return Ok(true);
        };
        db.kv_commit_fenced(
            &[KvWrite::Claim {
                key: seen,
                value: &now_ms.to_string(),
            }],
            fences,
        )
    }

    /// Forgets seen keys older than `before_ms`; returns how many.
    pub fn prune_seen(&mut self, before_ms: u64) -> Result<usize, StoreError> {
        match &mut self.db {
            None => Ok(0),
            Some(db) => db.kv_prune_below(SEEN_KV_PREFIX, before_ms),
        }
    }

    /// Marks these messages as not to be answered on their own (replaced,
    /// or dropped by `/stop`), durably.
    pub fn mark_unanswered(&mut self, ids: &[u64]) -> Result<(), StoreError> {
        let mut changed = Vec::new();
        for p in self.entries.iter_mut().filter(|p| ids.contains(&p.id)) {
            if p.answer {
                p.answer = false;
                changed.push(p.clone());
            }
        }
        let Some(db) = &mut self.db else {
            return Ok(());
        };
        if changed.is_empty() {
            return Ok(());
        }
        let rows: Vec<(String, String)> = changed
            .iter()
            .filter_map(|p| Some((p.db_key.clone(), serde_json::to_string(p).ok()?)))
            .collect();
        let writes: Vec<KvWrite<'_>> = rows
            .iter()
            .map(|(key, value)| KvWrite::Set { key, value })
            .collect();
        db.kv_commit(&writes).map(|_| ())
    }

    /// The waiting messages of `key` that arrived before or with `upto`, in
    /// order (not removed: remove them once they are in the transcript).
    pub fn upto(&self, key: &str, upto: u64) -> Vec<Pending> {
        self.entries
            .iter()
            .filter(|p| p.key == key && p.id <= upto)
            .cloned()
            .collect()
    }

    /// Every waiting message, in order.
    pub fn all(&self) -> Vec<Pending> {
        self.entries.iter().cloned().collect()
    }

    /// Forgets these messages in memory only: a transaction on another
    /// connection already deleted them (the start of their turn).
    pub fn forget(&mut self, ids: &[u64]) {
        self.entries.retain(|p| !ids.contains(&p.id));
    }

    /// The highest arrival number held (0 when empty).
    pub fn max_id(&self) -> u64 {
        self.entries.iter().map(|p| p.id).max().unwrap_or(0)
    }

    /// Removes the messages with these ids (refused, or found already
    /// transcribed), durably.
    pub fn remove(&mut self, ids: &[u64]) -> Result<(), StoreError> {
        let keys: Vec<String> = self
            .entries
            .iter()
            .filter(|p| ids.contains(&p.id))
            .map(|p| p.db_key.clone())
            .collect();
        self.entries.retain(|p| !ids.contains(&p.id));
        if keys.is_empty() {
            return Ok(());
        }
        let Some(db) = &mut self.db else {
            return Ok(());
        };
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        db.kv_delete(&keys)
    }

    /// Whether nothing is written (an in-memory store).
    pub fn is_volatile(&self) -> bool {
        self.db.is_none()
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Whether `pending` is already in `transcript`: a user message with the
/// same text accepted in the same millisecond. Moving a message into the
/// transcript is one transaction now; inboxes left by versions that made it
/// two writes can hold a message already transcribed.
pub fn already_transcribed(transcript: &[LedgerEntry], pending: &Pending) -> bool {
    transcript.iter().rev().any(|e| {
        matches!(e.message, Message::User { .. })
            && e.meta.timestamp_ms == pending.at_ms
            && e.message.content() == Some(pending.text.as_str())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pending(id: u64, text: &str) -> Pending {
        Pending {
            id,
            key: format!("agent:main:test:dm:{}", id % 3),
            platform: "test".into(),
            chat_id: (id % 3).to_string(),
            dm: true,
            user_id: "u".into(),
            text: text.into(),
            at_ms: 1000 + id,
            message_id: format!("m{id}"),
            answer: true,
            db_key: String::new(),
            media: Vec::new(),
            bot: String::new(),
        }
    }

    fn seen(p: &Pending) -> Option<String> {
        seen_key(&p.platform, &p.chat_id, &p.message_id)
    }

    /// Issue 44 item 1, written before the fix: two gateways serving two
    /// different bots of one platform on ONE store each number their
    /// messages from 0; keyed `inbox.<platform>.<n>`, the second gateway's
    /// message 0 overwrote the first's row (this test failed so). The key
    /// now carries a writer tag unique to the process.
    #[test]
    fn two_gateways_of_one_platform_on_one_store_keep_both_waiting_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut first = Inbox::open(&path).unwrap();
        let mut second = Inbox::open(&path).unwrap();
        let mut a = pending(0, "for the family bot");
        a.chat_id = "alice".into();
        a.message_id = "a0".into();
        let mut b = pending(0, "for the work bot");
        b.chat_id = "bob".into();
        b.message_id = "b0".into();
        let (ka, kb) = (seen(&a), seen(&b));
        assert_eq!(first.accept(a, ka.as_deref(), &[]).unwrap(), Accepted::New);
        assert_eq!(second.accept(b, kb.as_deref(), &[]).unwrap(), Accepted::New);
        drop((first, second));

        let reopened = Inbox::open(&path).unwrap();
        let mut texts: Vec<String> = reopened
            .load_left_over("test", "")
            .unwrap()
            .into_iter()
            .map(|p| p.text)
            .collect();
        texts.sort();
        assert_eq!(texts, ["for the family bot", "for the work bot"]);
    }

    #[test]
    fn each_message_is_its_own_durable_row_and_comes_back_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut inbox = Inbox::open(&path).unwrap();
        // Ids past 9 check that key order is numeric order (zero padding).
        for id in 0..12 {
            let p = pending(id, &format!("m{id}"));
            let key = seen(&p);
            assert_eq!(inbox.accept(p, key.as_deref(), &[]).unwrap(), Accepted::New);
        }
        inbox.remove(&[1, 10]).unwrap();
        inbox.mark_unanswered(&[3]).unwrap();
        drop(inbox);

        let reopened = Inbox::open(&path).unwrap();
        let left = reopened.load_left_over("test", "").unwrap();
        let ids: Vec<u64> = left.iter().map(|p| p.id).collect();
        assert_eq!(ids, [0, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
        assert!(!left[2].answer, "the mark is durable");
        assert!(left.iter().filter(|p| p.id != 3).all(|p| p.answer));
        assert_eq!(left[0].event().message_id, "m0");
    }

    #[test]
    fn dedup_survives_a_restart_a_redelivered_message_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut first = Inbox::open(&path).unwrap();
        let p = pending(1, "hello");
        let key = seen(&p);
        assert_eq!(
            first.accept(p.clone(), key.as_deref(), &[]).unwrap(),
            Accepted::New
        );
        drop(first); // a kill: nothing else was written

        // The platform delivers it again (new arrival number, same identity).
        let mut second = Inbox::open(&path).unwrap();
        let again = Pending { id: 7, ..p };
        assert_eq!(
            second.accept(again, key.as_deref(), &[]).unwrap(),
            Accepted::Duplicate
        );
        let left = second.load_left_over("test", "").unwrap();
        assert_eq!(left.len(), 1, "stored once: {left:?}");
        assert_eq!(left[0].id, 1);
        assert!(second.is_empty(), "a duplicate is not held");

        // Same id in another chat or on another platform is another message.
        assert_ne!(seen_key("test", "2", "m1"), key);
        assert_ne!(seen_key("other", "1", "m1"), key);
        // No id, no identity.
        assert_eq!(seen_key("test", "1", ""), None);
        // Separators inside ids cannot make two identities collide.
        assert_ne!(seen_key("a", "b\",\"c", "d"), seen_key("a", "b", "c\",\"d"));
    }

    #[test]
    fn seen_ids_are_pruned_after_the_retention_and_commands_are_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut inbox = Inbox::open(&path).unwrap();
        let old = pending(1, "old"); // accepted at 1001
        let new = Pending {
            at_ms: 9_000,
            ..pending(2, "new")
        };
        for p in [old.clone(), new.clone()] {
            let key = seen(&p);
            inbox.accept(p, key.as_deref(), &[]).unwrap();
        }
        let cmd = seen_key("test", "1", "c1").unwrap();
        assert!(inbox.claim(&cmd, 9_500, &[]).unwrap());
        assert!(
            !inbox.claim(&cmd, 9_600, &[]).unwrap(),
            "a command runs once"
        );
        assert_eq!(inbox.prune_seen(5_000).unwrap(), 1);
        // The old identity is forgotten, the new one is not.
        let again = Pending {
            id: 10,
            ..old.clone()
        };
        assert_eq!(
            inbox.accept(again, seen(&old).as_deref(), &[]).unwrap(),
            Accepted::New
        );
        let again = Pending {
            id: 11,
            ..new.clone()
        };
        assert_eq!(
            inbox.accept(again, seen(&new).as_deref(), &[]).unwrap(),
            Accepted::Duplicate
        );
    }

    #[test]
    fn an_inbox_written_before_message_ids_were_recorded_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        // Keyed by number alone, as versions before leases wrote it.
        Store::open(&path)
            .unwrap()
            .kv_set(
                &format!("{INBOX_KV_PREFIX}{:020}", 4),
                r#"{"id":4,"key":"k","platform":"telegram","chat_id":"1","dm":true,"user_id":"1","text":"hi","at_ms":5}"#,
            )
            .unwrap();
        let inbox = Inbox::open(&path).unwrap();
        assert!(inbox.load_left_over("wecom", "").unwrap().is_empty());
        let left = inbox.load_left_over("telegram", "").unwrap();
        assert_eq!(left[0].db_key, format!("{INBOX_KV_PREFIX}{:020}", 4));
        assert_eq!(left[0].message_id, "");
        assert!(left[0].answer);
        assert_eq!(
            left[0].bot, "",
            "an old row belongs to any bot of its platform"
        );
        assert_eq!(inbox.load_left_over("telegram", "bot-b").unwrap().len(), 1);
    }

    /// Two bots of one platform on one database: each takes over only the
    /// messages it accepted itself (issue 44, SPEC X8).
    #[test]
    fn each_bot_of_a_platform_loads_only_its_own_left_over_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut inbox = Inbox::open(&path).unwrap();
        for (id, bot) in [(1, "bot-a"), (2, "bot-b"), (3, "bot-a")] {
            let p = Pending {
                bot: bot.into(),
                ..pending(id, &format!("for {bot}"))
            };
            assert_eq!(inbox.accept(p, None, &[]).unwrap(), Accepted::New);
        }
        let reopened = Inbox::open(&path).unwrap();
        let ids = |bot: &str| -> Vec<u64> {
            reopened
                .load_left_over("test", bot)
                .unwrap()
                .iter()
                .map(|p| p.id)
                .collect()
        };
        assert_eq!(ids("bot-a"), [1, 3]);
        assert_eq!(ids("bot-b"), [2]);
        assert!(ids("bot-c").is_empty());
    }

    #[test]
    fn a_damaged_entry_stops_start_up_instead_of_being_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Store::open(&path)
            .unwrap()
            .kv_set(&kv_key("test", "w", 7), "not json")
            .unwrap();
        let err = Inbox::open(&path)
            .unwrap()
            .load_left_over("test", "")
            .unwrap_err();
        assert!(matches!(err, InboxError::Corrupt(m) if m.contains("gateway.inbox.")));
    }
}
