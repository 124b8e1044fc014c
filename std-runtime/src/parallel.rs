//! Read-only tool calls of one model turn, run at the same time (SPEC Y6).
//!
//! The core hands a batch to a [`ToolBatchRunner`] only when every call in
//! it is read-only. This runner starts up to [`MAX_PARALLEL`] scoped
//! threads that take calls off a shared counter, so the batch takes about
//! as long as its slowest call. Each thread checks the interrupt flag
//! before it starts a call ([`run_one`]): after an interrupt no new call
//! starts, the running ones finish, and the rest come back unrun. Results
//! are put back in call order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use hermes_core::tool::batch::run_one;
use hermes_core::{
    BatchCall, BatchResult, InterruptFlag, IterationBudget, ToolBatchRunner, ToolRegistry,
};

use crate::sync::lock;

/// The most calls of one batch that run at once.
pub const MAX_PARALLEL: usize = 8;

/// Runs a batch on up to `limit` threads.
#[derive(Clone, Copy, Debug)]
pub struct ParallelBatch {
    limit: usize,
}

impl Default for ParallelBatch {
    fn default() -> Self {
        ParallelBatch {
            limit: MAX_PARALLEL,
        }
    }
}

impl ParallelBatch {
    /// A runner with at most `limit` (at least 1) calls at once.
    pub fn with_limit(limit: usize) -> Self {
        ParallelBatch {
            limit: limit.max(1),
        }
    }
}

impl ToolBatchRunner for ParallelBatch {
    fn run_batch(
        &self,
        tools: &ToolRegistry,
        calls: &[BatchCall<'_>],
        budget: &IterationBudget,
        interrupt: &InterruptFlag,
    ) -> Vec<BatchResult> {
        let workers = self.limit.min(calls.len());
        if workers <= 1 {
            return calls
                .iter()
                .map(|c| run_one(tools, c, budget, interrupt))
                .collect();
        }
        let next = AtomicUsize::new(0);
        let slots: Vec<Mutex<BatchResult>> = calls.iter().map(|_| Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(call) = calls.get(i) else { break };
                        let result = run_one(tools, call, budget, interrupt);
                        if let (Some(slot), Some(r)) = (slots.get(i), result) {
                            // A slot is written by one thread only; a
                            // poisoned lock still holds a usable value.
                            let mut guard = lock(slot);
                            *guard = Some(r);
                        }
                    }
                });
            }
        });
        slots
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }
}
