//! The queue stage: each session with work has a queue and at most one
//! running turn (G6); at most `max_workers` turns run at once across all
//! sessions; workers wait at the gate until start-up has told the users of
//! interrupted turns, and the last worker to leave wakes a graceful stop.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hermes_core::InterruptFlag;
use hermes_runtime::sync::lock;
use tokio::sync::{Notify, Semaphore, watch};

use super::progress::StreamEvent;
use crate::command::Command;
use crate::event::MessageEvent;

/// The queues, the workers' bound, and the signals around them.
pub(super) struct Queues {
    /// The sessions with work. Lock order: store, inbox, then this.
    pub(super) state: Mutex<State>,
    /// Turns running at once, across all sessions.
    pub(super) workers: Arc<Semaphore>,
    /// Woken whenever a session worker exits (for graceful stop).
    pub(super) idle: Notify,
    /// Open once start-up has told the users of interrupted turns (or
    /// shutdown began): workers wait for it, so messages left by a previous
    /// process are answered after the adapters connected.
    pub(super) gate: watch::Sender<bool>,
}

impl Queues {
    pub(super) fn new(max_workers: usize) -> Self {
        Queues {
            state: Mutex::new(State {
                sessions: HashMap::new(),
                last_notice: HashMap::new(),
                active_workers: 0,
            }),
            workers: Arc::new(Semaphore::new(max_workers.max(1))),
            idle: Notify::new(),
            gate: watch::Sender::new(false),
        }
    }
}

/// The queues' state: each session with work, its queue and its running
/// turn (one run per session, G6), and the busy notices. Held only for
/// short, non-blocking sections, and never while taking the store or inbox
/// lock (lock order: store, inbox, state).
pub(super) struct State {
    pub(super) sessions: HashMap<String, Slot>,
    /// When each busy session last got the interrupting/queued notice.
    pub(super) last_notice: HashMap<String, u64>,
    pub(super) active_workers: usize,
}

/// A session with work: its queue and its running turn.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) queue: VecDeque<Work>,
    /// The running turn, if a turn (not a command) is in progress.
    pub(super) turn: Option<Arc<TurnCtl>>,
}

pub(super) enum Work {
    /// An accepted message and its inbox id.
    Message(MessageEvent, u64),
    /// A command, and the inbox id the next accepted message would get (so
    /// `/new` knows which waiting messages came before it).
    Command(Command, MessageEvent, u64),
}

/// Interrupt control of one turn.
///
/// The agent clears its interrupt flag when a run starts (so an old
/// interrupt cannot stop a new run); an interrupt that arrives between
/// dispatch and that clear would be lost. So the request is also latched
/// here, and the turn driver re-applies it on every event (the view's
/// `stop_requested`) — the first being the user message, right after the
/// clear.
#[derive(Default)]
pub(super) struct TurnCtl {
    requested: AtomicBool,
    flag: Mutex<Option<InterruptFlag>>,
    /// The turn's reply preview, while it runs: a message the runner sends
    /// to the chat meanwhile (an approval question) ends it, so the answer
    /// comes as a new message below, not as an edit of one above.
    pub(super) preview: Mutex<Option<tokio::sync::mpsc::UnboundedSender<StreamEvent>>>,
    /// Messages handed to the running turn (steer mode, SPEC Y5).
    pub(super) steer: super::steer::SteerBox,
}

impl TurnCtl {
    pub(super) fn interrupt(&self) {
        self.requested.store(true, Ordering::SeqCst);
        if let Some(flag) = lock(&self.flag).as_ref() {
            flag.interrupt();
        }
    }

    pub(super) fn attach(&self, flag: InterruptFlag) {
        *lock(&self.flag) = Some(flag);
    }

    pub(super) fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Another message goes to the chat: the preview stops where it is.
    pub(super) fn break_preview(&self) {
        if let Some(tx) = lock(&self.preview).as_ref() {
            let _ = tx.send(StreamEvent::Break);
        }
    }
}

/// Removes the waiting messages (not commands) of a slot; returns their
/// inbox ids (they stay in the inbox, marked not to be answered alone).
pub(super) fn drop_queued_messages(slot: &mut Slot) -> Vec<u64> {
    let mut dropped = Vec::new();
    slot.queue.retain(|w| match w {
        Work::Message(_, id) => {
            dropped.push(*id);
            false
        }
        Work::Command(..) => true,
    });
    dropped
}
