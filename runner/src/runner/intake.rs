//! Intake: the one handler adapters call — duplicates, the allow-list,
//! commands, durable acceptance into the inbox, and the session queues.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::queues::drop_queued_messages;
use super::{
    INTERRUPT_NOTICE, Inner, NOTICE_INTERVAL, QUEUE_NOTICE, REFUSAL_INTERVAL, State, Work,
    duration_ms, lock,
};
use crate::approval::Verdict;
use crate::command::{Command, HELP, parse_command, skills_text};
use crate::config::{BusyMode, GatewayConfig};
use crate::dedup::Dedup;
use crate::event::{ChatType, MediaKind, MessageEvent};
use crate::inbox::{Accepted, Pending, seen_key};
use crate::session::session_key;
use hermes_runtime::store::StoreError;

/// How many accepted messages pass between two prunings of old seen keys.
const PRUNE_EVERY: u64 = 1024;

/// The intake stage's own state: which messages were seen (G7), which
/// strangers were refused lately, and the arrival numbers of accepted
/// messages. Each lock is short and never held while another is taken.
pub(super) struct Intake {
    dedup: Mutex<Dedup>,
    /// When each unknown (platform, user) was last refused.
    refused: Mutex<HashMap<(String, String), u64>>,
    /// Arrival numbers of accepted messages (and the position of commands
    /// among them).
    pub(super) next_pending: AtomicU64,
}

impl Intake {
    pub(super) fn new(config: &GatewayConfig) -> Self {
        Intake {
            dedup: Mutex::new(Dedup::new(
                duration_ms(config.dedup_window),
                config.dedup_capacity,
            )),
            refused: Mutex::new(HashMap::new()),
            next_pending: AtomicU64::new(1),
        }
    }

    /// Whether `event` is seen for the first time within the window (G7).
    fn first_sighting(&self, event: &MessageEvent, now: u64) -> bool {
        let source = &event.source;
        lock(&self.dedup).first_sighting(&source.platform, &source.chat_id, &event.message_id, now)
    }

    /// Whether a stranger should be told "no" now: at most once per
    /// [`REFUSAL_INTERVAL`] each.
    pub(super) fn refuse_now(&self, platform: &str, user_id: &str, now: u64) -> bool {
        let who = (platform.to_owned(), user_id.to_owned());
        let mut refused = lock(&self.refused);
        let recently = refused
            .get(&who)
            .is_some_and(|t| now.saturating_sub(*t) < duration_ms(REFUSAL_INTERVAL));
        if recently {
            return false;
        }
        if refused.len() > 10_000 {
            refused.clear();
        }
        refused.insert(who, now);
        true
    }
}

/// Runs `f`, which blocks briefly on SQLite, from an adapter's task:
/// under `block_in_place` on a multi-thread runtime, else a plain call.
pub(super) use hermes_runtime::bridge::wait_outside_runtime as blocking;

impl Inner {
    /// Sends `text` in the background (notices, refusals, command replies).
    pub(super) fn reply_later(self: &Arc<Self>, event: &MessageEvent, text: String) {
        let inner = Arc::clone(self);
        let chat = event.source.chat_id.clone();
        let platform = event.source.platform.clone();
        let reply_to = event.message_id.clone();
        self.spawn(async move {
            inner
                .delivery
                .send(&platform, &chat, &text, Some(&reply_to))
                .await;
        });
    }

    pub(super) fn handle_event(self: &Arc<Self>, event: MessageEvent) {
        if self.closed.load(Ordering::SeqCst) {
            tracing::info!(platform = %event.source.platform, "gateway stopped; event not accepted");
            return;
        }
        let now = self.now();
        if !self.intake.first_sighting(&event, now) {
            tracing::debug!(platform = %event.source.platform, id = %event.message_id, "duplicate dropped");
            return;
        }
        if !self.admit(&event, now) {
            return;
        }
        let source = &event.source;
        let state = lock(&self.queues.state);
        let key = session_key(source, self.config.group_sessions_per_user);
        let position = self.intake.next_pending.load(Ordering::SeqCst);
        let command = parse_command(&event.text);
        super::oplog::message_in(&event, command.is_some());
        // A question of the running turn waits for this chat's answer: it
        // cannot wait in the session's queue behind that turn.
        drop(state);
        if self.offer_to_question(&key, &event) {
            return;
        }
        let mut state = lock(&self.queues.state);
        if matches!(
            command,
            Some(
                Command::New
                    | Command::Undo
                    | Command::Model(Some(_))
                    | Command::Retry
                    | Command::Title(Some(_))
                    | Command::Resume(Some(_))
                    | Command::Background(_)
            )
        ) {
            // Commands that change a session run at most once, even when the
            // platform delivers them again after a restart (X5).
            drop(state);
            if !self.first_acceptance(&event, now) {
                return;
            }
            state = lock(&self.queues.state);
        }
        match command {
            None => {
                drop(state);
                self.accept_message(key, event, now);
            }
            Some(Command::Help) => {
                drop(state);
                self.reply_later(&event, HELP.to_owned());
            }
            Some(Command::Skills) => {
                drop(state);
                self.reply_later(&event, skills_text(&self.agents.factory.skills()));
            }
            Some(command @ (Command::Memory | Command::Forget)) => {
                drop(state);
                let forget = command == Command::Forget;
                let text = self.agents.factory.memory_command(&event.source, forget);
                self.reply_later(&event, text);
            }
            // Answered at once: the turn that asked is waiting for it, so it
            // cannot wait in the session's queue behind that turn.
            Some(Command::Approve { always }) => {
                drop(state);
                let verdict = if always {
                    Verdict::ApproveAlways
                } else {
                    Verdict::Approve
                };
                let delivered = self
                    .agents
                    .approvals
                    .as_ref()
                    .is_some_and(|hub| hub.answer(&key, verdict));
                let text = match (delivered, always) {
                    (false, _) => "Nothing is waiting for your approval.",
                    (true, false) => "Approved; running it.",
                    (true, true) => {
                        "Approved; commands of this kind run unasked for the rest of this conversation."
                    }
                };
                self.reply_later(&event, text.to_owned());
            }
            Some(Command::Deny) => {
                drop(state);
                let delivered = self
                    .agents
                    .approvals
                    .as_ref()
                    .is_some_and(|hub| hub.answer(&key, Verdict::Deny));
                let text = if delivered {
                    "Denied; the command will not run."
                } else {
                    "Nothing is waiting for your approval."
                };
                self.reply_later(&event, text.to_owned());
            }
            Some(Command::Background(prompt)) => {
                drop(state);
                let text = self.start_background(&event, &prompt, now);
                self.reply_later(&event, text);
            }
            Some(Command::Unknown(word)) => {
                drop(state);
                self.reply_later(&event, crate::command::unknown_text(&word));
            }
            Some(Command::Stop) => {
                let mut dropped = Vec::new();
                let text = match state.sessions.get_mut(&key) {
                    Some(slot) => {
                        dropped = drop_queued_messages(slot);
                        match &slot.turn {
                            Some(turn) => {
                                dropped.extend(turn.steer.drop_waiting());
                                turn.interrupt();
                                "Stopping the current reply.".to_owned()
                            }
                            None if !dropped.is_empty() => {
                                "Dropped the waiting messages.".to_owned()
                            }
                            None => "Nothing is running.".to_owned(),
                        }
                    }
                    None => "Nothing is running.".to_owned(),
                };
                drop(state);
                self.mark_unanswered(&dropped);
                self.reply_later(&event, text);
            }
            Some(Command::Usage) => {
                drop(state);
                self.usage_later(event, key);
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
                let cached = self.agents.is_cached(&key);
                drop(state);
                self.status_later(event, key, running, waiting, cached);
            }
            Some(Command::New) => {
                // The user abandons the conversation: stop what runs for it
                // and what waits, then reset in order.
                let mut dropped = Vec::new();
                if let Some(slot) = state.sessions.get_mut(&key) {
                    dropped = drop_queued_messages(slot);
                    if let Some(turn) = &slot.turn {
                        dropped.extend(turn.steer.drop_waiting());
                        turn.interrupt();
                    }
                }
                self.push_work(state, key, Work::Command(Command::New, event, position));
                self.mark_unanswered(&dropped);
            }
            Some(Command::Sessions) => {
                drop(state);
                self.sessions_later(event, key);
            }
            Some(Command::Queue(text)) => {
                drop(state);
                self.queue_text(key, event, text, now);
            }
            Some(Command::Steer(text)) => {
                drop(state);
                self.steer_text(key, event, text, now);
            }
            Some(
                cmd @ (Command::Model(_)
                | Command::Undo
                | Command::Compress(_)
                | Command::SetHome
                | Command::Cron(_)
                | Command::Title(_)
                | Command::Resume(_)
                | Command::Reasoning(_)
                | Command::Personality(_)
                | Command::Voice(_)
                | Command::Retry),
            ) => {
                self.push_work(state, key, Work::Command(cmd, event, position));
            }
        }
    }

    /// Makes a message durable (E3, [`crate::inbox`]) — unless it was
    /// accepted before, even by an earlier process (X5) — and then queues
    /// it, before the handler returns. Blocks briefly on SQLite (see
    /// [`blocking`]).
    pub(super) fn accept_message(self: &Arc<Self>, key: String, event: MessageEvent, now: u64) {
        self.accept_message_as(key, event, now, self.config.busy_mode);
    }

    /// [`Inner::accept_message`] under `busy_mode` (`/queue` queues even
    /// in interrupt mode).
    pub(super) fn accept_message_as(
        self: &Arc<Self>,
        key: String,
        event: MessageEvent,
        now: u64,
        busy_mode: BusyMode,
    ) {
        blocking(|| {
            let mut inbox = lock(&self.inbox);
            // Taken under the inbox lock, so inbox order is arrival order.
            let id = self.intake.next_pending.fetch_add(1, Ordering::SeqCst);
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
                message_id: event.message_id.clone(),
                answer: true,
                db_key: String::new(),
                media: event.media.clone(),
                bot: self.bot_id(&source.platform),
            };
            // Only the holder of the bot's lease accepts its messages (X8).
            let Some(fences) = self.bot_fences(&source.platform) else {
                tracing::warn!(platform = %source.platform, id = %event.message_id, "not serving this bot (any more); message left to the gateway that does");
                return;
            };
            let seen = seen_key(&source.platform, &source.chat_id, &event.message_id);
            match inbox.accept(pending, seen.as_deref(), &fences) {
                Ok(Accepted::New) => {}
                Ok(Accepted::Duplicate) => {
                    tracing::info!(platform = %source.platform, id = %event.message_id, "message accepted before (redelivered); dropped");
                    return;
                }
                Err(e @ StoreError::Fenced { .. }) => {
                    // Another gateway holds the bot now: stop serving it.
                    tracing::warn!(platform = %source.platform, error = %e, "the bot's lease was taken over; message left to its new holder");
                    if let Some(held) = self.bot_lease(&source.platform) {
                        held.lose();
                    }
                    return;
                }
                // Still held in memory and transcribed when its turn comes;
                // only a crash before then would lose it.
                Err(e) => {
                    tracing::error!(key, error = %e, "could not store an accepted message durably")
                }
            }
            if id.is_multiple_of(PRUNE_EVERY) {
                let horizon = now.saturating_sub(duration_ms(self.config.dedup_retention));
                if let Err(e) = inbox.prune_seen(horizon) {
                    tracing::warn!(error = %e, "could not prune old accepted message ids");
                }
            }
            let state = lock(&self.queues.state);
            let (queued, replaced) = self.enqueue_message(state, key, event, id, now, busy_mode);
            if !queued && let Err(e) = inbox.remove(&[id]) {
                tracing::error!(error = %e, "could not drop a refused message from the inbox");
            }
            if let Err(e) = inbox.mark_unanswered(&replaced) {
                tracing::error!(error = %e, "could not mark replaced messages in the inbox");
            }
        });
    }

    /// Records a command's identity; `false` when it was seen before (a
    /// redelivery, possibly across a restart) and must not run again.
    fn first_acceptance(&self, event: &MessageEvent, now: u64) -> bool {
        let source = &event.source;
        let Some(seen) = seen_key(&source.platform, &source.chat_id, &event.message_id) else {
            return true;
        };
        let Some(fences) = self.bot_fences(&source.platform) else {
            tracing::warn!(platform = %source.platform, "not serving this bot (any more); command left to the gateway that does");
            return false;
        };
        match blocking(|| lock(&self.inbox).claim(&seen, now, &fences)) {
            Ok(true) => true,
            Ok(false) => {
                tracing::info!(platform = %source.platform, id = %event.message_id, "command seen before (redelivered); dropped");
                false
            }
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::warn!(platform = %source.platform, error = %e, "the bot's lease was taken over; command left to its new holder");
                if let Some(held) = self.bot_lease(&source.platform) {
                    held.lose();
                }
                false
            }
            Err(e) => {
                tracing::error!(error = %e, "could not record a command durably; running it");
                true
            }
        }
    }

    /// Marks dropped or replaced messages as not to be answered on their own
    /// (they stay in the inbox for their session's next turn).
    fn mark_unanswered(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        if let Err(e) = blocking(|| lock(&self.inbox).mark_unanswered(ids)) {
            tracing::error!(error = %e, "could not mark dropped messages in the inbox");
        }
    }

    /// Queues an accepted message. Returns whether it was queued (`false`:
    /// refused, the queue is full) and the ids of waiting messages it
    /// replaced (interrupt mode).
    pub(super) fn enqueue_message(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        key: String,
        event: MessageEvent,
        id: u64,
        now: u64,
        busy_mode: BusyMode,
    ) -> (bool, Vec<u64>) {
        // While stopping, nothing is replaced or refused: every accepted
        // message stays in the inbox for the next start (X5) and none runs,
        // so the queue bound (which limits waiting *turns*) does not apply.
        let stopping = self.stopping.load(Ordering::SeqCst);
        let busy_mode = if stopping { BusyMode::Queue } else { busy_mode };
        let max_queued = self.config.max_queued;
        let Some(slot) = state.sessions.get_mut(&key) else {
            self.push_work(state, key, Work::Message(event, id));
            return (true, Vec::new());
        };
        let mut replaced = Vec::new();
        // A message nothing can be made of (a voice note, no transcription
        // configured) interrupts nothing: it waits its turn, which answers
        // it with a notice (issue 31), and no "queued" notice comes first.
        let unreadable = self.cannot_process(&event);
        let busy_mode = if unreadable {
            BusyMode::Queue
        } else {
            busy_mode
        };
        // Steer mode hands the message to the running turn; with no turn
        // taking any, it waits like in queue mode.
        let busy_mode = match (busy_mode, &slot.turn) {
            (BusyMode::Steer, Some(turn)) if turn.steer.offer(&event, id, max_queued) => {
                BusyMode::Steer
            }
            (BusyMode::Steer, _) => BusyMode::Queue,
            (mode, _) => mode,
        };
        let notice = match busy_mode {
            BusyMode::Steer => Some(super::STEER_NOTICE),
            BusyMode::Interrupt => {
                // One buffered slot: a newer message replaces the waiting one.
                // The replaced one stays in the inbox: it was accepted, and
                // the next turn transcribes it ahead of this one.
                replaced = drop_queued_messages(slot);
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
                    return (false, replaced);
                }
                slot.queue.push_back(Work::Message(event.clone(), id));
                (slot.turn.is_some() && !unreadable).then_some(QUEUE_NOTICE)
            }
        };
        let Some(text) = notice else {
            return (true, replaced);
        };
        let last = state.last_notice.get(&key).copied();
        if last.is_some_and(|t| now.saturating_sub(t) < duration_ms(NOTICE_INTERVAL)) {
            return (true, replaced);
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
        (true, replaced)
    }

    /// Whether `event` is only media this gateway cannot read — voice or
    /// audio without a caption, and no transcription configured — so its
    /// turn can only say so.
    fn cannot_process(&self, event: &MessageEvent) -> bool {
        event.text.trim().is_empty()
            && !event.media.is_empty()
            && event
                .media
                .iter()
                .all(|m| matches!(m.kind, MediaKind::Voice | MediaKind::Audio))
            && self
                .agents
                .factory
                .media()
                .is_some_and(|services| !services.can_transcribe())
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
