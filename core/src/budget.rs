//! The iteration budget: a shared wallet of model calls (SPEC L3).
//!
//! Cloning an [`IterationBudget`] gives another handle to the *same* remaining
//! count. A sub-agent started by a tool receives a clone of its parent's
//! handle, so whatever the child spends is gone for the parent too: a parent
//! with 80 left whose child spends 15 continues with 65.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

/// The default number of model calls one run may make.
pub const DEFAULT_MAX_ITERATIONS: u32 = 90;

/// A thread-safe, shared count of the model calls still allowed.
#[derive(Clone, Debug)]
pub struct IterationBudget {
    remaining: Arc<AtomicU32>,
    total: u32,
}

impl IterationBudget {
    /// A new wallet holding `total` model calls.
    pub fn new(total: u32) -> Self {
        IterationBudget {
            remaining: Arc::new(AtomicU32::new(total)),
            total,
        }
    }

    /// Takes one unit for one model call. Returns `false` (and takes nothing)
    /// when the wallet is empty. Never underflows, also under contention.
    pub fn try_consume(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Model calls still allowed, across every handle to this wallet.
    pub fn remaining(&self) -> u32 {
        self.remaining.load(Ordering::Acquire)
    }

    /// The size the wallet was created with.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Model calls already made from this wallet, by any handle.
    pub fn used(&self) -> u32 {
        self.total.saturating_sub(self.remaining())
    }

    /// Whether the wallet is empty.
    pub fn is_exhausted(&self) -> bool {
        self.remaining() == 0
    }

    /// Whether two handles draw from the same wallet.
    pub fn shares_wallet_with(&self, other: &IterationBudget) -> bool {
        Arc::ptr_eq(&self.remaining, &other.remaining)
    }
}

impl Default for IterationBudget {
    fn default() -> Self {
        IterationBudget::new(DEFAULT_MAX_ITERATIONS)
    }
}
