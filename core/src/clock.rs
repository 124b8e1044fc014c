//! Time, as told by the caller. The core reads no clock of its own.

/// A source of wall-clock time for ledger timestamps.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// A clock that always says `0`: for callers that have no time source.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoClock;

impl Clock for NoClock {
    fn now_ms(&self) -> u64 {
        0
    }
}
