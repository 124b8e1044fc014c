//! Wake-ups between processes sharing a database (PostgreSQL
//! `LISTEN`/`NOTIFY`). The lease rows themselves are each backend's
//! (`sqlite/lease.rs`, `postgres/lease.rs`); see [`super::Store::lease_acquire`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One notification: its channel and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The channel it was sent on.
    pub channel: String,
    /// What was sent.
    pub payload: String,
}

/// Where a [`Listener`] delivers: called on the listener's own thread, so it
/// must return quickly (wake a task, set a flag). A [`Notification`] with an
/// empty channel means the listening connection was lost and re-established:
/// whatever was sent meanwhile is missed, so poll once.
pub type NotifySink = Arc<dyn Fn(Notification) + Send + Sync>;

/// Listening on some channels; stops when dropped (within a fraction of a
/// second, on its own thread).
pub struct Listener {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) channels: Vec<String>,
}

impl Listener {
    /// The channels listened on.
    pub fn channels(&self) -> &[String] {
        &self.channels
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
