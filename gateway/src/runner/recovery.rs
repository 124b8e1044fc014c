//! Start-up after a stop or a crash (E3, G11, X5), and the inbox's way into
//! transcripts.
//!
//! What a previous process left in the store decides what happens:
//! - a **turn marker** ([`TurnMarker`]) is a turn killed midway: its
//!   session is suspended (the next message starts fresh; the turn is not
//!   resumed, its tools may have acted) and its user gets
//!   [`RESTART_NOTICE`](super::RESTART_NOTICE) once, as a reply to the
//!   message it was answering;
//! - a message still in the **inbox** was accepted but its turn never began
//!   (nothing happened for it yet): it is queued again, in arrival order,
//!   before any adapter connects, and answered like a new one;
//! - **seen keys** older than the retention are pruned.

use std::collections::HashMap;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{KvWrite, SessionStatus, Store, StoreError};

use super::{Inner, StartError, lock};
use crate::inbox::{
    Inbox, Pending, TURN_KV_PREFIX, TurnMarker, already_transcribed, kv_key, turn_key,
};

/// What start-up found.
pub(super) struct Recovered {
    /// Turns killed midway: each user is owed a notice.
    pub(super) interrupted: Vec<TurnMarker>,
    /// Accepted messages to answer, in arrival order.
    pub(super) to_answer: Vec<Pending>,
}

impl Inner {
    /// Reads what a previous process left (see the module docs); opens the
    /// inbox's connection. Runs before any adapter connects.
    pub(super) fn recover(&self) -> Result<Recovered, StartError> {
        let path = self.store().path().to_path_buf();
        let mut inbox = Inbox::open(&path)?;
        let horizon = self
            .now()
            .saturating_sub(super::duration_ms(self.config.dedup_retention));
        match inbox.prune_seen(horizon) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(pruned = n, "forgot old accepted message ids"),
            Err(e) => tracing::warn!(error = %e, "could not prune old accepted message ids"),
        }
        let interrupted = self.suspend_interrupted_turns()?;
        let mut left = inbox.load_left_over()?;
        // Inboxes written before a turn's start was one transaction can
        // hold a message its session already has.
        let mut stale = Vec::new();
        {
            let store = self.store();
            for p in &left {
                if let Some(session) = store.active_session_for_key(&p.key)?
                    && already_transcribed(&store.load_transcript(&session.id)?, p)
                {
                    stale.push(p.id);
                }
            }
        }
        if !stale.is_empty() {
            inbox.remove(&stale)?;
            left.retain(|p| !stale.contains(&p.id));
        }
        let to_answer: Vec<Pending> = left.iter().filter(|p| p.answer).cloned().collect();
        if !left.is_empty() {
            tracing::warn!(
                answering = to_answer.len(),
                waiting = left.len() - to_answer.len(),
                "messages accepted by a previous run but never answered"
            );
        }
        // Arrival numbers continue after what is left: a new message must
        // never take the inbox key of an old one.
        let next = left.iter().map(|p| p.id).max().unwrap_or(0) + 1;
        self.next_pending
            .fetch_max(next, std::sync::atomic::Ordering::SeqCst);
        inbox.restore(left);
        let mut slot = lock(&self.inbox);
        for p in slot.all() {
            // Accepted before start (cannot happen: adapters connect after
            // this); keep them rather than drop them.
            if let Err(e) = inbox.accept(p, None) {
                tracing::error!(error = %e, "could not store an accepted message durably");
            }
        }
        *slot = inbox;
        Ok(Recovered {
            interrupted,
            to_answer,
        })
    }

    /// Suspends the session of every turn marker left behind (G11) and
    /// returns the markers; they are removed once their notice went out
    /// ([`Inner::forget_turn`]).
    fn suspend_interrupted_turns(&self) -> Result<Vec<TurnMarker>, StoreError> {
        let mut store = self.store();
        let mut markers = Vec::new();
        for (key, value) in store.kv_scan(TURN_KV_PREFIX)? {
            match serde_json::from_str::<TurnMarker>(&value) {
                Ok(marker) => markers.push(marker),
                Err(e) => {
                    tracing::error!(%key, error = %e, "unreadable turn marker dropped");
                    store.kv_delete(&[&key])?;
                }
            }
        }
        for marker in &markers {
            let active = store
                .session(&marker.session_id)?
                .is_some_and(|s| s.status == SessionStatus::Active);
            if active {
                store.set_status(&marker.session_id, SessionStatus::Suspended)?;
            }
            tracing::warn!(
                key = %marker.key,
                session = %marker.session_id,
                "a turn was killed midway; its session is suspended"
            );
        }
        Ok(markers)
    }

    /// Removes the marker of the turn of `key` (its reply or notice was
    /// handed to the adapter).
    pub(super) fn forget_turn(&self, key: &str) {
        if let Err(e) = self.store().kv_delete(&[&turn_key(key)]) {
            tracing::error!(key, error = %e, "could not clear a turn marker; a restart will send a needless notice");
        }
    }

    /// Moves the waiting messages of `key` that arrived up to inbox id
    /// `upto` into the transcript of `session_id`, in order, and — when
    /// `marker` is given — records the turn as running, all in ONE
    /// transaction with their removal from the inbox; returns what was
    /// appended.
    pub(super) fn transcribe_into(
        &self,
        store: &mut Store,
        key: &str,
        session_id: &str,
        upto: u64,
        marker: Option<&TurnMarker>,
        prepared: &HashMap<u64, Message>,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let pending = lock(&self.inbox).upto(key, upto);
        if pending.is_empty() && marker.is_none() {
            return Ok(Vec::new());
        }
        // A message whose media the turn prepared (SPEC X6) is stored as
        // prepared; the others as accepted.
        let entries: Vec<LedgerEntry> = pending
            .iter()
            .map(|p| match prepared.get(&p.id) {
                Some(message) => LedgerEntry::at(message.clone(), p.at_ms),
                None => p.entry(),
            })
            .collect();
        let inbox_keys: Vec<String> = pending.iter().map(|p| kv_key(p.id)).collect();
        let marker_key = turn_key(key);
        let marker_value = marker.and_then(|m| serde_json::to_string(m).ok());
        let mut writes: Vec<KvWrite<'_>> = inbox_keys
            .iter()
            .map(|k| KvWrite::Delete(k.as_str()))
            .collect();
        if let Some(value) = &marker_value {
            writes.push(KvWrite::Set {
                key: &marker_key,
                value,
            });
        }
        store.append_messages_with_kv(session_id, &entries, &writes)?;
        let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
        lock(&self.inbox).forget(&ids);
        Ok(entries)
    }

    /// The user message of a turn whose message was not in the inbox
    /// (cannot happen while ids are unique; kept so that an accepted message
    /// is never lost), stored with the turn's marker.
    pub(super) fn transcribe_missing(
        &self,
        store: &mut Store,
        session_id: &str,
        text: &str,
        now: u64,
        marker: &TurnMarker,
    ) -> Result<(), StoreError> {
        let key = turn_key(&marker.key);
        let value = serde_json::to_string(marker).unwrap_or_default();
        store.append_messages_with_kv(
            session_id,
            &[LedgerEntry::at(Message::user(text), now)],
            &[KvWrite::Set {
                key: &key,
                value: &value,
            }],
        )?;
        Ok(())
    }
}
