//! Durable acceptance of user messages (SPEC E3).
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
//! moved into the transcript, in arrival order, when their turn begins (or
//! when they are stored without running: `/new`, shutdown). A message that
//! a newer one replaced (interrupt mode) or that `/stop` dropped stays here
//! and is moved, ahead of the next message, by the next turn of its session:
//! it was accepted, so it is kept, just not answered on its own (the model
//! sees two consecutive user messages, which is valid).
//!
//! # Crashes
//! At start-up, before crash recovery, whatever the inbox still holds is
//! appended to its session's transcript ([`crate::runner`]). Moving a
//! message is two writes (transcript, then inbox); a crash between them
//! leaves the message in both, so recovery skips an entry whose text and
//! timestamp are already a user message of the transcript.
//!
//! The inbox uses its own SQLite connection to the same database file, so
//! accepting a message never waits for the runner's store mutex (a turn may
//! hold it), only — briefly — for SQLite's write lock.

use std::collections::VecDeque;
use std::path::Path;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::event::{ChatType, SessionSource};

/// The prefix of the key-value keys holding the inbox: one key per message
/// (`gateway.inbox.00000000000000000042`), so accepting or transcribing a
/// message writes only that message, however many are waiting.
pub const INBOX_KV_PREFIX: &str = "gateway.inbox.";

/// The key of the message with arrival number `id` (zero-padded: key order
/// is arrival order).
fn kv_key(id: u64) -> String {
    format!("{INBOX_KV_PREFIX}{id:020}")
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
}

impl Pending {
    /// The transcript entry for this message.
    pub fn entry(&self) -> LedgerEntry {
        LedgerEntry::at(Message::user(self.text.as_str()), self.at_ms)
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
            entries: VecDeque::new(),
        }
    }

    /// Opens the inbox's own connection to the database at `path` (the
    /// runner's store), or a volatile inbox for an in-memory store.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if path == Path::new(":memory:") || path.as_os_str().is_empty() {
            return Ok(Self::volatile());
        }
        Ok(Inbox {
            db: Some(Store::open(path)?),
            entries: VecDeque::new(),
        })
    }

    /// What a previous process left (read at start-up, before anything is
    /// accepted), in arrival order.
    pub fn load_left_over(&self) -> Result<Vec<Pending>, InboxError> {
        let Some(db) = &self.db else {
            return Ok(Vec::new());
        };
        db.kv_scan(INBOX_KV_PREFIX)?
            .into_iter()
            .map(|(key, value)| {
                serde_json::from_str(&value).map_err(|e| InboxError::Corrupt(format!("{key}: {e}")))
            })
            .collect()
    }

    /// Forgets what a previous process left (after it was transcribed).
    pub fn clear_left_over(&mut self) -> Result<(), StoreError> {
        self.entries.clear();
        let Some(db) = &mut self.db else {
            return Ok(());
        };
        let keys: Vec<String> = db
            .kv_scan(INBOX_KV_PREFIX)?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        db.kv_delete(&keys)
    }

    /// Accepts `pending`. On `Err` it is still held in memory (and will be
    /// transcribed when its turn comes); only its durability failed.
    pub fn push(&mut self, pending: Pending) -> Result<(), StoreError> {
        let written = match &mut self.db {
            None => Ok(()),
            Some(db) => match serde_json::to_string(&pending) {
                Ok(value) => db.kv_set(&kv_key(pending.id), &value),
                Err(e) => {
                    // Plain strings and integers always serialise; were it
                    // ever to fail, the message is still held in memory.
                    tracing::error!(error = %e, "could not serialise an inbox entry");
                    Ok(())
                }
            },
        };
        self.entries.push_back(pending);
        written
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

    /// Removes the messages with these ids (they are transcribed, or were
    /// refused).
    pub fn remove(&mut self, ids: &[u64]) -> Result<(), StoreError> {
        let before = self.entries.len();
        self.entries.retain(|p| !ids.contains(&p.id));
        if self.entries.len() == before {
            return Ok(());
        }
        let Some(db) = &mut self.db else {
            return Ok(());
        };
        let keys: Vec<String> = ids.iter().map(|&id| kv_key(id)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        db.kv_delete(&keys)
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

/// Whether `pending` is already in `transcript` (a crash between the
/// transcript append and the inbox update): a user message with the same
/// text accepted in the same millisecond.
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
        }
    }

    #[test]
    fn each_message_is_its_own_durable_row_and_comes_back_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut inbox = Inbox::open(&path).unwrap();
        // Ids past 9 check that key order is numeric order (zero padding).
        for id in 0..12 {
            inbox.push(pending(id, &format!("m{id}"))).unwrap();
        }
        inbox.remove(&[1, 10]).unwrap();
        drop(inbox);

        let reopened = Inbox::open(&path).unwrap();
        let left: Vec<u64> = reopened
            .load_left_over()
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(left, [0, 2, 3, 4, 5, 6, 7, 8, 9, 11]);

        let mut reopened = reopened;
        reopened.clear_left_over().unwrap();
        assert!(
            Inbox::open(&path)
                .unwrap()
                .load_left_over()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_damaged_entry_stops_start_up_instead_of_being_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Store::open(&path)
            .unwrap()
            .kv_set(&kv_key(7), "not json")
            .unwrap();
        let err = Inbox::open(&path).unwrap().load_left_over().unwrap_err();
        assert!(matches!(err, InboxError::Corrupt(m) if m.contains("gateway.inbox.")));
    }
}
