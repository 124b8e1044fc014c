//! Running the calls of one model turn (SPEC Y6): the loop hands every turn
//! whose calls are all read-only to a [`ToolBatchRunner`]. The core is
//! synchronous and has no threads, so its runner, [`SequentialBatch`], runs
//! them one after the other; the std runtime supplies one that runs them
//! concurrently. Whatever the runner, results come back in call order.

use alloc::string::String;
use alloc::vec::Vec;

use super::{ToolContext, ToolError, ToolRegistry};
use crate::budget::IterationBudget;
use crate::interrupt::InterruptFlag;

/// One call of a batch, as the model wrote it.
#[derive(Clone, Copy, Debug)]
pub struct BatchCall<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// The raw JSON arguments.
    pub arguments: &'a str,
    /// The id of the call being answered.
    pub tool_call_id: &'a str,
}

/// What a batch gives back for one call: `None` when the call was not
/// started because the interrupt flag was set (the loop answers it with
/// the skip placeholder, SPEC L11).
pub type BatchResult = Option<Result<String, ToolError>>;

/// Runs a batch of read-only calls.
pub trait ToolBatchRunner: Send + Sync {
    /// Runs every call of `calls` through [`ToolRegistry::dispatch`] and
    /// returns one [`BatchResult`] per call, in the order of `calls`. A
    /// call not yet started when `interrupt` is set is not started.
    fn run_batch(
        &self,
        tools: &ToolRegistry,
        calls: &[BatchCall<'_>],
        budget: &IterationBudget,
        interrupt: &InterruptFlag,
    ) -> Vec<BatchResult>;
}

/// Runs the calls one after the other (the core's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct SequentialBatch;

impl ToolBatchRunner for SequentialBatch {
    fn run_batch(
        &self,
        tools: &ToolRegistry,
        calls: &[BatchCall<'_>],
        budget: &IterationBudget,
        interrupt: &InterruptFlag,
    ) -> Vec<BatchResult> {
        calls
            .iter()
            .map(|call| run_one(tools, call, budget, interrupt))
            .collect()
    }
}

/// Runs one call of a batch unless the run was interrupted: the building
/// block of every runner.
pub fn run_one(
    tools: &ToolRegistry,
    call: &BatchCall<'_>,
    budget: &IterationBudget,
    interrupt: &InterruptFlag,
) -> BatchResult {
    if interrupt.is_set() {
        return None;
    }
    let ctx = ToolContext {
        budget,
        interrupt,
        tool_call_id: call.tool_call_id,
    };
    Some(tools.dispatch(call.name, call.arguments, &ctx))
}
