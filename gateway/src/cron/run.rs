//! One run of a job: the agent, then the delivery through the outbox (see
//! the module docs of `cron`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hermes_core::{IterationBudget, Message, StopReason};
use hermes_runtime::cron::{PLATFORM, SESSION_KEY_PREFIX, UNLESS_CHANGED_PREFIX};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{
    Fence, JobRecord, NewSession, RunRecord, RunState, RunUpdate, StoreError,
};
use hermes_runtime::turn::{TurnView, drive};

use super::home::{self, Destination};
use super::script::ScriptPart;
use super::send_files;
use super::{Inner, lock};
use crate::adapter::{AdapterError, OutgoingFile};
use crate::delivery;
use crate::event::{ChatType, SessionSource};
use crate::lease::Held;

/// What the agent part of a run came to.
pub(super) enum Executed {
    /// An answer (possibly empty), in this session when the agent ran.
    Answer {
        session_id: Option<String>,
        text: String,
    },
    /// No answer: why.
    Failed {
        session_id: Option<String>,
        error: String,
    },
    /// Stopped by a shutdown, or the lease went to another gateway: the
    /// run stays open and is run again.
    Left,
}

/// A job's run stops when the scheduler does, also when the stop came
/// before the run began (the driver asks at every event; see
/// [`TurnView::stop_requested`]).
struct StopsWithTheScheduler<'a> {
    stopping: &'a AtomicBool,
}

impl TurnView for StopsWithTheScheduler<'_> {
    fn stop_requested(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// The user message of a run: the job's prompt, after a line that tells
/// the model nobody is there to answer questions, and what the job's
/// script printed, if it has one.
fn run_message(job: &JobRecord, script_output: Option<&str>, marker: &str) -> String {
    if job.id.starts_with(super::WEBHOOK_JOB_PREFIX) {
        return job.prompt.clone();
    }
    let context = match (&job.script, script_output.map(str::trim_end)) {
        (Some(script), Some("")) => {
            format!("[The job's script {script} ran and printed nothing.]\n\n")
        }
        (Some(script), Some(out)) => format!(
            "## Script output\nThe job's script {script} ran just now and printed this; use it \
             as context:\n\n```\n{out}\n```\n\n"
        ),
        _ => String::new(),
    };
    format!(
        "[Scheduled job {} \"{}\": no user is present; your final answer is delivered as it is \
         (answer just {marker} when there is nothing worth reporting: nothing is sent).]\n\n{context}{}",
        job.id, job.name, job.prompt
    )
}

impl Inner {
    /// The task that works on one job's open run, holding its lease.
    pub(super) async fn work(self: Arc<Self>, job_id: String, held: Held) {
        let _permit = self.tasks.acquire().await;
        let keeper = hermes_runtime::task::spawn_on(
            &self.handle,
            held.clone()
                .keep(Arc::clone(&self.store), self.timing.lease),
        );
        let inner = Arc::clone(&self);
        let (jid, h) = (job_id.clone(), held.clone());
        match hermes_runtime::task::spawn_blocking(move || inner.carry_on(&jid, &h)).await {
            Ok(Ok(())) => {}
            Ok(Err(StoreError::Fenced { .. })) => {
                tracing::warn!(job = %job_id, "another gateway took this job's run over");
            }
            Ok(Err(e)) => {
                tracing::error!(job = %job_id, error = %e, "scheduled run failed to record")
            }
            Err(e) => tracing::error!(job = %job_id, error = %e, "scheduled run panicked"),
        }
        held.lose();
        keeper.abort();
        let inner = Arc::clone(&self);
        let fence = held.fence().clone();
        let released =
            hermes_runtime::task::spawn_blocking(move || inner.store().lease_release(&fence, None))
                .await;
        if let Ok(Err(e)) = released {
            tracing::warn!(job = %job_id, error = %e, "cannot release the job's lease");
        }
        lock(&self.busy).remove(&job_id);
    }

    /// Looks again (the lease is ours now: nobody else changes the run)
    /// and carries the open run on: run the agent, then deliver.
    fn carry_on(&self, job_id: &str, held: &Held) -> Result<(), StoreError> {
        let Some(mut run) = self
            .store()
            .job_runs(job_id, 4)?
            .into_iter()
            .find(|r| r.state.is_open())
        else {
            return Ok(());
        };
        let Some(job) = self.store().find_job(job_id)?.filter(|j| j.id == job_id) else {
            return Ok(());
        };
        let fence = held.fence().clone();
        if run.state == RunState::Running {
            let executed = match self.script_part(&job) {
                ScriptPart::Done(executed) => executed,
                ScriptPart::Context(output) => self.execute(&job, &fence, output.as_deref()),
            };
            let (session_id, text) = match executed {
                Executed::Left => return Ok(()),
                Executed::Failed { session_id, error } => {
                    tracing::warn!(job = %job.id, run = %run.id, %error, "scheduled run failed");
                    let update = RunUpdate {
                        state: RunState::Failed,
                        session_id,
                        answer: None,
                        outcome: format!("failed: {error}"),
                        error: Some(error),
                        attempts: 0,
                        next_attempt_ms: None,
                        finished_at_ms: Some(self.clock.now_ms()),
                    };
                    return self.store().run_update(&run.id, &update, &fence);
                }
                Executed::Answer { session_id, text } => (session_id, text),
            };
            // The outbox: the answer is durable before anything is sent.
            run.session_id = session_id;
            run.answer = Some(text);
            run.state = RunState::Pending;
        }
        self.deliver(&job, &run, held)
    }

    /// The agent part: a fresh session, the prompt, the normal loop.
    fn execute(&self, job: &JobRecord, fence: &Fence, script_output: Option<&str>) -> Executed {
        let failed = |session_id: Option<&str>, error: String| Executed::Failed {
            session_id: session_id.map(str::to_owned),
            error,
        };
        let key = format!("{SESSION_KEY_PREFIX}{}", job.id);
        let new = NewSession {
            session_key: Some(&key),
            platform: Some(PLATFORM),
            chat_id: Some(&job.id),
            ..NewSession::default()
        };
        let session = match self.store().reset(&key, &new) {
            Ok(s) => s,
            Err(e) => return failed(None, format!("cannot start its session: {e}")),
        };
        let source = SessionSource {
            platform: PLATFORM.into(),
            chat_id: job.id.clone(),
            chat_type: ChatType::Dm,
            user_id: PLATFORM.into(),
            user_name: None,
            thread_id: None,
        };
        // Spending caps (issue 44): the job's account, usually the owner's.
        let limits = &self.settings.limits;
        let account = limits.unattended_account.clone();
        if limits.any() {
            let now = self.clock.now_ms();
            let reached = limits
                .spent(&self.store(), &account, now)
                .ok()
                .and_then(|spent| limits.reached(&account, &spent));
            if let Some(reached) = reached {
                return failed(Some(&session.id), limits.refusal(&reached, now));
            }
        }
        let model = self.factory.default_model();
        let agent = self.factory.system_prompt(&source).and_then(|prompt| {
            if let Err(e) = self.store().set_system_prompt(&session.id, &prompt) {
                tracing::warn!(session = %session.id, error = %e, "cannot store the system prompt");
            }
            self.factory.build(&session.id, &model, &prompt)
        });
        let agent = match agent {
            Ok(a) => a,
            Err(e) => {
                return failed(
                    Some(&session.id),
                    format!("the assistant is unavailable: {e}"),
                );
            }
        };
        // A stop interrupts the flags of the runs it finds; the view below
        // stops a run that a stop reached before it began (the core clears
        // the flag when a run starts).
        lock(&self.running).push((job.id.clone(), agent.interrupt_flag().clone()));
        let budget = IterationBudget::new(agent.max_iterations());
        // The job's lease fences every write: a run another gateway took
        // over stops at its next entry (the driver stops a run whose
        // transcript cannot follow).
        let writer = TurnWriter::new(&self.store, &session.id)
            .fenced(vec![fence.clone()])
            .charging({
                use hermes_runtime::pricing::PriceBook as _;
                let prices = self.factory.prices(&self.store, self.clock.now_ms());
                Box::new(hermes_runtime::spending::charger(
                    self.settings.limits.clone(),
                    account,
                    move |model| prices.price(model).map(|(p, _)| p),
                    self.clock.clone(),
                ))
            });
        let driven = drive(
            &agent,
            Message::user(run_message(
                job,
                script_output,
                &self.settings.silent_marker,
            )),
            Vec::new(),
            &budget,
            writer,
            &mut StopsWithTheScheduler {
                stopping: &self.stopping,
            },
        );
        lock(&self.running).retain(|(j, _)| j != &job.id);
        if let Some(e) = driven.store_failure() {
            tracing::warn!(job = %job.id, error = %e, "the run's transcript could not be stored");
            return Executed::Left;
        }
        let outcome = driven.outcome;
        if outcome.stop == StopReason::Interrupted && self.stopping.load(Ordering::SeqCst) {
            return Executed::Left;
        }
        let notice = outcome.stop.notice(budget.total());
        let mut text = outcome.final_text.trim().to_owned();
        if matches!(
            outcome.stop,
            StopReason::ModelError(_)
                | StopReason::ContextOverflow(_)
                | StopReason::ToolAborted { .. }
        ) && text.is_empty()
        {
            return failed(
                Some(&session.id),
                notice.unwrap_or_else(|| "no answer".into()),
            );
        }
        if let Some(notice) = notice {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&notice);
        }
        Executed::Answer {
            session_id: Some(session.id),
            text,
        }
    }

    /// Sends a pending run's answer once; records the delivery after it was
    /// sent, or the failure and when to try again.
    fn deliver(&self, job: &JobRecord, run: &RunRecord, held: &Held) -> Result<(), StoreError> {
        let fence = held.fence();
        let now = self.clock.now_ms();
        let answer = run.answer.clone().unwrap_or_default();
        let mut update = RunUpdate {
            state: RunState::Pending,
            session_id: run.session_id.clone(),
            answer: run.answer.clone(),
            error: None,
            attempts: run.attempts,
            next_attempt_ms: None,
            finished_at_ms: None,
            outcome: String::new(),
        };
        if let Some(quiet) = self.quiet(job, &answer)? {
            update.state = RunState::Stored;
            update.finished_at_ms = Some(now);
            update.outcome = quiet.into();
            return self.store().run_update(&run.id, &update, fence);
        }
        // Bound first: the store's guard must be gone before the arms write.
        let resolved = home::destination(&self.store(), job, &self.settings.home_channels);
        let files = send_files::queued(&self.store(), &job.id)?;
        let destination = match resolved {
            Ok(Some(d)) if !answer.trim().is_empty() || !files.is_empty() => d,
            Ok(_) => {
                update.state = RunState::Stored;
                update.finished_at_ms = Some(now);
                update.outcome = "stored (not sent)".into();
                return self.store().run_update(&run.id, &update, fence);
            }
            Err(reason) => {
                // Nothing to retry: the configuration says nowhere.
                send_files::forget(&mut self.store(), &job.id)?;
                update.state = RunState::DeliveryFailed;
                update.finished_at_ms = Some(now);
                update.outcome = format!("delivery failed: {reason}");
                update.error = Some(reason);
                return self.store().run_update(&run.id, &update, fence);
            }
        };
        // The answer is in the outbox before the first attempt.
        if run.state == RunState::Running || run.attempts == 0 {
            update.outcome = "answered; delivering".into();
            self.store().run_update(&run.id, &update, fence)?;
        }
        if !held.is_valid() || self.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Files first (each marked sent as it goes: a retry sends only what
        // is left), then the text.
        let sent = self
            .send_files(&job.id, &destination, files)
            .and_then(|()| match answer.trim().is_empty() {
                true => Ok(Vec::new()),
                false => self.send(&destination, &answer),
            });
        let now = self.clock.now_ms();
        update.attempts = run.attempts.saturating_add(1);
        let mut accepted = Vec::new();
        match sent {
            Ok(ids) => {
                accepted = ids;
                tracing::info!(job = %job.id, run = %run.id, platform = %destination.platform, "scheduled answer delivered");
                self.remember_answer(job, &answer)?;
                update.state = RunState::Delivered;
                update.finished_at_ms = Some(now);
                update.outcome =
                    format!("delivered to {}:{}", destination.platform, destination.chat);
            }
            Err((reason, retryable))
                if !retryable || update.attempts >= self.timing.max_attempts =>
            {
                tracing::warn!(job = %job.id, run = %run.id, %reason, "delivery failed for good; the answer is kept");
                update.state = RunState::DeliveryFailed;
                update.finished_at_ms = Some(now);
                update.outcome = format!("delivery failed: {reason}");
                update.error = Some(reason);
            }
            Err((reason, _)) => {
                let wait = self
                    .timing
                    .retry_base
                    .saturating_mul(1 << update.attempts.saturating_sub(1).min(10));
                let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(job = %job.id, run = %run.id, %reason, attempt = update.attempts, "delivery failed; retrying");
                update.next_attempt_ms = Some(now.saturating_add(wait_ms));
                update.outcome = format!(
                    "delivery failed (attempt {}), retrying: {reason}",
                    update.attempts
                );
                update.error = Some(reason);
            }
        }
        if update.finished_at_ms.is_some() {
            send_files::forget(&mut self.store(), &job.id)?;
        }
        self.store().run_update(&run.id, &update, fence)?;
        // Only now that it is recorded delivered may a late report turn it.
        self.late
            .remember(&destination.platform, &run.id, &accepted)
    }

    /// Sends the files waiting with job `job_id`'s message that are not
    /// sent yet, marking each in the store as soon as it went.
    fn send_files(
        &self,
        job_id: &str,
        to: &Destination,
        mut files: Vec<send_files::QueuedFile>,
    ) -> Result<(), (String, bool)> {
        for i in 0..files.len() {
            if files[i].sent {
                continue;
            }
            let file = &files[i];
            let content = std::fs::read(&file.path)
                .map_err(|e| (format!("{} is gone from the outbox: {e}", file.name), false))?;
            let outgoing = OutgoingFile {
                file_name: file.name.clone(),
                content,
                caption: String::new(),
                kind: file.kind(),
                media_type: file.media_type.clone(),
            };
            self.handle
                .block_on(self.runner.send_file(&to.platform, &to.chat, &outgoing))
                .map_err(|e| {
                    let retryable = !matches!(
                        e,
                        AdapterError::Undeliverable { .. } | AdapterError::Unsupported { .. }
                    );
                    (e.to_string(), retryable)
                })?;
            files[i].sent = true;
            send_files::save(&mut self.store(), job_id, &files)
                .map_err(|e| (format!("the store: {e}"), true))?;
        }
        Ok(())
    }

    /// Why this answer is recorded and not sent: it is the silent marker,
    /// or the job delivers only changes and it is the last one delivered.
    fn quiet(&self, job: &JobRecord, answer: &str) -> Result<Option<&'static str>, StoreError> {
        if answer
            .trim_start()
            .starts_with(self.settings.silent_marker.as_str())
        {
            return Ok(Some("silent (nothing to report)"));
        }
        let last = self
            .store()
            .kv_get(&format!("{UNLESS_CHANGED_PREFIX}{}", job.id))?;
        Ok(match last {
            Some(last) if last.trim() == answer.trim() => Some("unchanged (not sent)"),
            _ => None,
        })
    }

    /// Keeps a delivered answer of a job that delivers only changes.
    fn remember_answer(&self, job: &JobRecord, answer: &str) -> Result<(), StoreError> {
        let key = format!("{UNLESS_CHANGED_PREFIX}{}", job.id);
        let mut store = self.store();
        if store.kv_get(&key)?.is_some() {
            store.kv_set(&key, answer)?;
        }
        Ok(())
    }

    /// Sends `text`: the ids of the messages the platform accepted, where
    /// its adapter reports failures late (`late`); the error says why, and
    /// whether trying again could help (`false`: the platform refused it for
    /// good, e.g. outside WhatsApp's 24-hour window).
    fn send(&self, to: &Destination, text: &str) -> Result<Vec<String>, (String, bool)> {
        if !self.runner.has_platform(&to.platform) {
            return Err((
                format!("{} is not configured on this gateway", to.platform),
                true,
            ));
        }
        let (sent, accepted) =
            self.handle
                .block_on(delivery::accepted_during(self.runner.send_text(
                    &to.platform,
                    &to.chat,
                    to.thread.as_deref(),
                    text,
                )));
        sent.map(|()| accepted).map_err(|e| {
            let retryable = !matches!(e, AdapterError::Undeliverable { .. });
            (e.to_string(), retryable)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use hermes_core::{
        Agent, ChatRequest, Completion, FinishReason, Model, ModelError, StreamSink, ToolRegistry,
    };
    use hermes_runtime::store::Store;
    use hermes_runtime::turn::Unwatched;

    struct Counting(AtomicUsize);

    impl Model for Counting {
        fn complete(
            &self,
            _request: &ChatRequest<'_>,
            _sink: &mut dyn StreamSink,
        ) -> Result<Completion, ModelError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Completion {
                content: Some("report".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }

    /// A stop that reached a run before it began (it interrupted the flag
    /// the run registered) must not be forgotten when the core clears the
    /// flag at the run's start.
    #[test]
    fn a_run_a_stop_reached_before_it_began_makes_no_model_call() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let session = store
            .lock()
            .unwrap()
            .create_session(&NewSession::default())
            .unwrap()
            .id;
        let model = Arc::new(Counting(AtomicUsize::new(0)));
        let agent = Agent::new(model.clone(), Arc::new(ToolRegistry::new()), "sys");
        let stopping = AtomicBool::new(true);
        let run = |view: &mut dyn TurnView| {
            // What `Scheduler::stop` does to the runs it finds.
            agent.interrupt_flag().interrupt();
            drive(
                &agent,
                Message::user("the job"),
                Vec::new(),
                &IterationBudget::new(3),
                TurnWriter::new(&store, &session),
                view,
            )
            .outcome
            .stop
        };
        // Without the scheduler's view the core's clear loses the stop.
        assert_eq!(run(&mut Unwatched), StopReason::Completed);
        assert_eq!(model.0.load(Ordering::SeqCst), 1);
        let mut view = StopsWithTheScheduler {
            stopping: &stopping,
        };
        assert_eq!(run(&mut view), StopReason::Interrupted);
        assert_eq!(model.0.load(Ordering::SeqCst), 1, "no further model call");
    }
}
