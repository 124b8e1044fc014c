//! Intake: the one handler adapters call — duplicates, the allow-list,
//! commands, durable acceptance into the inbox, and the session queues.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use tokio::runtime::{Handle, RuntimeFlavor};

use super::{
    INTERRUPT_NOTICE, Inner, NOTICE_INTERVAL, QUEUE_NOTICE, REFUSAL_INTERVAL, Slot, State, Work,
    duration_ms, lock, refusal_text,
};
use crate::command::{Command, HELP, parse_command};
use crate::config::BusyMode;
use crate::event::{ChatType, MessageEvent};
use crate::inbox::Pending;
use crate::session::session_key;

/// Removes the waiting messages (not commands) of a slot; returns how many.
pub(super) fn drop_queued_messages(slot: &mut Slot) -> usize {
    let before = slot.queue.len();
    slot.queue.retain(|w| !matches!(w, Work::Message(..)));
    before - slot.queue.len()
}

impl Inner {
    /// Sends `text` in the background (notices, refusals, command replies).
    pub(super) fn reply_later(self: &Arc<Self>, event: &MessageEvent, text: String) {
        let inner = Arc::clone(self);
        let chat = event.source.chat_id.clone();
        let platform = event.source.platform.clone();
        let reply_to = event.message_id.clone();
        self.spawn(async move {
            inner.send(&platform, &chat, &text, Some(&reply_to)).await;
        });
    }

    pub(super) fn handle_event(self: &Arc<Self>, event: MessageEvent) {
        if self.closed.load(Ordering::SeqCst) {
            tracing::info!(platform = %event.source.platform, "gateway stopped; event not accepted");
            return;
        }
        let now = self.now();
        let source = &event.source;
        let mut state = lock(&self.state);
        if !state
            .dedup
            .first_sighting(&source.platform, &source.chat_id, &event.message_id, now)
        {
            tracing::debug!(platform = %source.platform, id = %event.message_id, "duplicate dropped");
            return;
        }
        if !self.config.allow.allows(&source.platform, &source.user_id) {
            tracing::warn!(platform = %source.platform, user = %source.user_id, "message from a user not on the allow-list");
            let who = (source.platform.clone(), source.user_id.clone());
            let recently = state
                .last_refusal
                .get(&who)
                .is_some_and(|t| now.saturating_sub(*t) < duration_ms(REFUSAL_INTERVAL));
            if !recently {
                if state.last_refusal.len() > 10_000 {
                    state.last_refusal.clear();
                }
                state.last_refusal.insert(who, now);
                drop(state);
                self.reply_later(&event, refusal_text(&source.user_id));
            }
            return;
        }
        let key = session_key(source, self.config.group_sessions_per_user);
        let position = self.next_pending.load(Ordering::SeqCst);
        match parse_command(&event.text) {
            None => {
                drop(state);
                self.accept_message(key, event, now);
            }
            Some(Command::Help) => {
                drop(state);
                self.reply_later(&event, HELP.to_owned());
            }
            Some(Command::Unknown(word)) => {
                drop(state);
                self.reply_later(
                    &event,
                    format!("Unknown command /{word}. Send /help for the list."),
                );
            }
            Some(Command::Stop) => {
                let text = match state.sessions.get_mut(&key) {
                    Some(slot) => {
                        let dropped = drop_queued_messages(slot);
                        match &slot.turn {
                            Some(turn) => {
                                turn.interrupt();
                                "Stopping the current reply.".to_owned()
                            }
                            None if dropped > 0 => "Dropped the waiting messages.".to_owned(),
                            None => "Nothing is running.".to_owned(),
                        }
                    }
                    None => "Nothing is running.".to_owned(),
                };
                drop(state);
                self.reply_later(&event, text);
            }
            Some(Command::Status) => {
                let (running, waiting) = state.sessions.get(&key).map_or((false, 0), |s| {
                    (
                        s.turn.is_some(),
                        s.queue
                            .iter()
                            .filter(|w| matches!(w, Work::Message(..)))
                            .count(),
                    )
                });
                let cached = state.cache.contains(&key);
                drop(state);
                self.status_later(event, key, running, waiting, cached);
            }
            Some(Command::New) => {
                // The user abandons the conversation: stop what runs for it
                // and what waits, then reset in order.
                if let Some(slot) = state.sessions.get_mut(&key) {
                    drop_queued_messages(slot);
                    if let Some(turn) = &slot.turn {
                        turn.interrupt();
                    }
                }
                self.push_work(state, key, Work::Command(Command::New, event, position));
            }
            Some(cmd @ (Command::Model(_) | Command::Undo | Command::Compress(_))) => {
                self.push_work(state, key, Work::Command(cmd, event, position));
            }
        }
    }

    /// Makes a message durable (E3, [`crate::inbox`]) and then queues it,
    /// before the handler returns.
    ///
    /// This blocks briefly on SQLite. Adapters call the handler from their
    /// tokio tasks, so on a multi-thread runtime the write runs under
    /// [`tokio::task::block_in_place`]: the worker's other tasks move to
    /// another thread meanwhile instead of stalling. Elsewhere (a plain
    /// thread, a blocking-pool thread, a current-thread runtime, where
    /// `block_in_place` is not allowed) it simply runs.
    pub(super) fn accept_message(self: &Arc<Self>, key: String, event: MessageEvent, now: u64) {
        let accept = || {
            let mut inbox = lock(&self.inbox);
            // Taken under the inbox lock, so inbox order is arrival order.
            let id = self.next_pending.fetch_add(1, Ordering::SeqCst);
            let source = &event.source;
            let pending = Pending {
                id,
                key: key.clone(),
                platform: source.platform.clone(),
                chat_id: source.chat_id.clone(),
                dm: source.chat_type == ChatType::Dm,
                user_id: source.user_id.clone(),
                text: event.text.clone(),
                at_ms: now,
            };
            if let Err(e) = inbox.push(pending) {
                // Still held in memory and transcribed when its turn comes;
                // only a crash before then would lose it.
                tracing::error!(key, error = %e, "could not store an accepted message durably");
            }
            let state = lock(&self.state);
            if !self.enqueue_message(state, key, event, id, now)
                && let Err(e) = inbox.remove(&[id])
            {
                tracing::error!(error = %e, "could not drop a refused message from the inbox");
            }
        };
        let multi_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(accept);
        } else {
            accept();
        }
    }

    /// Queues an accepted message; `false` when it was refused (queue full).
    pub(super) fn enqueue_message(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        key: String,
        event: MessageEvent,
        id: u64,
        now: u64,
    ) -> bool {
        // While stopping, nothing is replaced or refused: every accepted
        // message is stored (E3) by the worker, in order, and none runs, so
        // the queue bound (which limits waiting *turns*) does not apply.
        let stopping = self.stopping.load(Ordering::SeqCst);
        let busy_mode = if stopping {
            BusyMode::Queue
        } else {
            self.config.busy_mode
        };
        let max_queued = self.config.max_queued;
        let Some(slot) = state.sessions.get_mut(&key) else {
            self.push_work(state, key, Work::Message(event, id));
            return true;
        };
        let notice = match busy_mode {
            BusyMode::Interrupt => {
                // One buffered slot: a newer message replaces the waiting one.
                // The replaced one stays in the inbox: it was accepted, and
                // the next turn transcribes it ahead of this one.
                drop_queued_messages(slot);
                slot.queue.push_back(Work::Message(event.clone(), id));
                match &slot.turn {
                    Some(turn) => {
                        turn.interrupt();
                        Some(INTERRUPT_NOTICE)
                    }
                    None => None,
                }
            }
            BusyMode::Queue => {
                let waiting = slot
                    .queue
                    .iter()
                    .filter(|w| matches!(w, Work::Message(..)))
                    .count();
                if waiting >= max_queued && !stopping {
                    drop(state);
                    self.reply_later(
                        &event,
                        format!(
                            "Too many messages are waiting ({waiting}); this one was not queued. Send it again later, or /stop."
                        ),
                    );
                    return false;
                }
                slot.queue.push_back(Work::Message(event.clone(), id));
                slot.turn.is_some().then_some(QUEUE_NOTICE)
            }
        };
        let Some(text) = notice else { return true };
        let last = state.last_notice.get(&key).copied();
        if last.is_some_and(|t| now.saturating_sub(t) < duration_ms(NOTICE_INTERVAL)) {
            return true;
        }
        if state.last_notice.len() > 10_000 {
            let horizon = duration_ms(NOTICE_INTERVAL);
            state
                .last_notice
                .retain(|_, t| now.saturating_sub(*t) < horizon);
        }
        state.last_notice.insert(key, now);
        drop(state);
        self.reply_later(&event, text.to_owned());
        true
    }

    /// Queues work for `key`, starting the session's worker if it has none.
    ///
    /// A slot exists exactly while its worker runs: the worker removes it,
    /// under the state lock, when it finds the queue empty.
    pub(super) fn push_work(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        key: String,
        work: Work,
    ) {
        let start_worker = !state.sessions.contains_key(&key);
        let slot = state.sessions.entry(key.clone()).or_default();
        slot.queue.push_back(work);
        if start_worker {
            state.active_workers += 1;
            drop(state);
            let inner = Arc::clone(self);
            self.spawn(async move { inner.worker(key).await });
        }
    }
}
