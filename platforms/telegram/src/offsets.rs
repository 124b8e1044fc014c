//! Where the `getUpdates` offset lives between polls and across restarts.
//!
//! Telegram forgets an update only once a later `getUpdates` names an offset
//! past it. The adapter saves the next offset after it has handed a batch to
//! the handler, so a restart resumes exactly after the last handled update:
//! nothing is lost (unsaved updates are fetched again) and nothing handled is
//! repeated (saved ones are acknowledged by the first poll).

use std::sync::Mutex;

/// Persistence for the next `getUpdates` offset (last handled `update_id` + 1).
pub trait OffsetStore: Send + Sync {
    /// The saved offset, if any.
    fn load(&self) -> Option<i64>;
    /// Records `offset`. Failures are the store's to report (log); the adapter
    /// keeps polling with the in-memory offset either way.
    fn save(&self, offset: i64);

    /// Records `offset` only if `fence` (the bot's lease) still holds;
    /// `false` when it does not (another process serves the bot now). The
    /// default, for stores with no leases, just saves.
    fn save_fenced(&self, offset: i64, _fence: &hermes_runtime::store::Fence) -> bool {
        self.save(offset);
        true
    }
}

/// An offset kept in memory only: survives a reconnect of the same adapter
/// value, not a process restart. Useful when no store is configured.
#[derive(Debug, Default)]
pub struct MemoryOffsets(Mutex<Option<i64>>);

impl MemoryOffsets {
    /// An empty store (the first poll starts from Telegram's oldest update).
    pub fn new() -> Self {
        Self::default()
    }
}

impl OffsetStore for MemoryOffsets {
    fn load(&self) -> Option<i64> {
        match self.0.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn save(&self, offset: i64) {
        match self.0.lock() {
            Ok(mut g) => *g = Some(offset),
            Err(poisoned) => *poisoned.into_inner() = Some(offset),
        }
    }
}
