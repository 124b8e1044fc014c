//! The turn driver: what every front end does around one run of the core's
//! loop, written once (issue 40). The CLI's chat and its background runs,
//! the gateway's runner, scheduled jobs and the API server each hand it an
//! agent, the user's message, the history, a budget and a [`TurnWriter`]
//! for the session. The driver runs the loop and
//!
//! - stores every entry as the run produces it, so a killed process keeps
//!   each finished step (SPEC E3; the writer's rules: a tool call is stored
//!   with its results, fenced by the session's lease, charged to spending
//!   accounts in the same transaction);
//! - records the run's compactions beside the originals (SPEC X1);
//! - stops the run when the store can no longer follow (a full disk, a lost
//!   lease): no tool acts unrecorded, and the transcript stays valid;
//! - shows the front end each event after storing what it carries.
//!
//! - interrupts the run whenever the front end's view says a stop was asked
//!   for, also one asked for before the run began.
//!
//! What a front end adds — its display, a spending watch, steering — is its
//! [`TurnView`]; what it makes of the end — its reply, its notice, taking
//! an unanswered turn back — it reads from [`Driven`].

use hermes_core::{
    Agent, AgentEvent, AgentObserver, InterruptFlag, IterationBudget, LedgerEntry, Message,
    NoSteering, RunOutcome, Steering,
};

use crate::persist::TurnWriter;
use crate::store::StoreError;

/// A front end's part in a turn.
pub trait TurnView {
    /// Sees every event of the run, after the driver stored what it
    /// carries.
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        let _ = event;
    }

    /// Whether the front end asked the run to stop. The core clears the
    /// interrupt flag when a run starts (an interrupt aimed at an earlier
    /// run must not stop this one), so a stop asked for just before the run
    /// began would be lost; the driver asks this at every event and
    /// interrupts the run when it is `true`.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Stores one entry the run appended; `false` stops the run. The
    /// default hands it to the session's writer; the runner's steering
    /// stores the messages it fed into the run itself (SPEC Y5).
    fn store(&mut self, entry: &LedgerEntry, writer: &mut TurnWriter<'_>) -> bool {
        writer.append(entry)
    }
}

/// The view of a run nobody watches: background runs, scheduled jobs.
#[derive(Debug, Default)]
pub struct Unwatched;

impl TurnView for Unwatched {}

/// What a driven turn came to.
#[derive(Debug)]
pub struct Driven<'w> {
    /// The run's outcome, as the core's loop returned it.
    pub outcome: RunOutcome,
    /// The session's writer after the run: [`Driven::store_failure`] and
    /// what it held back.
    pub writer: TurnWriter<'w>,
}

impl Driven<'_> {
    /// The write that failed and stopped the run, if one did (a
    /// [`StoreError::Fenced`] when another gateway took the session over).
    pub fn store_failure(&self) -> Option<&StoreError> {
        self.writer.failure()
    }

    /// Whether the run added an answer (see [`RunOutcome::answered`]).
    pub fn answered(&self) -> bool {
        self.outcome.answered()
    }
}

/// Runs one turn of `agent`: `user` after `history`, drawing from `budget`,
/// storing through `writer`, shown to `view`.
pub fn drive<'w>(
    agent: &Agent,
    user: Message,
    history: Vec<LedgerEntry>,
    budget: &IterationBudget,
    writer: TurnWriter<'w>,
    view: &mut dyn TurnView,
) -> Driven<'w> {
    drive_steered(agent, user, history, budget, writer, view, &NoSteering)
}

/// [`drive`], giving the model what the user sends meanwhile (SPEC Y5).
pub fn drive_steered<'w>(
    agent: &Agent,
    user: Message,
    history: Vec<LedgerEntry>,
    budget: &IterationBudget,
    writer: TurnWriter<'w>,
    view: &mut dyn TurnView,
    steering: &dyn Steering,
) -> Driven<'w> {
    let mut driving = Driving {
        writer,
        flag: agent.interrupt_flag(),
        view,
    };
    let outcome = agent.run_steered(user, history, budget, &mut driving, steering);
    Driven {
        outcome,
        writer: driving.writer,
    }
}

/// The observer the core's loop sees: storage first, then the view.
struct Driving<'w, 'v> {
    writer: TurnWriter<'w>,
    flag: &'v InterruptFlag,
    view: &'v mut dyn TurnView,
}

impl AgentObserver for Driving<'_, '_> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        if !self.flag.is_set() && self.view.stop_requested() {
            self.flag.interrupt();
        }
        match event {
            // The transcript can no longer follow the run: stop it rather
            // than do work (tool side effects) that would go unrecorded.
            AgentEvent::Appended(entry) if !self.view.store(entry, &mut self.writer) => {
                self.flag.interrupt();
            }
            AgentEvent::Compacted(compaction) => {
                // A compaction that could not be recorded is made again by
                // the next turn; the run goes on.
                self.writer.compacted(compaction);
            }
            _ => {}
        }
        self.view.on_event(event);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Mutex;

    use hermes_core::ToolCall;

    use crate::store::Store;

    #[test]
    fn a_failed_write_interrupts_the_run() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let flag = InterruptFlag::new();
        let mut view = Unwatched;
        let mut driving = Driving {
            writer: TurnWriter::new(&store, "no-such-session").skipping_stored_user_message(),
            flag: &flag,
            view: &mut view,
        };
        driving.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::user("u"),
            0,
        )));
        assert!(!flag.is_set(), "the stored user message is skipped");
        let call = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("a", "t", "{}")],
        };
        driving.on_event(&AgentEvent::Appended(&LedgerEntry::at(call, 0)));
        assert!(!flag.is_set(), "a tool call waits for its result");
        driving.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::tool("a", "r"),
            0,
        )));
        assert!(flag.is_set(), "no further tool may act unrecorded");
        assert!(driving.writer.failure().is_some());
    }

    struct Stopping;

    impl TurnView for Stopping {
        fn stop_requested(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_stop_the_view_asks_for_interrupts_the_run_at_the_next_event() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let flag = InterruptFlag::new();
        let mut view = Stopping;
        let mut driving = Driving {
            writer: TurnWriter::new(&store, "no-such-session"),
            flag: &flag,
            view: &mut view,
        };
        driving.on_event(&AgentEvent::ModelCall {
            iteration: 1,
            remaining: 0,
        });
        assert!(flag.is_set());
    }
}
