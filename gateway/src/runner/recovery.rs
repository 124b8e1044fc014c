//! Crash recovery and the inbox's way into transcripts: what a previous
//! process left (E3, G11), and what shutdown stores without running.

use std::collections::HashSet;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{Store, StoreError};

use super::{CRASH_WINDOW, Inner, StartError, duration_ms, lock};
use crate::event::MessageEvent;
use crate::inbox::{Inbox, Pending, already_transcribed};

impl Inner {
    /// Suspends sessions left mid-run by a crash; returns their keys.
    pub(super) fn recover_crashed(&self) -> Result<Vec<String>, StoreError> {
        let mut store = self.store();
        let ids = store.suspend_recent_unclean(duration_ms(CRASH_WINDOW))?;
        let mut keys = Vec::new();
        for id in ids {
            if let Some(key) = store.session(&id)?.and_then(|s| s.session_key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// Transcribes `event` (inbox id `id`) without running it (shutdown).
    pub(super) fn store_only(
        &self,
        key: &str,
        event: &MessageEvent,
        id: u64,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut notices = Vec::new();
        let was_suspended = lock(&self.state).suspended_keys.remove(key);
        let mut store = self.store();
        let session = self.resolve_session(
            &mut store,
            key,
            &event.source,
            now,
            was_suspended,
            &mut notices,
        )?;
        let added = self.transcribe_into(&mut store, key, &session.id, id)?;
        if added.is_empty() {
            // Not in the inbox (cannot happen while ids are unique; kept so
            // an accepted message is never silently lost).
            store.append_messages(
                &session.id,
                &[LedgerEntry::at(Message::user(event.text.as_str()), now)],
            )?;
        }
        Ok(())
    }

    /// Moves the waiting messages of `key` that arrived up to inbox id
    /// `upto` into the transcript of `session_id`, in order, in one append;
    /// returns what was appended. They leave the inbox only once the append
    /// succeeded (a crash in between is resolved at start-up, see
    /// [`crate::inbox`]).
    pub(super) fn transcribe_into(
        &self,
        store: &mut Store,
        key: &str,
        session_id: &str,
        upto: u64,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let pending = lock(&self.inbox).upto(key, upto);
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<LedgerEntry> = pending.iter().map(Pending::entry).collect();
        store.append_messages(session_id, &entries)?;
        let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
        if let Err(e) = lock(&self.inbox).remove(&ids) {
            // They are in the transcript; at worst a crash before the next
            // inbox write makes start-up check them again (and skip them).
            tracing::error!(key, error = %e, "could not update the inbox");
        }
        Ok(entries)
    }

    /// Start-up: transcribes what a previous process accepted but never
    /// transcribed, into the session each message was for.
    pub(super) fn recover_inbox(&self) -> Result<(), StartError> {
        let path = self.store().path().to_path_buf();
        let mut inbox = Inbox::open(&path)?;
        let left = inbox.load_left_over()?;
        if !left.is_empty() {
            let mut store = self.store();
            let default_model = self.factory.default_model();
            let mut restored = 0usize;
            for p in &left {
                let session = match store.active_session_for_key(&p.key)? {
                    Some(s) => s,
                    None => store.create_session(&Self::new_session_spec(
                        &p.key,
                        &p.source(),
                        &default_model,
                    ))?,
                };
                let transcript = store.load_transcript(&session.id)?;
                if !already_transcribed(&transcript, p) {
                    store.append_messages(&session.id, &[p.entry()])?;
                    restored += 1;
                }
            }
            drop(store);
            inbox.clear_left_over()?;
            tracing::warn!(
                restored,
                "transcribed messages accepted by a previous run but never answered"
            );
        }
        let mut slot = lock(&self.inbox);
        if !slot.is_empty() {
            // Accepted before start (cannot happen: adapters connect after
            // this); keep them rather than drop them.
            for p in slot.all() {
                if let Err(e) = inbox.push(p) {
                    tracing::error!(error = %e, "could not store an accepted message durably");
                }
            }
        }
        *slot = inbox;
        Ok(())
    }

    /// Shutdown, after every worker finished: transcribes every message
    /// still in the inbox (accepted, never run).
    pub(super) fn flush_all_pending(&self) {
        let pending = lock(&self.inbox).all();
        let mut done = HashSet::new();
        for p in pending {
            if !done.insert(p.key.clone()) {
                continue;
            }
            let now = self.now();
            let was_suspended = lock(&self.state).suspended_keys.remove(&p.key);
            let mut store = self.store();
            let result = self
                .resolve_session(
                    &mut store,
                    &p.key,
                    &p.source(),
                    now,
                    was_suspended,
                    &mut Vec::new(),
                )
                .and_then(|session| {
                    self.transcribe_into(&mut store, &p.key, &session.id, u64::MAX)
                });
            if let Err(e) = result {
                tracing::error!(key = %p.key, error = %e, "could not store a waiting message at shutdown; it stays in the inbox for the next start");
            }
        }
    }
}
