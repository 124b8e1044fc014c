//! Scheduled jobs and their runs (SPEC Y1): the rows, and the store's
//! operations on them, for every backend.
//!
//! A job is a row of `cron_jobs`; each time it falls due, one row of
//! `cron_runs` is *claimed* for it — in the same transaction that moves the
//! job's `next_run_ms` on, conditional on the old value — so of any number
//! of gateways seeing the same due time exactly one gets the run. The run
//! row is then the run's outbox: its answer is stored before it is sent,
//! and the delivery recorded after. Every write made while running or
//! delivering carries the fence of the job's lease (`cron:job:<id>`), so a
//! gateway presumed dead cannot record anything once another took the run
//! over.

use std::fmt;

use super::{Fence, Store, StoreError};

/// A job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Runs when due.
    Active,
    /// Kept, not run until resumed.
    Paused,
    /// A one-off that ran, or a job whose repeat count is used up.
    Done,
}

impl JobState {
    /// The stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Active => "active",
            JobState::Paused => "paused",
            JobState::Done => "done",
        }
    }

    /// From the stored spelling.
    pub fn parse(s: &str) -> Option<JobState> {
        match s {
            "active" => Some(JobState::Active),
            "paused" => Some(JobState::Paused),
            "done" => Some(JobState::Done),
            _ => None,
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scheduled job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// Its id (`j` + 10 hex digits); commands accept unique prefixes.
    pub id: String,
    /// A short name for lists.
    pub name: String,
    /// The schedule in its stored form (the runtime's `cron::Schedule::stored`).
    pub schedule: String,
    /// The user message each run starts with.
    pub prompt: String,
    /// Where answers go (`origin`, `local`, `telegram`, `telegram:CHAT[:THREAD]`).
    pub deliver: String,
    /// The platform of the chat that created the job, if a chat did.
    pub origin_platform: Option<String>,
    /// That chat.
    pub origin_chat: Option<String>,
    /// That chat's thread (a forum topic), if any.
    pub origin_thread: Option<String>,
    /// How many runs in all (`None`: until removed; one-offs run once).
    pub repeat: Option<u32>,
    /// Runs claimed so far.
    pub runs_done: u32,
    /// Active, paused or done.
    pub state: JobState,
    /// When it next falls due (ms since the epoch), if ever.
    pub next_run_ms: Option<u64>,
    /// When it last fell due.
    pub last_run_ms: Option<u64>,
    /// What became of the last run, in words (`delivered`, `delivery failed: …`).
    pub last_outcome: Option<String>,
    /// When it was created.
    pub created_at_ms: u64,
    /// A script under `$HERMES_HOME/scripts/` each run starts with (its
    /// path there); its output is the agent's context.
    pub script: Option<String>,
    /// With a script: its output is the answer, with no model call.
    pub no_agent: bool,
}

impl JobRecord {
    /// A job that runs once, due at `now_ms`, from no chat: how an event
    /// (a webhook delivery, a `send_message` call) enters the scheduler, so
    /// that its answer reaches its target through the outbox exactly once.
    pub fn one_off(id: String, name: String, prompt: String, deliver: String, now_ms: u64) -> Self {
        JobRecord {
            id,
            name,
            schedule: format!("at:{now_ms}"),
            prompt,
            deliver,
            origin_platform: None,
            origin_chat: None,
            origin_thread: None,
            repeat: Some(1),
            runs_done: 0,
            state: JobState::Active,
            next_run_ms: Some(now_ms),
            last_run_ms: None,
            last_outcome: None,
            created_at_ms: now_ms,
            script: None,
            no_agent: false,
        }
    }
}

/// A run's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Claimed; the agent runs (or its gateway died and it will be re-run).
    Running,
    /// Answered; the answer waits to be delivered (the outbox).
    Pending,
    /// Delivered to its target.
    Delivered,
    /// Kept only in the store (`deliver: local`, or nothing to send).
    Stored,
    /// The agent could not produce an answer.
    Failed,
    /// Answered, but every delivery attempt failed; the answer is kept.
    DeliveryFailed,
    /// Fell due while no gateway ran, with `catch_up = "skip"`.
    Skipped,
}

impl RunState {
    /// The stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Pending => "pending",
            RunState::Delivered => "delivered",
            RunState::Stored => "stored",
            RunState::Failed => "failed",
            RunState::DeliveryFailed => "delivery_failed",
            RunState::Skipped => "skipped",
        }
    }

    /// From the stored spelling.
    pub fn parse(s: &str) -> Option<RunState> {
        [
            RunState::Running,
            RunState::Pending,
            RunState::Delivered,
            RunState::Stored,
            RunState::Failed,
            RunState::DeliveryFailed,
            RunState::Skipped,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// Running or waiting for delivery: the job's one open run.
    pub const fn is_open(self) -> bool {
        matches!(self, RunState::Running | RunState::Pending)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().replace('_', " "))
    }
}

/// One run of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// Its id (`r` + 12 hex digits).
    pub id: String,
    /// The job.
    pub job_id: String,
    /// The due time it was claimed for.
    pub due_ms: u64,
    /// Its state.
    pub state: RunState,
    /// When it was claimed.
    pub claimed_at_ms: u64,
    /// When it ended (delivered, stored, failed for good).
    pub finished_at_ms: Option<u64>,
    /// The session the agent ran in.
    pub session_id: Option<String>,
    /// The answer (kept whatever became of the delivery).
    pub answer: Option<String>,
    /// Why the run or its delivery failed.
    pub error: Option<String>,
    /// Delivery attempts made.
    pub attempts: u32,
    /// When the next delivery attempt is due.
    pub next_attempt_ms: Option<u64>,
}

/// A claim: the job's due time moves on and a run row appears, in one
/// transaction, or nothing happens (another claimer was first, or the job
/// was paused, removed or changed meanwhile).
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    /// The job.
    pub job_id: &'a str,
    /// The due time as read (`next_run_ms`); the claim holds only if it is
    /// still that.
    pub due_ms: u64,
    /// The job's next due time after this run; `None` ends it (state done).
    pub next_run_ms: Option<u64>,
    /// The new run's id.
    pub run_id: &'a str,
    /// `Running`, or `Skipped` (catch-up skipped: recorded, not run).
    pub state: RunState,
    /// Now.
    pub now_ms: u64,
}

/// What a runner records about a run (under the job lease's fence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunUpdate {
    /// The new state.
    pub state: RunState,
    /// The session, once there is one.
    pub session_id: Option<String>,
    /// The answer, once there is one.
    pub answer: Option<String>,
    /// The failure, if any.
    pub error: Option<String>,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// When to try delivering again.
    pub next_attempt_ms: Option<u64>,
    /// Set when the run ended.
    pub finished_at_ms: Option<u64>,
    /// The job's `last_outcome` after this.
    pub outcome: String,
}

/// Scheduled jobs (SPEC Y1).
impl Store {
    /// Stores a new job.
    pub fn job_insert(&mut self, job: &JobRecord) -> Result<(), StoreError> {
        self.backend.job_insert(job)
    }

    /// The job `id_or_prefix` names (exactly, else the only one starting
    /// with it); several candidates are [`StoreError::AmbiguousId`].
    pub fn find_job(&self, id_or_prefix: &str) -> Result<Option<JobRecord>, StoreError> {
        self.backend.find_job(id_or_prefix)
    }

    /// Every job (done ones only with `all`), by creation.
    pub fn jobs(&self, all: bool) -> Result<Vec<JobRecord>, StoreError> {
        self.backend.jobs(all)
    }

    /// Writes the editable fields of `job` (name, schedule, prompt,
    /// deliver, repeat, state, next run, script, no agent). `false` when there is no such job.
    pub fn job_update(&mut self, job: &JobRecord) -> Result<bool, StoreError> {
        self.backend.job_update(job)
    }

    /// Removes the job; a run it had not started yet is removed with it.
    /// `false` when there was none.
    pub fn job_delete(&mut self, id: &str) -> Result<bool, StoreError> {
        self.backend.job_delete(id)
    }

    /// Up to `limit` active jobs due at `now_ms` with no open run, earliest
    /// first.
    pub fn due_jobs(&self, now_ms: u64, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        self.backend.due_jobs(now_ms, limit)
    }

    /// Claims a run (see [`Claim`]); `false` when another claimer was
    /// first or the job changed.
    pub fn job_claim(&mut self, claim: &Claim<'_>) -> Result<bool, StoreError> {
        self.backend.job_claim(claim)
    }

    /// Every run still running or waiting for delivery, oldest first.
    pub fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.backend.open_runs()
    }

    /// The job's `limit` latest runs, newest first.
    pub fn job_runs(&self, job_id: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.backend.job_runs(job_id, limit)
    }

    /// Records `update` on the run, and its outcome on the job, if `fence`
    /// (the job's lease) still holds; [`StoreError::Fenced`] otherwise.
    pub fn run_update(
        &mut self,
        run_id: &str,
        update: &RunUpdate,
        fence: &Fence,
    ) -> Result<(), StoreError> {
        self.backend.run_update(run_id, update, fence)
    }

    /// A run recorded as delivered whose message the platform reported
    /// failed later (a status callback): it becomes
    /// [`RunState::DeliveryFailed`] with `error`, and the job's
    /// `last_outcome` becomes `outcome` unless a later run was claimed
    /// since. Only a delivered run changes, so the same report twice
    /// changes it once: `true` when this call changed it. No fence: the
    /// run has ended, no lease holder writes it any more.
    pub fn run_failed_after_delivery(
        &mut self,
        run_id: &str,
        error: &str,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        self.backend
            .run_failed_after_delivery(run_id, error, outcome)
    }
}

/// A fresh job id.
pub fn new_job_id() -> String {
    format!("j{:010x}", rand::random::<u64>() & 0xff_ffff_ffff)
}

/// A fresh run id.
pub fn new_run_id() -> String {
    format!("r{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// The lease a job's runs are fenced by.
pub fn job_lease(job_id: &str) -> String {
    format!("cron:job:{job_id}")
}

pub(super) fn corrupt(id: &str, what: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        session_id: id.to_owned(),
        what: what.into(),
    }
}

pub(super) fn job_state(id: &str, s: &str) -> Result<JobState, StoreError> {
    JobState::parse(s).ok_or_else(|| corrupt(id, format!("job state {s:?}")))
}

pub(super) fn run_state(id: &str, s: &str) -> Result<RunState, StoreError> {
    RunState::parse(s).ok_or_else(|| corrupt(id, format!("run state {s:?}")))
}

pub(super) fn opt_u64(id: &str, what: &str, v: Option<i64>) -> Result<Option<u64>, StoreError> {
    v.map(|v| super::from_i64(id, what, v)).transpose()
}

pub(super) fn opt_i64(what: &'static str, v: Option<u64>) -> Result<Option<i64>, StoreError> {
    v.map(|v| super::to_i64(what, v)).transpose()
}

pub(super) fn count(id: &str, what: &str, v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| corrupt(id, format!("{what} = {v}")))
}

/// The one job of a prefix look-up, or the ambiguity.
pub(super) fn one_job_of(
    prefix: &str,
    mut found: Vec<JobRecord>,
) -> Result<Option<JobRecord>, StoreError> {
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(StoreError::AmbiguousId {
            prefix: prefix.to_owned(),
            candidates: found.into_iter().map(|j| j.id).collect(),
        }),
    }
}
