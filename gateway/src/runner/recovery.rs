//! Start-up after a stop or a crash (E3, G11, X5), and the inbox's way into
//! transcripts.
//!
//! What a previous process (or a previous holder of the bot's lease, on
//! another machine: `cluster.rs`) left in the store decides what happens:
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
use std::sync::{Arc, Mutex};

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{Fence, KvWrite, Store, StoreError};

use super::{Inner, StartError, lock};
use crate::inbox::{Inbox, TurnMarker, turn_key};

impl Inner {
    /// Start-up (blocking): the inbox's and the leases' own connections to
    /// the database, and the pruning of old seen keys. What earlier
    /// processes left is taken over per bot, when its lease is acquired
    /// ([`Inner::take_over_platform`]).
    pub(super) fn prepare(&self) -> Result<(), StartError> {
        let (inbox_store, lease_store) = {
            let store = self.store();
            if store.is_volatile() {
                // Another connection would be another (empty) database.
                self.cluster
                    .volatile
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                (store.reopen()?, None)
            } else {
                (store.reopen()?, Some(store.reopen()?))
            }
        };
        if let Some(lease_store) = lease_store {
            let _ = self.cluster.store.set(Arc::new(Mutex::new(lease_store)));
        }
        let mut inbox = Inbox::with_store(inbox_store);
        let horizon = self
            .now()
            .saturating_sub(super::duration_ms(self.config.dedup_retention));
        match inbox.prune_seen(horizon) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(pruned = n, "forgot old accepted message ids"),
            Err(e) => tracing::warn!(error = %e, "could not prune old accepted message ids"),
        }
        let mut slot = lock(&self.inbox);
        for p in slot.all() {
            // Accepted before start (cannot happen: adapters connect after
            // this); keep them rather than drop them.
            if let Err(e) = inbox.accept(p, None, &[]) {
                tracing::error!(error = %e, "could not store an accepted message durably");
            }
        }
        *slot = inbox;
        Ok(())
    }

    /// Moves the waiting messages of `key` that arrived up to inbox id
    /// `upto` into the transcript of `session_id`, in order, and — when
    /// `marker` is given — records the turn as running, all in ONE
    /// transaction with their removal from the inbox, under `fences` (the
    /// session's and the bot's leases); returns what was appended. Each
    /// inbox entry is *consumed*: if another gateway took it first, nothing
    /// is written and the turn must not run ([`Transcribed::Taken`]).
    // The store and session, what to move, the turn's marker, what media
    // made of the messages (X6) and the leases (X8) the writes are fenced by.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transcribe_into(
        &self,
        store: &mut Store,
        key: &str,
        session_id: &str,
        upto: u64,
        marker: Option<&TurnMarker>,
        prepared: &HashMap<u64, Message>,
        fences: &[Fence],
    ) -> Result<Transcribed, StoreError> {
        let pending = lock(&self.inbox).upto(key, upto);
        if pending.is_empty() && marker.is_none() {
            return Ok(Transcribed::Moved(Vec::new()));
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
        let volatile = lock(&self.inbox).is_volatile();
        let inbox_keys: Vec<String> = pending.iter().map(|p| p.db_key.clone()).collect();
        let marker_key = turn_key(key);
        let marker_value = marker.and_then(|m| serde_json::to_string(m).ok());
        let mut writes: Vec<KvWrite<'_>> = inbox_keys
            .iter()
            .filter(|_| !volatile)
            .map(|k| KvWrite::Consume(k.as_str()))
            .collect();
        if let Some(value) = &marker_value {
            writes.push(KvWrite::Set {
                key: &marker_key,
                value,
            });
        }
        let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
        if !store.append_messages_with_kv_fenced(session_id, &entries, &writes, fences)? {
            lock(&self.inbox).forget(&ids);
            return Ok(Transcribed::Taken);
        }
        lock(&self.inbox).forget(&ids);
        Ok(Transcribed::Moved(entries))
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
        fences: &[Fence],
    ) -> Result<(), StoreError> {
        let key = turn_key(&marker.key);
        let value = serde_json::to_string(marker).unwrap_or_default();
        store.append_messages_with_kv_fenced(
            session_id,
            &[LedgerEntry::at(Message::user(text), now)],
            &[KvWrite::Set {
                key: &key,
                value: &value,
            }],
            fences,
        )?;
        Ok(())
    }
}

/// What [`Inner::transcribe_into`] did.
pub(super) enum Transcribed {
    /// The messages are in the transcript (and the turn marked running).
    Moved(Vec<LedgerEntry>),
    /// Another gateway consumed them first: nothing was written.
    Taken,
}
