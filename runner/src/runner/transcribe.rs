//! The inbox's way into transcripts: a turn's accepted messages move from
//! the inbox into the session's transcript in one fenced transaction with
//! their removal from the inbox (E3, X8).

use std::collections::HashMap;

use hermes_core::{LedgerEntry, Message};
use hermes_runtime::store::{Fence, KvWrite, Store, StoreError};

use super::{Inner, lock};
use crate::cron_chat::{PendingNote, note_prefix};
use crate::inbox::{TurnMarker, turn_key};

impl Inner {
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
        // Notices of background processes that ended since the last turn
        // go first (they came before these messages), and only with a
        // message: the last entry is the one the turn answers.
        let notes = if pending.is_empty() {
            Vec::new()
        } else {
            pending_notes(store, session_id)?
        };
        // A message whose media the turn prepared (SPEC X6) is stored as
        // prepared; the others as accepted.
        let entries: Vec<LedgerEntry> = notes
            .iter()
            .map(|(_, entry)| entry.clone())
            .chain(pending.iter().map(|p| match prepared.get(&p.id) {
                Some(message) => LedgerEntry::at(message.clone(), p.at_ms),
                None => p.entry(),
            }))
            .collect();
        let volatile = lock(&self.inbox).is_volatile();
        let inbox_keys: Vec<String> = pending.iter().map(|p| p.db_key.clone()).collect();
        let marker_key = turn_key(key);
        let marker_value = marker.and_then(|m| serde_json::to_string(m).ok());
        let mut writes: Vec<KvWrite<'_>> = inbox_keys
            .iter()
            .filter(|_| !volatile)
            .map(|k| KvWrite::Consume(k.as_str()))
            .chain(notes.iter().map(|(k, _)| KvWrite::Delete(k.as_str())))
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

/// The background notices waiting for `session_id`'s next turn, oldest
/// first, with their keys (`crate::cron_chat`; written by the gateway's scheduler).
fn pending_notes(
    store: &Store,
    session_id: &str,
) -> Result<Vec<(String, LedgerEntry)>, StoreError> {
    let mut notes: Vec<(String, LedgerEntry)> = Vec::new();
    for (key, value) in store.kv_scan(&note_prefix(session_id))? {
        match serde_json::from_str::<PendingNote>(&value) {
            Ok(note) => {
                let message = Message::user(note.message_text());
                notes.push((key, LedgerEntry::at(message, note.at_ms)));
            }
            Err(e) => tracing::warn!(%key, error = %e, "background: unreadable note skipped"),
        }
    }
    notes.sort_by_key(|(_, entry)| entry.meta.timestamp_ms);
    Ok(notes)
}

/// What [`Inner::transcribe_into`] did.
pub(super) enum Transcribed {
    /// The messages are in the transcript (and the turn marked running).
    Moved(Vec<LedgerEntry>),
    /// Another gateway consumed them first: nothing was written.
    Taken,
}
