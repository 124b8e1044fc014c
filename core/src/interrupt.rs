//! The interrupt flag (SPEC L11).
//!
//! Interrupting sets a flag and kills nothing. The loop looks at it at three
//! points: at every streamed event, after every tool call, and at the start of
//! every iteration. Whoever holds a clone (the CLI's Ctrl-C handler, the
//! gateway when a newer message arrives) can set it from any thread.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, Ordering};

/// A shared, thread-safe "please stop" flag.
#[derive(Clone, Debug, Default)]
pub struct InterruptFlag(Arc<AtomicBool>);

impl InterruptFlag {
    /// A flag that is not set.
    pub fn new() -> Self {
        InterruptFlag::default()
    }

    /// Asks the running turn to stop at its next check point.
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether an interrupt was requested.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Clears the flag. The agent does this when a run starts, so an interrupt
    /// aimed at the previous run cannot stop the next one.
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }
}
