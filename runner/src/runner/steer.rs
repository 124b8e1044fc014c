//! Steer mode (SPEC Y5): `[gateway] busy_mode = "steer"`, and `/steer TEXT`
//! in any mode. A message for a session whose turn is running is handed to
//! that turn, whose loop gives it to the model at its next call as a user
//! message (`hermes_core::Steering`), instead of interrupting the turn or
//! waiting for it.
//!
//! **Nothing is lost or stored twice.** A steered message is accepted like
//! any other: durably, into the inbox, with its identity (E3, X5). The turn
//! holds only its inbox id. When the loop takes it, the observer stores the
//! user message and consumes its inbox entry in one transaction, under the
//! session's lease (instead of the turn writer, which stores the other
//! entries). What the loop did not take before the run ended (it arrived
//! during the last model call, or the run stopped) goes back into the
//! session's queue at its place of arrival and is answered by a turn of its
//! own. After a crash, a message not yet taken is still in the inbox and is
//! answered at the next start like any other.
//!
//! Media are not steered (they need the turn's preparation): a photo or a
//! voice note waits in the queue.

use std::collections::VecDeque;
use std::sync::Mutex;

use hermes_core::{LedgerEntry, Message, Steering};
use hermes_runtime::store::{Fence, KvWrite, StoreError};

use super::{Inner, TurnCtl, Work, lock};
use crate::event::MessageEvent;

/// Told (at most once per notice interval) when a message was handed to
/// the running turn.
pub const STEER_NOTICE: &str =
    "↪ Passed to the current reply: I'll take it into account at my next step.";

/// A message handed to a running turn.
struct Steered {
    /// Its inbox id.
    id: u64,
    event: MessageEvent,
}

#[derive(Default)]
struct SteerState {
    /// The turn's run has ended (or never began): nothing more is taken.
    closed: bool,
    /// Accepted, waiting for the run's next model call.
    waiting: Vec<Steered>,
    /// Given to the loop, not yet appended to its ledger.
    handed: VecDeque<Steered>,
}

/// The steered messages of one turn (part of its [`TurnCtl`]).
#[derive(Default)]
pub(super) struct SteerBox(Mutex<SteerState>);

impl SteerBox {
    /// Hands `event` (inbox id `id`) to the turn; `false` when the turn no
    /// longer takes any, or already holds `max` waiting (the caller queues
    /// it instead, where the queue's own bound applies).
    pub(super) fn offer(&self, event: &MessageEvent, id: u64, max: usize) -> bool {
        let mut st = lock(&self.0);
        if st.closed || !event.media.is_empty() || st.waiting.len() >= max {
            return false;
        }
        st.waiting.push(Steered {
            id,
            event: event.clone(),
        });
        true
    }

    /// Drops what waits (`/stop`, `/new`); returns their inbox ids.
    pub(super) fn drop_waiting(&self) -> Vec<u64> {
        lock(&self.0).waiting.drain(..).map(|s| s.id).collect()
    }

    /// Closes the box; returns what the loop never took.
    fn close(&self) -> Vec<Steered> {
        let mut st = lock(&self.0);
        st.closed = true;
        let mut left: Vec<Steered> = st.handed.drain(..).collect();
        left.append(&mut st.waiting);
        left
    }

    /// The oldest message given to the loop and not yet appended, if
    /// `text` is its text.
    fn next_handed(&self, text: &str) -> Option<u64> {
        let mut st = lock(&self.0);
        if st.handed.front().is_some_and(|s| s.event.text == text) {
            st.handed.pop_front().map(|s| s.id)
        } else {
            None
        }
    }
}

impl Steering for SteerBox {
    fn take(&self) -> Vec<String> {
        let mut st = lock(&self.0);
        let taken: Vec<Steered> = st.waiting.drain(..).collect();
        let texts = taken.iter().map(|s| s.event.text.clone()).collect();
        st.handed.extend(taken);
        texts
    }
}

/// Stores the steered messages of one run as the loop appends them.
pub(super) struct SteerWriter<'a> {
    pub(super) inner: &'a Inner,
    pub(super) ctl: &'a TurnCtl,
    pub(super) key: &'a str,
    pub(super) session_id: &'a str,
    pub(super) fences: Vec<Fence>,
    pub(super) failed: bool,
}

impl SteerWriter<'_> {
    /// Stores `entry` if it is a steered message: `Some(stored)`; `None`
    /// for any other entry (the turn writer's).
    pub(super) fn claim(&mut self, entry: &LedgerEntry) -> Option<bool> {
        let Message::User { content, .. } = &entry.message else {
            return None;
        };
        let id = self.ctl.steer.next_handed(content)?;
        if self.failed {
            return Some(false);
        }
        match self
            .inner
            .transcribe_steered(self.key, self.session_id, id, entry, &self.fences)
        {
            Ok(()) => Some(true),
            Err(e) => {
                tracing::error!(key = self.key, error = %e, "could not store a steered message; stopping the run");
                self.failed = true;
                Some(false)
            }
        }
    }
}

impl Inner {
    /// Appends a steered message to the transcript and consumes its inbox
    /// entry, in one transaction under the session's lease.
    fn transcribe_steered(
        &self,
        key: &str,
        session_id: &str,
        id: u64,
        entry: &LedgerEntry,
        fences: &[Fence],
    ) -> Result<(), StoreError> {
        let mut store = self.store();
        let pending = lock(&self.inbox)
            .upto(key, id)
            .into_iter()
            .find(|p| p.id == id);
        let volatile = lock(&self.inbox).is_volatile();
        let writes: Vec<KvWrite<'_>> = pending
            .iter()
            .filter(|_| !volatile)
            .map(|p| KvWrite::Consume(p.db_key.as_str()))
            .collect();
        let mut entry = entry.clone();
        if let Some(p) = &pending {
            entry.meta.timestamp_ms = p.at_ms;
        }
        if !store.append_messages_with_kv_fenced(session_id, &[entry], &writes, fences)? {
            tracing::warn!(
                key,
                id,
                "a steered message was taken by another gateway first"
            );
        }
        lock(&self.inbox).forget(&[id]);
        Ok(())
    }

    /// The turn of `key` is over (or never ran): it takes no more steered
    /// messages, and those it did not take go back into the queue at their
    /// place of arrival — the last as the message to answer, the earlier
    /// ones transcribed with it.
    pub(super) fn end_turn(&self, key: &str, ctl: &TurnCtl) {
        let mut state = lock(&self.queues.state);
        let left = ctl.steer.close();
        let Some(slot) = state.sessions.get_mut(key) else {
            return;
        };
        slot.turn = None;
        let mut left = left.into_iter();
        let Some(last) = left.next_back() else {
            return;
        };
        let earlier: Vec<u64> = left.map(|s| s.id).collect();
        let at = slot
            .queue
            .iter()
            .position(|w| match w {
                Work::Message(_, id) => *id > last.id,
                Work::Command(_, _, position) => *position > last.id,
            })
            .unwrap_or(slot.queue.len());
        slot.queue.insert(at, Work::Message(last.event, last.id));
        drop(state);
        if !earlier.is_empty()
            && let Err(e) = hermes_runtime::bridge::wait_outside_runtime(|| {
                lock(&self.inbox).mark_unanswered(&earlier)
            })
        {
            tracing::error!(key, error = %e, "could not mark steered messages in the inbox");
        }
    }
}
