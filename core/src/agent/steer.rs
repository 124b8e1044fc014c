//! Steering a running turn (SPEC Y5): text the user sends while the agent
//! works is handed to the model at its next call, as a user message, instead
//! of interrupting the run or waiting for it to end.
//!
//! The loop asks its [`Steering`] source for waiting text at one point only:
//! at the top of an iteration, after the wallet paid for the next call and
//! before that call is made. There the ledger never ends in an assistant
//! message whose tool calls are still unanswered (the previous iteration
//! answered every call before it ended), so a user message appended there
//! keeps the transcript valid for every provider: an assistant message with
//! tool calls is always followed directly by all its results. Text that
//! arrives during the run's last call is not taken; the caller keeps it
//! (the gateway answers it as a message of its own).
//!
//! The source is the caller's: the core has no lock, so it only asks. A
//! source that hands out text must have made it durable first if it wants
//! it to survive a crash (the gateway's does, see `runner/steer.rs`).

use alloc::string::String;
use alloc::vec::Vec;

use super::Run;
use crate::message::{LedgerEntry, Message};

/// Where text sent during a run comes from.
pub trait Steering {
    /// Takes the text waiting to be injected, oldest first; empty when none.
    /// Each piece becomes one user message.
    fn take(&self) -> Vec<String>;
}

/// No steering: the default of every run.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSteering;

impl Steering for NoSteering {
    fn take(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Run<'_> {
    /// Appends the waiting steer text as user messages; returns how many.
    /// Called only where no tool call is unanswered (see the module docs).
    pub(super) fn take_steers(&mut self) -> usize {
        let texts = self.steering.take();
        let n = texts.len();
        for text in texts {
            let entry = LedgerEntry::at(Message::user(text), self.now());
            self.push(entry);
        }
        n
    }
}
