//! Start-up after a stop or a crash (E3, G11, X5).
//!
//! What a previous process (or a previous holder of the bot's lease, on
//! another machine: `cluster.rs`) left in the store decides what happens:
//! - a **turn marker** ([`TurnMarker`](crate::inbox::TurnMarker)) is a
//!   turn killed midway: its session is suspended (the next message starts
//!   fresh; the turn is not resumed, its tools may have acted) and its user
//!   gets [`RESTART_NOTICE`](super::RESTART_NOTICE) once, as a reply to the
//!   message it was answering;
//! - a message still in the **inbox** was accepted but its turn never began
//!   (nothing happened for it yet): it is queued again, in arrival order,
//!   before any adapter connects, and answered like a new one;
//! - **seen keys** older than the retention are pruned.

use std::sync::{Arc, Mutex};

use super::{Inner, StartError, lock};
use crate::inbox::Inbox;

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
        self.prune_usage();
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
}
