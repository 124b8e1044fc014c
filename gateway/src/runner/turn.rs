//! Turns: a session's worker, and one turn on the blocking pool — session,
//! media, history, agent, run (persisted as it goes, shown as it goes),
//! reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hermes_core::{
    Agent, AgentEvent, AgentObserver, InterruptFlag, IterationBudget, Message, StopReason,
};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{SessionRecord, StoreError};
use tokio::sync::mpsc::UnboundedSender;

use super::progress::{StreamEvent, Streaming, Typing};
use super::{FactoryError, Inner, STOPPED_NOTICE, TurnCtl, Work, lock};
use crate::adapter::Finished;
use crate::approval::Route;
use crate::event::{MessageEvent, SessionSource};
use crate::inbox::TurnMarker;
use crate::media::{self, Download};

/// The observer of one run: re-applies a latched interrupt (see
/// [`TurnCtl`]), persists the run as it goes and reports its progress to
/// the reply preview.
struct TurnObserver<'a> {
    ctl: &'a TurnCtl,
    flag: &'a InterruptFlag,
    persist: TurnWriter<'a>,
    progress: Option<UnboundedSender<StreamEvent>>,
    /// The first model that failed and why, and the model that answered in
    /// the end, when a fallback took over (SPEC X2).
    fallback: Option<(String, String, String)>,
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

impl AgentObserver for TurnObserver<'_> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        if self.ctl.is_requested() && !self.flag.is_set() {
            self.flag.interrupt();
        }
        match event {
            AgentEvent::Appended(entry) if !self.persist.append(entry) => {
                // The transcript can no longer follow the run: stop it
                // rather than do work (tool side effects) that would go
                // unrecorded.
                self.flag.interrupt();
            }
            AgentEvent::Compacted(compaction) => {
                self.persist.compacted(compaction);
            }
            AgentEvent::ModelCall { .. } => self.report(StreamEvent::ModelCall),
            AgentEvent::TextDelta(text) => self.report(StreamEvent::Text((*text).to_owned())),
            AgentEvent::ToolStarted { call } => {
                self.report(StreamEvent::ToolStarted(call.function.name.clone()));
            }
            AgentEvent::ToolFinished { .. } => self.report(StreamEvent::ToolFinished),
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
}

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
        let mut gate = self.gate.subscribe();
        if gate.wait_for(|open| *open).await.is_err() {
            tracing::error!(key, "the runner went away before it started");
        }
        loop {
            let next = {
                let mut state = lock(&self.state);
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
                    self.idle.notify_waiters();
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
            if let Some(slot) = lock(&self.state).sessions.get_mut(key) {
                slot.turn = None;
            }
            return;
        }
        let permit = Arc::clone(&self.workers).acquire_owned().await;
        let platform = event.source.platform.clone();
        let chat = event.source.chat_id.clone();
        let reply_to = event.message_id.clone();
        let adapter = self.adapters.get(platform.as_str()).cloned();
        // Progress (SPEC X6): typing until the turn ends, and the reply
        // shown as it is written where the platform can.
        let typing = adapter
            .as_ref()
            .map(|a| Typing::start(Arc::clone(a), chat.clone()));
        let streaming = match &adapter {
            Some(a) if self.config.stream_replies => a
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
        let progress = streaming.as_ref().map(Streaming::sender);
        let result = tokio::task::spawn_blocking(move || {
            inner.run_turn(&turn_key, &event, id, &turn_ctl, downloads, progress)
        })
        .await;
        drop(permit);
        drop(typing);
        if let Some(slot) = lock(&self.state).sessions.get_mut(key) {
            slot.turn = None;
        }
        let mut texts = match result {
            Ok(reply) => reply.texts,
            Err(e) => {
                tracing::error!(key, error = %e, "turn panicked");
                vec!["Sorry, something went wrong while answering; your message is saved. Please try again.".into()]
            }
        };
        let reply = texts.pop().unwrap_or_default();
        for text in texts {
            self.send(&platform, &chat, &text, Some(&reply_to)).await;
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
        if !delivered {
            self.send(&platform, &chat, &reply, Some(&reply_to)).await;
        }
        // The reply is out: a restart from here on owes nobody a notice.
        let inner = Arc::clone(self);
        let k = key.to_owned();
        if let Err(e) = tokio::task::spawn_blocking(move || inner.forget_turn(&k)).await {
            tracing::error!(key, error = %e, "clearing a turn marker panicked");
        }
    }

    /// One turn, on the blocking pool. Returns what to send.
    pub(super) fn run_turn(
        &self,
        key: &str,
        event: &MessageEvent,
        id: u64,
        ctl: &TurnCtl,
        mut downloads: HashMap<u64, Vec<Download>>,
        progress: Option<UnboundedSender<StreamEvent>>,
    ) -> TurnReply {
        let now = self.now();
        let mut texts = Vec::new();
        // 1. The session.
        let session = {
            let mut store = self.store();
            self.resolve_session(&mut store, key, &event.source, now, &mut texts)
        };
        let session = match session {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(key, error = %e, "could not open the session");
                texts.push(format!(
                    "Sorry, I could not save your message ({e}). Please send it again."
                ));
                return TurnReply { texts };
            }
        };
        // 2. Media (SPEC X6): the user messages of this turn's messages that
        //    came with photos, voice or files — outside the store lock, as
        //    transcription and descriptions are calls to other services.
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.factory.default_model());
        let with_media: Vec<_> = lock(&self.inbox)
            .upto(key, id)
            .into_iter()
            .filter(|p| !p.media.is_empty())
            .collect();
        let services = self.factory.media();
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
        //    turn as running (X5, see `crate::inbox`).
        let stored = (|| {
            let mut store = self.store();
            let marker = TurnMarker {
                key: key.to_owned(),
                session_id: session.id.clone(),
                platform: event.source.platform.clone(),
                chat_id: event.source.chat_id.clone(),
                message_id: event.message_id.clone(),
                at_ms: now,
            };
            // The compacted view, not every original (SPEC X1).
            let mut history = store.load_view(&session.id)?;
            let mut added =
                self.transcribe_into(&mut store, key, &session.id, id, Some(&marker), &prepared)?;
            // The agent appends the user message itself (in memory; the
            // observer below does not store it again), so the history it is
            // given ends just before it.
            let user = match added.pop() {
                Some(entry) => entry.message,
                None => {
                    self.transcribe_missing(&mut store, &session.id, &event.text, now, &marker)?;
                    Message::user(event.text.as_str())
                }
            };
            history.extend(added);
            Ok::<_, StoreError>((history, user))
        })();
        let (history, user) = match stored {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(key, error = %e, "could not store the user message");
                texts.push(format!(
                    "Sorry, I could not save your message ({e}). Please send it again."
                ));
                return TurnReply { texts };
            }
        };
        if !answerable {
            // Nothing the model could read (a voice note, no transcription):
            // the notice is the answer.
            texts.push(prefix.trim_end().to_owned());
            return TurnReply { texts };
        }
        // 4. The agent (G4).
        let agent = match self.agent_for(key, &session, &event.source) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(key, error = %e, "could not build an agent");
                texts.push(format!(
                    "{prefix}Sorry, the assistant is unavailable: {e}. Your message is saved."
                ));
                return TurnReply { texts };
            }
        };
        // 5. Run, interruptibly, persisting as the run goes; approval
        //    questions of this turn go to this chat.
        ctl.attach(agent.interrupt_flag().clone());
        let _route = self.approvals.as_ref().map(|hub| {
            hub.bind(
                &session.id,
                Route {
                    key: key.to_owned(),
                    platform: event.source.platform.clone(),
                    chat_id: event.source.chat_id.clone(),
                    reply_to: event.message_id.clone(),
                },
            )
        });
        let budget = IterationBudget::new(agent.max_iterations());
        let mut observer = TurnObserver {
            ctl,
            flag: agent.interrupt_flag(),
            persist: TurnWriter::new(&self.store, &session.id).skipping_stored_user_message(),
            progress,
            fallback: None,
        };
        let outcome = agent.run_message(user, history, &budget, &mut observer);
        let fallback = observer.fallback.take();
        let TurnObserver {
            persist, progress, ..
        } = observer;
        // The preview ends with the run; the reply below is final.
        drop(progress);
        if let Some(e) = persist.failure() {
            tracing::error!(key, error = %e, "could not store the reply; the run was stopped");
            texts.push(format!("(Warning: this reply could not be saved: {e}.)"));
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
        // 6. What the user sees: notices and transcripts, then the answer.
        let prefix_len = prefix.len();
        let mut reply = prefix;
        reply.push_str(&outcome.final_text);
        if let Some(notice) = match &outcome.stop {
            // Cut short by a graceful stop, not by the user: say so, or the
            // partial answer would read as the whole one.
            StopReason::Interrupted if self.stopping.load(Ordering::SeqCst) => {
                Some(STOPPED_NOTICE.to_owned())
            }
            StopReason::Completed | StopReason::Interrupted => None,
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
            lock(&self.state).cache.invalidate(key);
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
        TurnReply { texts }
    }

    /// The cached agent of this session and signature, or a new one (with the
    /// session's stored system prompt, assembling and storing it once).
    pub(super) fn agent_for(
        &self,
        key: &str,
        session: &SessionRecord,
        source: &SessionSource,
    ) -> Result<Arc<Agent>, FactoryError> {
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.factory.default_model());
        let signature = self.factory.signature(&model);
        let now = self.now();
        if let Some(agent) = lock(&self.state)
            .cache
            .get(key, &session.id, &signature, now)
        {
            return Ok(agent);
        }
        let prompt = match &session.system_prompt {
            Some(p) => p.clone(),
            None => {
                let p = self.factory.system_prompt(source)?;
                self.store()
                    .set_system_prompt(&session.id, &p)
                    .map_err(|e| FactoryError(format!("could not store the system prompt: {e}")))?;
                p
            }
        };
        let agent = Arc::new(self.factory.build(&session.id, &model, &prompt)?);
        lock(&self.state)
            .cache
            .insert(key, &session.id, &signature, Arc::clone(&agent), now);
        Ok(agent)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::Mutex;

    use hermes_core::{LedgerEntry, Message, ToolCall};
    use hermes_runtime::store::Store;

    #[test]
    pub(super) fn a_failed_write_interrupts_the_run() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let ctl = TurnCtl::default();
        let flag = InterruptFlag::new();
        let mut observer = TurnObserver {
            ctl: &ctl,
            flag: &flag,
            persist: TurnWriter::new(&store, "no-such-session").skipping_stored_user_message(),
            progress: None,
            fallback: None,
        };
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::user("u"),
            0,
        )));
        assert!(!flag.is_set());
        let call = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("a", "t", "{}")],
        };
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(call, 0)));
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::tool("a", "r"),
            0,
        )));
        assert!(flag.is_set(), "no further tool may act unrecorded");
    }
}
