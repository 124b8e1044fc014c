//! Turns: a session's worker, and one turn on the blocking pool — session,
//! media, history, agent, run (persisted as it goes, shown as it goes),
//! reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hermes_core::{AgentEvent, IterationBudget, LedgerEntry, Message, StopReason, Usage};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::StoreError;
use hermes_runtime::turn::{TurnView, drive_steered};
use tokio::sync::mpsc::UnboundedSender;

use super::progress::{StreamEvent, Streaming, Typing};
use super::transcribe::Transcribed;
use super::voice::VoicePlan;
use super::{Inner, RESTART_NOTICE, STOPPED_NOTICE, TurnCtl, Work, lock};
use crate::adapter::Finished;
use crate::event::MessageEvent;
use crate::inbox::TurnMarker;
use crate::lease::Held;
use crate::media::{self, Download};

/// The runner's view of one run: a latched interrupt (see [`TurnCtl`]),
/// steered messages stored, the spending caps watched, the run's progress
/// reported to the reply preview. (The turn driver stores the run as it
/// goes.)
struct TurnObserver<'a> {
    ctl: &'a TurnCtl,
    progress: Option<UnboundedSender<StreamEvent>>,
    /// The first model that failed and why, and the model that answered in
    /// the end, when a fallback took over (SPEC X2).
    fallback: Option<(String, String, String)>,
    /// Stores steered messages (SPEC Y5).
    steer: super::steer::SteerWriter<'a>,
    /// Halts the run when a spending cap is reached mid-way (issue 44).
    spend: super::spending::SpendWatch<'a>,
}

impl TurnObserver<'_> {
    fn report(&self, event: StreamEvent) {
        if let Some(tx) = &self.progress {
            // The preview is gone only once the turn's reply was handed
            // over; nothing to do then.
            let _ = tx.send(event);
        }
    }
}

impl TurnView for TurnObserver<'_> {
    fn store(&mut self, entry: &LedgerEntry, writer: &mut TurnWriter<'_>) -> bool {
        match self.steer.claim(entry) {
            Some(stored) => stored,
            None => !self.steer.failed && writer.append(entry),
        }
    }

    fn stop_requested(&self) -> bool {
        self.ctl.is_requested()
    }

    fn on_event(&mut self, event: &AgentEvent<'_>) {
        match event {
            AgentEvent::ModelCall { .. } => {
                self.spend.before_call();
                self.report(StreamEvent::ModelCall);
            }
            AgentEvent::TextDelta(text) => self.report(StreamEvent::Text((*text).to_owned())),
            AgentEvent::ToolStarted { call } => {
                self.report(StreamEvent::ToolStarted(call.function.name.clone()));
            }
            AgentEvent::ToolFinished { .. } => self.report(StreamEvent::ToolFinished),
            AgentEvent::RepeatsStopped { tool, count } => {
                self.report(StreamEvent::Notice(format!(
                    "stopped a loop: {tool} was called {count} times with the same result; answering now…"
                )));
            }
            AgentEvent::Fallback(f) => match &mut self.fallback {
                Some((_, _, answering)) => f.answering.clone_into(answering),
                None => {
                    self.fallback = Some((
                        f.failed.to_owned(),
                        f.reason.to_owned(),
                        f.answering.to_owned(),
                    ))
                }
            },
            _ => {}
        }
    }
}

/// What one turn produced for the user: messages to send before the reply
/// (session notices), then the reply (always the last one).
pub(super) struct TurnReply {
    pub(super) texts: Vec<String>,
    /// Another gateway took the session over mid-turn: its writes were
    /// refused, and nothing is sent (the new holder answers).
    pub(super) taken_over: bool,
    /// A turn of this session that died midway elsewhere, found when this
    /// one started: its user is owed the restart notice first.
    pub(super) orphan: Option<TurnMarker>,
    /// Tokens the run used (none when it did not run).
    pub(super) usage: Usage,
    /// The model's answer of a completed run, for a spoken reply.
    pub(super) answer: Option<String>,
}

impl TurnReply {
    /// The reply of a turn that ended at a step (or completed), with the
    /// orphan found when it started.
    fn ended(texts: Vec<String>, taken_over: bool, orphan: Option<TurnMarker>) -> Self {
        TurnReply {
            texts,
            taken_over,
            orphan,
            usage: Usage::default(),
            answer: None,
        }
    }

    fn texts(texts: Vec<String>) -> Self {
        Self::ended(texts, false, None)
    }
}

/// Told when the message could not be stored (the log has the error).
const SAVE_FAILED: &str = "Sorry, I could not save your message. Please send it again.";
/// Told when no agent could be built (the log has the error).
const UNAVAILABLE: &str =
    "Sorry, the assistant is unavailable right now. Your message is saved; please try again later.";
/// The provider failed before answering anything: the turn was taken back.
pub const MODEL_FAILED_NOT_KEPT: &str = "Sorry, I could not get an answer from the model just now. Please send your message again in a moment.";
/// The provider failed after part of the answer (kept above).
pub const MODEL_FAILED_PARTWAY: &str =
    "Sorry, the model stopped answering partway. Please try again in a moment.";
/// The conversation does not fit the model's window, even compacted.
const TOO_LONG: &str = "This does not fit in the model's context window, even after compacting the conversation. Every request also carries the system prompt and the tool definitions: a larger context on the server (Ollama: num_ctx; llama.cpp: -c) or fewer tools ([agent] toolsets) helps; otherwise send a shorter message (or a smaller file), or start a new conversation with /new.";

/// Stored media files of a message are named after it, so a message
/// processed again (after a restart) replaces its own files.
fn media_stem(platform: &str, message_id: &str, inbox_id: u64) -> String {
    if message_id.is_empty() {
        format!("{platform}-inbox{inbox_id}")
    } else {
        format!("{platform}-{message_id}")
    }
}

/// Told once per turn that fell back: which model answered, and why the
/// primary did not (the reason is cut short: the log has all of it).
pub(crate) fn fallback_notice(failed: &str, reason: &str, answering: &str) -> String {
    let mut short: String = reason.chars().take(160).collect();
    if reason.chars().count() > 160 {
        short.push('…');
    }
    let reason = short;
    format!("(Answered by {answering}: {failed} was unavailable — {reason}.)")
}

impl Inner {
    /// The one worker of a session: drains its queue in order, then removes
    /// the slot (so idle sessions cost no memory here).
    pub(super) async fn worker(self: Arc<Self>, key: String) {
        // Messages left by a previous process wait until start-up has
        // connected the adapters and sent its notices.
        let mut gate = self.queues.gate.subscribe();
        if gate.wait_for(|open| *open).await.is_err() {
            tracing::error!(key, "the runner went away before it started");
        }
        loop {
            let next = {
                let mut state = lock(&self.queues.state);
                let popped = state.sessions.get_mut(&key).and_then(|slot| {
                    let work = slot.queue.pop_front()?;
                    // The turn is registered in the same critical section
                    // that takes the message, so a message arriving right
                    // after always finds it and can interrupt it.
                    if matches!(work, Work::Message(..)) {
                        slot.turn = Some(Arc::new(TurnCtl::default()));
                    }
                    Some((work, slot.turn.clone()))
                });
                if popped.is_none() {
                    state.sessions.remove(&key);
                    state.active_workers = state.active_workers.saturating_sub(1);
                    drop(state);
                    self.queues.idle.notify_waiters();
                    return;
                }
                popped
            };
            match next {
                Some((Work::Message(event, id), Some(ctl))) => {
                    self.process_message(&key, event, id, ctl).await
                }
                Some((Work::Command(cmd, event, position), _)) => {
                    self.process_command(&key, cmd, event, position).await
                }
                Some((Work::Message(..), None)) | None => {}
            }
        }
    }

    pub(super) async fn process_message(
        self: &Arc<Self>,
        key: &str,
        event: MessageEvent,
        id: u64,
        ctl: Arc<TurnCtl>,
    ) {
        if self.stopping.load(Ordering::SeqCst) {
            // Accepted but not run: it stays in the inbox, durable, and the
            // next start answers it (X5).
            tracing::debug!(key, id, "stopping: message kept for the next start");
            self.end_turn(key, &ctl);
            return;
        }
        let platform = event.source.platform.clone();
        let started = std::time::Instant::now();
        // X8: at most one turn of a session across all gateways.
        let Some(lease) = self.acquire_session(key, &platform).await else {
            tracing::info!(
                key,
                id,
                "turn not run here (stopping, or another gateway serves the bot now)"
            );
            self.end_turn(key, &ctl);
            return;
        };
        // Renewed while the turn runs; should another gateway take it over
        // (this one was cut off or stopped), the turn stops.
        let keeper = hermes_runtime::task::spawn(
            lease
                .clone()
                .keep(Arc::clone(self.lease_store()), self.cluster.timing),
        );
        let watcher = {
            let (lease, ctl) = (lease.clone(), Arc::clone(&ctl));
            hermes_runtime::task::spawn(async move {
                lease.invalidated().await;
                ctl.interrupt();
            })
        };
        let permit = Arc::clone(&self.queues.workers).acquire_owned().await;
        // Waiting for a worker can take long — long enough for this process
        // to be stopped and the bot taken over meanwhile. Look again: the
        // bot must still be ours, and the session's lease too (one round
        // trip), before anything of the turn happens.
        let still_ours = self.bot_fences(&platform).is_some() && {
            let inner = Arc::clone(self);
            let fence = lease.fence().clone();
            let ttl = self.cluster.timing.ttl;
            hermes_runtime::task::spawn_blocking(move || {
                lock(inner.lease_store()).lease_renew(&fence, ttl)
            })
            .await
            .is_ok_and(|r| matches!(r, Ok(Some(_))))
        };
        if !still_ours {
            tracing::warn!(
                key,
                id,
                "the bot or the session was taken over while the turn waited; not run here"
            );
            drop(permit);
            watcher.abort();
            keeper.abort();
            lease.lose();
            self.end_turn(key, &ctl);
            return;
        }
        let chat = event.source.chat_id.clone();
        let reply_to = event.message_id.clone();
        let adapter = self.delivery.adapter(platform.as_str()).cloned();
        // Progress (SPEC X6): typing until the turn ends, and the reply
        // shown as it is written where the platform can.
        let typing = adapter
            .as_ref()
            .map(|a| Typing::start(Arc::clone(a), chat.clone()));
        let voice = self.voice_plan(key, &event);
        let streaming = match &adapter {
            Some(a) if self.config.stream_replies && VoicePlan::streams(voice.as_ref()) => a
                .begin_reply(
                    &chat,
                    Some(&reply_to)
                        .filter(|r| !r.is_empty())
                        .map(String::as_str),
                )
                .await
                .map(|stream| Streaming::start(stream, a.stream_interval())),
            _ => None,
        };
        let downloads = self.fetch_media(key, id).await;
        let inner = Arc::clone(self);
        let turn_key = key.to_owned();
        let turn_ctl = Arc::clone(&ctl);
        let turn_lease = lease.clone();
        let progress = streaming.as_ref().map(Streaming::sender);
        *lock(&ctl.preview) = streaming.as_ref().map(Streaming::sender);
        let result = hermes_runtime::task::spawn_blocking(move || {
            inner.run_turn(
                &turn_key,
                &event,
                id,
                &turn_ctl,
                &turn_lease,
                downloads,
                progress,
            )
        })
        .await;
        drop(permit);
        drop(typing);
        watcher.abort();
        // The preview ends once its senders are gone.
        lock(&ctl.preview).take();
        self.end_turn(key, &ctl);
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                tracing::error!(key, error = %e, "turn panicked");
                TurnReply::texts(vec!["Sorry, something went wrong while answering; your message is saved. Please try again.".into()])
            }
        };
        if let Some(orphan) = reply.orphan.as_ref().filter(|_| !reply.taken_over) {
            self.delivery
                .send(
                    &orphan.platform,
                    &orphan.chat_id,
                    RESTART_NOTICE,
                    Some(&orphan.message_id),
                )
                .await;
        }
        // Sent only while the session is still ours: a gateway that took it
        // over (this one was stopped or cut off mid-turn) answers instead.
        // The renewal must also be young by this process's own clock when
        // its answer arrives: a process frozen around it (SIGSTOP, a paused
        // VM) wakes to an answer the store gave before the lease lapsed, and
        // would send after the next holder had told the user the reply was
        // lost (seen in the failover test: the answer 6 ms after the wake).
        let ours = !reply.taken_over && {
            let ttl = self.cluster.timing.ttl;
            let mut ours = false;
            // A renewal that took half the lease's life is asked again
            // (frozen: the lease has lapsed, and the next answer says so;
            // merely slow: it is renewed again); the third answer stands.
            for _ in 0..3 {
                let inner = Arc::clone(self);
                let fence = lease.fence().clone();
                let asked = std::time::Instant::now();
                ours = hermes_runtime::task::spawn_blocking(move || {
                    lock(inner.lease_store()).lease_renew(&fence, ttl)
                })
                .await
                .is_ok_and(|r| matches!(r, Ok(Some(_))));
                if !ours || asked.elapsed() < ttl / 2 {
                    break;
                }
            }
            ours
        };
        keeper.abort();
        if ours {
            let to = (platform.as_str(), chat.as_str(), reply_to.as_str());
            let pieces = self
                .deliver_spoken(reply.texts, reply.answer, streaming, voice, to)
                .await;
            super::oplog::reply_out(&platform, &chat, pieces, started.elapsed(), &reply.usage);
        } else {
            tracing::warn!(
                key,
                "another gateway took this session over mid-turn; its reply is not sent from here"
            );
        }
        // The reply is out: a restart from here on owes nobody a notice.
        let inner = Arc::clone(self);
        let k = key.to_owned();
        let released =
            hermes_runtime::task::spawn_blocking(move || inner.finish_turn(&k, Some(&lease)));
        if let Err(e) = released.await {
            tracing::error!(key, error = %e, "clearing a turn marker panicked");
        }
    }

    /// Sends a turn's texts: all but the last as messages, the last (the
    /// reply) as the end of the streamed preview where there is one, else
    /// as a message. Returns how many platform messages that took.
    pub(super) async fn deliver_reply(
        &self,
        mut texts: Vec<String>,
        streaming: Option<Streaming>,
        platform: &str,
        chat: &str,
        reply_to: &str,
    ) -> usize {
        let reply = texts.pop().unwrap_or_default();
        let mut pieces = 0;
        for text in texts {
            pieces += self.pieces(platform, &text);
            self.delivery
                .send(platform, chat, &text, Some(reply_to))
                .await;
        }
        let streamed = match streaming {
            Some(s) => s.end().await,
            None => None,
        };
        let delivered = match streamed {
            Some((mut stream, _)) => match stream.finish(&reply).await {
                Ok(Finished::Delivered) => true,
                Ok(Finished::NotDelivered) => false,
                Err(e) => {
                    tracing::warn!(platform, error = %e, "the streamed reply could not be finished; sending it whole");
                    false
                }
            },
            None => false,
        };
        if delivered {
            pieces += 1;
        } else {
            pieces += self.pieces(platform, &reply);
            self.delivery
                .send(platform, chat, &reply, Some(reply_to))
                .await;
        }
        pieces
    }

    /// How many platform messages
    /// [`Delivery::send`](super::delivery::Delivery::send) makes of `text`
    /// (at most `max_reply_messages`; the rest of a longer one goes as a
    /// file).
    pub(super) fn pieces(&self, platform: &str, text: &str) -> usize {
        match self.delivery.adapter(platform) {
            Some(a) if !text.is_empty() => {
                crate::split::split_message(text, a.max_message_len(), a.length_unit())
                    .len()
                    .min(self.config.max_reply_messages)
            }
            _ => 0,
        }
    }

    /// One turn, on the blocking pool. Returns what to send.
    // What one turn needs of its caller: the message, its control, its
    // session lease (SPEC X8), its media (X6) and its preview channel.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_turn(
        &self,
        key: &str,
        event: &MessageEvent,
        id: u64,
        ctl: &TurnCtl,
        lease: &Held,
        mut downloads: HashMap<u64, Vec<Download>>,
        progress: Option<UnboundedSender<StreamEvent>>,
    ) -> TurnReply {
        let now = self.now();
        let mut texts = Vec::new();
        // Every write of the turn carries the session's fence; the start
        // also the bot's (only its holder starts its turns).
        let session_fences = vec![lease.fence().clone()];
        let mut start_fences = session_fences.clone();
        start_fences.extend(self.bot_fences(&event.source.platform).unwrap_or_default());
        let mut orphan = None;
        // 1. The session. A marker left by a turn of this session that died
        //    midway on a gateway whose lease lapsed: that turn is not
        //    resumed (G11). (Read first: the store's guard must be gone
        //    before the suspension takes it again.)
        let session = (|| {
            let left = self.store().kv_get(&crate::inbox::turn_key(key))?;
            if let Some(value) = left
                && let Ok(marker) = serde_json::from_str::<TurnMarker>(&value)
            {
                self.suspend_killed_turn(&marker)?;
                orphan = Some(marker);
            }
            let mut store = self.store();
            self.resolve_session(&mut store, key, &event.source, now, &mut texts)
        })();
        let session = match session {
            Ok(s) => s,
            Err(StoreError::Fenced { .. }) => {
                tracing::warn!(
                    key,
                    "this turn was taken over by another gateway before it began"
                );
                return TurnReply::ended(texts, true, orphan);
            }
            Err(e) => {
                tracing::error!(key, error = %e, "could not open the session");
                texts.push(SAVE_FAILED.to_owned());
                return TurnReply::ended(texts, false, orphan);
            }
        };
        // 2. Media (SPEC X6): the user messages of this turn's messages that
        //    came with photos, voice or files — outside the store lock, as
        //    transcription and descriptions are calls to other services.
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.agents.factory.default_model());
        let with_media: Vec<_> = lock(&self.inbox)
            .upto(key, id)
            .into_iter()
            .filter(|p| !p.media.is_empty())
            .collect();
        let services = self.agents.factory.media();
        let mut prepared = HashMap::new();
        let mut prefix = String::new();
        let mut answerable = true;
        for p in with_media {
            let prep = match &services {
                Some(services) => services.prepare(
                    &session.id,
                    &model,
                    &media_stem(&p.platform, &p.message_id, p.id),
                    &p.text,
                    downloads.remove(&p.id).unwrap_or_default(),
                ),
                None => media::without_services(&p.text, &p.media),
            };
            prefix.push_str(&prep.reply_prefix());
            if p.id == id {
                answerable = prep.answerable;
            }
            prepared.insert(p.id, prep.message);
        }
        if let (Some(tx), false) = (&progress, prefix.is_empty()) {
            let _ = tx.send(StreamEvent::Prefix(prefix.clone()));
        }
        // 3. History; the user's message (and any accepted message it
        //    replaced) moves from the inbox into the transcript before the
        //    model is called (E3), in the same transaction that records the
        //    turn as running (X5, see `crate::inbox`), under the leases.
        let stored = (|| {
            let mut store = self.store();
            let marker = TurnMarker {
                key: key.to_owned(),
                session_id: session.id.clone(),
                platform: event.source.platform.clone(),
                chat_id: event.source.chat_id.clone(),
                message_id: event.message_id.clone(),
                at_ms: now,
                bot: self.bot_id(&event.source.platform),
            };
            // The compacted view, not every original (SPEC X1).
            let mut history = store.load_view(&session.id)?;
            let transcribed = self.transcribe_into(
                &mut store,
                key,
                &session.id,
                id,
                Some(&marker),
                &prepared,
                &start_fences,
            )?;
            let Transcribed::Moved(mut added) = transcribed else {
                return Ok(None);
            };
            // The agent appends the user message itself (in memory; the
            // observer below does not store it again), so the history it is
            // given ends just before it.
            let user = match added.pop() {
                Some(entry) => entry.message,
                None => {
                    self.transcribe_missing(
                        &mut store,
                        &session.id,
                        &event.text,
                        now,
                        &marker,
                        &start_fences,
                    )?;
                    Message::user(event.text.as_str())
                }
            };
            history.extend(added);
            Ok::<_, StoreError>(Some((history, user)))
        })();
        let (history, user) = match stored {
            Ok(Some(s)) => s,
            Ok(None) | Err(StoreError::Fenced { .. }) => {
                // Another gateway took the message (or the session) first.
                tracing::warn!(
                    key,
                    "this turn was taken over by another gateway before it began"
                );
                return TurnReply::ended(texts, true, orphan);
            }
            Err(e) => {
                tracing::error!(key, error = %e, "could not store the user message");
                texts.push(SAVE_FAILED.to_owned());
                return TurnReply::ended(texts, false, orphan);
            }
        };
        // A spending cap reached (issue 44): one line, no model call; the
        // message is taken back out, as for a call that never answered.
        let identity = super::spending::identity(&event.source);
        if let Some(line) = self.cap_refusal(&identity) {
            if let Err(e) = self.store().undo_last_turn(&session.id) {
                tracing::error!(key, error = %e, "could not take the refused turn back");
            }
            texts.push(line);
            return TurnReply::ended(texts, false, orphan);
        }
        if !answerable {
            // Nothing the model could read (a voice note, no transcription):
            // the notice is the answer.
            texts.push(prefix.trim_end().to_owned());
            return TurnReply::ended(texts, false, orphan);
        }
        // 4. The agent (G4).
        let agent = match self.agent_for(key, &session, &event.source) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(key, error = %e, "could not build an agent");
                texts.push(format!("{prefix}{UNAVAILABLE}"));
                return TurnReply::ended(texts, false, orphan);
            }
        };
        // 5. Run, interruptibly, persisting as the run goes; approval
        //    questions of this turn go to this chat.
        ctl.attach(agent.interrupt_flag().clone());
        let _routes = self.bind_routes(&session.id, key, event);
        let budget = IterationBudget::new(agent.max_iterations());
        let prices = self.agents.factory.prices(&self.store, now);
        let wallet = self.wallet(&identity);
        let writer = TurnWriter::new(&self.store, &session.id)
            .skipping_stored_user_message()
            .fenced(session_fences.clone())
            .charging(self.charger(identity.clone(), prices, wallet.clone()));
        let mut observer = TurnObserver {
            ctl,
            progress,
            fallback: None,
            steer: super::steer::SteerWriter {
                inner: self,
                ctl,
                key,
                session_id: &session.id,
                fences: session_fences,
                failed: false,
            },
            spend: super::spending::SpendWatch {
                inner: self,
                identity,
                budget: budget.clone(),
                wallet,
                halted: None,
            },
        };
        let driven = drive_steered(
            &agent,
            user,
            history,
            &budget,
            writer,
            &mut observer,
            &ctl.steer,
        );
        let fallback = observer.fallback.take();
        let capped = observer.spend.halted.take();
        // The preview ends with the run; the reply below is final.
        drop(observer);
        let answered = driven.answered();
        let (outcome, persist) = (driven.outcome, driven.writer);
        if let Some(StoreError::Fenced { .. }) = persist.failure() {
            tracing::warn!(
                key,
                "another gateway took this session over mid-turn; its late writes were refused"
            );
            return TurnReply::ended(texts, true, orphan);
        }
        if let Some(e) = persist.failure() {
            tracing::error!(key, error = %e, "could not store the reply; the run was stopped");
            texts.push("(Warning: this reply could not be saved.)".to_owned());
        } else if persist.unfinished() > 0 {
            // The core answers every tool call before it ends a run, so this
            // does not happen; if it did, storing the call without its
            // results would make the transcript invalid for the provider.
            tracing::error!(
                key,
                entries = persist.unfinished(),
                "a tool call without all its results was not stored"
            );
        }
        // A provider that failed: the detail (URLs, settings to change) is
        // the operator's, in the log; the chat gets a sentence. A turn it
        // never answered is taken back out of the session, as the CLI does,
        // so the next turn does not begin with two user messages in a row.
        let failed = match &outcome.stop {
            StopReason::ModelError(e) | StopReason::ContextOverflow(e) => Some(e.to_string()),
            _ => None,
        };
        let mut rolled_back = false;
        // A turn halted by a cap before its first call is taken back too.
        let halted = matches!(outcome.stop, StopReason::Halted);
        if failed.is_some() || halted {
            if let Some(cause) = &failed {
                super::oplog::turn_failed(key, cause);
            }
            if !answered && persist.failure().is_none() {
                drop(persist);
                match self.store().undo_last_turn(&session.id) {
                    Ok(_) => rolled_back = true,
                    Err(e) => {
                        tracing::error!(key, error = %e, "could not take the unanswered turn back")
                    }
                }
            }
        }
        // 6. What the user sees: notices and transcripts, then the answer.
        let prefix_len = prefix.len();
        let mut reply = prefix;
        reply.push_str(&super::chat_prefs::shown_reasoning(
            &self.chat_prefs(key),
            &outcome,
        ));
        reply.push_str(&outcome.final_text);
        if let Some(notice) = match &outcome.stop {
            // Cut short by a graceful stop, not by the user: say so, or the
            // partial answer would read as the whole one.
            StopReason::Interrupted if self.stopping.load(Ordering::SeqCst) => {
                Some(STOPPED_NOTICE.to_owned())
            }
            StopReason::Completed | StopReason::Interrupted => None,
            StopReason::ModelError(_) => Some(if rolled_back {
                MODEL_FAILED_NOT_KEPT.to_owned()
            } else {
                MODEL_FAILED_PARTWAY.to_owned()
            }),
            StopReason::ContextOverflow(_) => Some(TOO_LONG.to_owned()),
            StopReason::Halted => capped,
            other => other.notice(budget.total()),
        } {
            if !reply.trim().is_empty() && !reply.ends_with("\n\n") {
                reply.push_str("\n\n");
            }
            reply.push_str(&notice);
        }
        if let Some((failed, reason, answering)) = fallback {
            // The agent moved off its primary: drop it, so the next turn
            // starts from a fresh one on the primary (G4, X2).
            self.agents.invalidate(key);
            if !reply.trim().is_empty() && !reply.ends_with("\n\n") {
                reply.push_str("\n\n");
            }
            reply.push_str(&fallback_notice(&failed, &reason, &answering));
        }
        if reply.len() == prefix_len {
            // Notices only: no blank paragraph after them.
            reply.truncate(reply.trim_end().len());
        }
        texts.push(reply);
        let mut done = TurnReply::ended(texts, false, orphan);
        done.usage = outcome.usage;
        done.answer = matches!(outcome.stop, StopReason::Completed).then_some(outcome.final_text);
        done
    }
}
