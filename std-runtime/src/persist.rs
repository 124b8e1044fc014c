//! Storing a run's ledger *as it grows*, the same way in every front-end.
//!
//! A killed process keeps every finished step, above all the records of
//! tools that already acted (SPEC E3). An assistant message with tool calls
//! is held back until all its results are in and is then stored together
//! with them in one append: a stored transcript never holds a tool call
//! without its result, which a provider would reject on the next turn.
//! After a failed write nothing more is stored (a later entry must not
//! follow a gap); the caller should interrupt the run.
//!
//! A writer may carry fences ([`TurnWriter::fenced`]): every append then
//! checks, in its own transaction, that this process still holds the
//! session's lease (SPEC X8), so a turn that another gateway took over
//! cannot add to the transcript after the takeover; the write fails with
//! [`StoreError::Fenced`] and the writer stops like after any failure.
//!
//! A writer may also charge the run's spending accounts
//! ([`TurnWriter::charging`], issue 44): the additions for the model calls
//! of a batch go into the same transaction as the batch, so an account
//! never counts a call that was not stored, nor misses one that was.
//!
//! A compaction the run makes (SPEC X1) is recorded beside the originals
//! ([`TurnWriter::compacted`]); recording one can fail without harm (the
//! next load gives the uncompacted view, which the next turn compacts
//! again), so it does not stop the writer.

use std::sync::Mutex;

use hermes_core::{Compaction, LedgerEntry, Message};

use crate::spending::Charge;
use crate::store::{Fence, KvWrite, Store, StoreError};
use crate::sync::lock;

/// Appends one run's new ledger entries to one session.
#[derive(Debug)]
pub struct TurnWriter<'a> {
    store: &'a Mutex<Store>,
    session_id: &'a str,
    skip_first_user: bool,
    fences: Vec<Fence>,
    seen_first: bool,
    buffered: Vec<LedgerEntry>,
    results_due: usize,
    failed: Option<StoreError>,
    compaction_failed: Option<StoreError>,
    charger: Option<Charger>,
}

/// What a batch of entries costs, as additions to accounts.
pub type ChargeFn = Box<dyn Fn(&[LedgerEntry]) -> Vec<Charge> + Send>;

struct Charger(ChargeFn);

impl std::fmt::Debug for Charger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Charger")
    }
}

impl<'a> TurnWriter<'a> {
    /// A writer that stores every entry it is given.
    pub fn new(store: &'a Mutex<Store>, session_id: &'a str) -> Self {
        TurnWriter {
            store,
            session_id,
            skip_first_user: false,
            fences: Vec::new(),
            seen_first: false,
            buffered: Vec::new(),
            results_due: 0,
            failed: None,
            compaction_failed: None,
            charger: None,
        }
    }

    /// Charges every batch's model calls to accounts, in the batch's
    /// transaction (see the module docs).
    pub fn charging(mut self, charge: ChargeFn) -> Self {
        self.charger = Some(Charger(charge));
        self
    }

    /// Skips the run's first entry when it is the user message: the caller
    /// stored it before the model was called (the gateway's inbox).
    pub fn skipping_stored_user_message(mut self) -> Self {
        self.skip_first_user = true;
        self
    }

    /// Makes every append conditional on `fences` (see the module docs).
    pub fn fenced(mut self, fences: Vec<Fence>) -> Self {
        self.fences = fences;
        self
    }

    /// Handles one appended entry; `false` once storing has failed.
    pub fn append(&mut self, entry: &LedgerEntry) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let first = !self.seen_first;
        self.seen_first = true;
        if first && self.skip_first_user && matches!(entry.message, Message::User { .. }) {
            return true;
        }
        match &entry.message {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                // A batch is never still open here: the core answers every
                // call of a message before the model is called again.
                self.buffered.push(entry.clone());
                self.results_due = tool_calls.len();
                return true;
            }
            Message::Tool { .. } if self.results_due > 0 => {
                self.buffered.push(entry.clone());
                self.results_due -= 1;
                if self.results_due > 0 {
                    return true;
                }
            }
            _ => self.buffered.push(entry.clone()),
        }
        let batch = std::mem::take(&mut self.buffered);
        let charges = self
            .charger
            .as_ref()
            .map(|c| (c.0)(&batch))
            .unwrap_or_default();
        let writes: Vec<KvWrite<'_>> = charges.iter().map(Charge::write).collect();
        let mut store = lock(self.store);
        let written = if self.fences.is_empty() && writes.is_empty() {
            store.append_messages(self.session_id, &batch)
        } else {
            // Adds never abandon a batch: only claims and consumes do.
            store
                .append_messages_with_kv_fenced(self.session_id, &batch, &writes, &self.fences)
                .map(|_| ())
        };
        drop(store);
        match written {
            Ok(()) => true,
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }

    /// Records a compaction of the run's ledger (SPEC X1). The core
    /// compacts only between model calls, when every entry so far has been
    /// handed to [`TurnWriter::append`], so the store's view is the one that
    /// was compacted. Returns whether it was recorded.
    pub fn compacted(&mut self, compaction: &Compaction) -> bool {
        if self.failed.is_some() || !self.buffered.is_empty() {
            return false;
        }
        if let Some(why) = &compaction.summarizer_failure {
            // Once per failure: during the cooldown that follows, digests
            // are made without asking, and without a word.
            tracing::warn!(
                session = self.session_id,
                "{why}; compacted with an automatic digest instead, and the summariser is left alone for a while"
            );
        }
        let recorded = lock(self.store).record_compaction(self.session_id, compaction);
        match recorded {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(session = self.session_id, error = %e, "could not record a compaction; the next turn compacts again");
                self.compaction_failed = Some(e);
                false
            }
        }
    }

    /// Why the last compaction could not be recorded, if it could not.
    pub fn compaction_failure(&self) -> Option<&StoreError> {
        self.compaction_failed.as_ref()
    }

    /// The write that failed, if one did.
    pub fn failure(&self) -> Option<&StoreError> {
        self.failed.as_ref()
    }

    /// Entries held back waiting for tool results (never the case after a
    /// complete run: the core answers every call).
    pub fn unfinished(&self) -> usize {
        self.buffered.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::NewSession;
    use hermes_core::ToolCall;

    fn session(store: &Mutex<Store>) -> String {
        store
            .lock()
            .unwrap()
            .create_session(&NewSession::default())
            .unwrap()
            .id
    }

    fn stored(store: &Mutex<Store>, id: &str) -> Vec<Message> {
        store
            .lock()
            .unwrap()
            .load_transcript(id)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect()
    }

    #[test]
    fn a_batchs_model_calls_are_charged_with_it_and_a_refused_batch_charges_nothing() {
        use crate::spending::SpendingLimits;
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let id = session(&store);
        let charge = |entries: &[LedgerEntry]| {
            let tokens: u64 = entries
                .iter()
                .filter_map(|e| e.meta.usage)
                .map(|u| u.prompt_tokens + u.completion_tokens)
                .sum();
            SpendingLimits::default().charge("telegram:7", 0, tokens, 0)
        };
        let mut answer = LedgerEntry::at(Message::assistant("a"), 0);
        answer.meta.usage = Some(hermes_core::Usage {
            prompt_tokens: 30,
            completion_tokens: 12,
            ..hermes_core::Usage::default()
        });
        let mut w = TurnWriter::new(&store, &id).charging(Box::new(charge));
        assert!(w.append(&answer));
        let key = "usage/tok/d:1970-01-01/telegram:7";
        assert_eq!(
            store.lock().unwrap().kv_get(key).unwrap().as_deref(),
            Some("42")
        );
        assert_eq!(
            store
                .lock()
                .unwrap()
                .kv_get("usage/tok/m:1970-01/bot")
                .unwrap()
                .as_deref(),
            Some("42")
        );
        // A fence that no longer holds: neither the message nor its charge.
        let fence = Fence {
            name: "session/x".into(),
            owner: "gone".into(),
            epoch: 9,
        };
        let mut fenced = TurnWriter::new(&store, &id)
            .fenced(vec![fence])
            .charging(Box::new(charge));
        assert!(!fenced.append(&answer));
        assert_eq!(
            store.lock().unwrap().kv_get(key).unwrap().as_deref(),
            Some("42")
        );
        assert_eq!(stored(&store, &id).len(), 1);
    }

    #[test]
    fn a_tool_call_is_stored_with_all_its_results() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let id = session(&store);
        let mut w = TurnWriter::new(&store, &id).skipping_stored_user_message();
        let call = |n: &str| ToolCall::new(n, "t", "{}");
        // The user message was stored by the caller: skipped.
        assert!(w.append(&LedgerEntry::at(Message::user("u"), 0)));
        assert!(stored(&store, &id).is_empty());
        let asks = Message::Assistant {
            content: None,
            tool_calls: vec![call("a"), call("b")],
        };
        assert!(w.append(&LedgerEntry::at(asks.clone(), 0)));
        assert!(w.append(&LedgerEntry::at(Message::tool("a", "ra"), 0)));
        // Not yet: the call's second result is missing.
        assert!(stored(&store, &id).is_empty());
        assert_eq!(w.unfinished(), 2);
        assert!(w.append(&LedgerEntry::at(Message::tool("b", "rb"), 0)));
        assert_eq!(
            stored(&store, &id),
            vec![asks, Message::tool("a", "ra"), Message::tool("b", "rb")]
        );
        assert!(w.append(&LedgerEntry::at(Message::assistant("done"), 0)));
        assert_eq!(stored(&store, &id).len(), 4);
        assert!(w.failure().is_none() && w.unfinished() == 0);
    }

    #[test]
    fn without_skipping_the_user_message_is_stored_too() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let id = session(&store);
        let mut w = TurnWriter::new(&store, &id);
        assert!(w.append(&LedgerEntry::at(Message::user("u"), 0)));
        assert_eq!(stored(&store, &id), vec![Message::user("u")]);
    }

    #[test]
    fn a_failure_stops_storing() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let mut w = TurnWriter::new(&store, "no-such-session").skipping_stored_user_message();
        assert!(w.append(&LedgerEntry::at(Message::user("u"), 0)));
        assert!(!w.append(&LedgerEntry::at(Message::assistant("a"), 0)));
        assert!(matches!(w.failure(), Some(StoreError::SessionNotFound(_))));
        // Nothing after a gap.
        assert!(!w.append(&LedgerEntry::at(Message::assistant("b"), 0)));
    }
}
