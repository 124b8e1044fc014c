//! The scheduler (SPEC Y1, Y2): scheduled jobs run inside `hermes gateway
//! run`, and their answers are delivered exactly once.
//!
//! Every tick (at least once a second) on the blocking pool:
//! 1. **Claim** each due job (`Store::due_jobs`): one transaction moves the
//!    job's next due time on — conditional on the value read — and inserts
//!    the run, so of N gateways on one database exactly one claims a due
//!    time. A job with an open run is not due again until that run ends.
//! 2. **Sweep** the open runs (`running`, or `pending` delivery whose retry
//!    is due) that no task of this process works on: acquire the job's
//!    lease (`cron:job:ID`; on SQLite by taking over, as this process holds
//!    the home's lock, on PostgreSQL only once the last holder's lapsed)
//!    and carry the run on — a `running` run whose gateway died is run
//!    again; a `pending` one is delivered.
//!
//! A run (`run.rs`): a fresh session `cron:JOB_ID`, the prompt as the user
//! message, the normal agent (the factory's, without the `cronjob` tool),
//! each entry stored as it is produced; then the answer is stored in the
//! run row (the outbox) *before* it is sent and the delivery recorded
//! *after*. Every write carries the job lease's fence. A kill before the
//! answer is stored means the run is run again after the restart; after,
//! that the stored answer is sent. The one window left is between the
//! platform accepting the message and the commit that records it: a kill
//! exactly there sends it again (no platform here takes an idempotency key).

pub mod background;
pub mod home;
mod late;
mod run;
mod script;
pub mod send;
pub mod send_files;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hermes_core::{Clock, ToolRegistry};
use hermes_runtime::cron::{CatchUp, CronSettings, Origin, is_cron_session};
use hermes_runtime::store::{Claim, JobRecord, RunState, Store, StoreError, new_run_id};
use hermes_runtime::sync::lock;
use hermes_runtime::tools::CronjobTool;
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::lease::{Acquired, LeaseTiming, try_acquire};
use crate::runner::{AgentFactory, GatewayRunner};

pub use hermes_runner::cron_chat::chat_command;
pub use hermes_runtime::cron::STATUS_KEY;
/// Job ids of webhook events (`crate::webhook`) start with this; a
/// scheduled job's with `j`. Their runs take the stored prompt as the whole
/// user message (it already says where the event came from).
pub const WEBHOOK_JOB_PREFIX: &str = "w";
/// A due time older than this when claimed was missed (no gateway ran).
pub const MISSED_AFTER: Duration = Duration::from_secs(60);
/// How often the status entry is written.
const STATUS_EVERY_MS: u64 = 5_000;
/// Jobs claimed per tick at most (the rest next tick).
const CLAIMS_PER_TICK: usize = 256;
/// How often finished event rows are pruned.
const PRUNE_EVERY_MS: u64 = 3_600_000;
/// A webhook event's row is kept this long after its run: within it, a
/// retried delivery still finds the row and is a no-op.
const WEBHOOK_ROWS_KEPT_MS: u64 = 7 * 86_400_000;
/// A sent message's or a background notice's row, this long.
const MESSAGE_ROWS_KEPT_MS: u64 = 86_400_000;

/// Offers the `cronjob` tool to chat sessions (never to a cron run's).
#[derive(Clone)]
pub struct CronOffer {
    store: Arc<Mutex<Store>>,
    settings: CronSettings,
    platforms: Vec<String>,
    clock: Arc<dyn Clock>,
    /// The `cronjob` toolset is enabled.
    enabled: bool,
    /// `send_message` is offered, to these allowed chats besides the homes.
    send_allowed: Option<Vec<String>>,
    /// Where `send_message`'s `MEDIA:` files are read from, and the outbox
    /// they are copied to.
    send_files: Option<(hermes_runtime::tools::ConfinedFiles, std::path::PathBuf)>,
}

impl std::fmt::Debug for CronOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronOffer")
            .field("platforms", &self.platforms)
            .finish_non_exhaustive()
    }
}

impl CronOffer {
    /// Jobs go into `store`; targets may name `platforms`; the tool is
    /// offered when `toolsets` (`None`: all) include `cronjob`.
    pub fn new(
        store: Arc<Mutex<Store>>,
        settings: CronSettings,
        platforms: Vec<String>,
        clock: Arc<dyn Clock>,
        toolsets: Option<&[String]>,
    ) -> Self {
        CronOffer {
            store,
            settings,
            platforms,
            clock,
            enabled: hermes_runtime::tools::cronjob::offered(toolsets),
            send_allowed: None,
            send_files: None,
        }
    }

    /// `send_message` also sends `MEDIA:<path>` files read through
    /// `files` (the file tools' confinement), copied into `outbox`.
    pub fn with_send_files(
        mut self,
        files: hermes_runtime::tools::ConfinedFiles,
        outbox: std::path::PathBuf,
    ) -> Self {
        self.send_files = Some((files, outbox));
        self
    }

    /// Also offers `send_message` (to every session, scheduled runs
    /// included): to the home channels and the `allowed` chats
    /// (`[agent] send_message_targets`), when `toolsets` (`None`: all)
    /// include `send_message`.
    pub fn with_send_message(mut self, allowed: Vec<String>, toolsets: Option<&[String]>) -> Self {
        if toolsets.is_none_or(|t| t.iter().any(|n| n == send::NAME)) {
            self.send_allowed = Some(allowed);
        }
        self
    }

    /// Registers the tool in `registry` unless `session_id` is a cron
    /// run's session (or unknown); its origin is the session's chat.
    pub fn register(&self, registry: &mut ToolRegistry, session_id: &str) {
        if let Some(allowed) = &self.send_allowed {
            let mut tool = send::SendMessageTool::new(
                Arc::clone(&self.store),
                Arc::clone(&self.clock),
                self.platforms.clone(),
                self.settings.home_channels.clone(),
                allowed.clone(),
            );
            if let Some((files, outbox)) = &self.send_files {
                tool = tool.with_files(files.clone(), outbox.clone());
            }
            registry.register(Box::new(tool));
        }
        if !self.enabled {
            return;
        }
        let session = match lock(&self.store).session(session_id) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session_id, error = %e, "cannot read the session; no cronjob tool");
                return;
            }
        };
        if is_cron_session(session.session_key.as_deref()) {
            return;
        }
        let thread = thread_of(&session);
        let origin = match (session.platform, session.chat_id) {
            (Some(platform), Some(chat)) => Some(Origin {
                platform,
                chat,
                thread,
            }),
            _ => None,
        };
        registry.register(Box::new(CronjobTool::new(
            Arc::clone(&self.store),
            origin,
            self.settings.tz.clone(),
            Some(self.platforms.clone()),
            Arc::clone(&self.clock),
        )));
    }
}

/// The thread (forum topic) a chat session belongs to: what its key has
/// after the key of its chat (`crate::session::session_key` appends
/// `:{thread}`), tried against every spelling the chat's key can have. The
/// longer, per-member spelling is tried first, so a member's key is never
/// read as a shared key with a thread.
fn thread_of(session: &hermes_runtime::store::SessionRecord) -> Option<String> {
    use crate::event::{ChatType, SessionSource};
    let key = session.session_key.as_deref()?;
    let (platform, chat) = (session.platform.clone()?, session.chat_id.clone()?);
    let source = |chat_type| SessionSource {
        platform: platform.clone(),
        chat_id: chat.clone(),
        chat_type,
        user_id: session.user_id.clone().unwrap_or_default(),
        user_name: None,
        thread_id: None,
    };
    let spellings = [
        crate::session::session_key(&source(ChatType::Group), true),
        crate::session::session_key(&source(ChatType::Group), false),
        crate::session::session_key(&source(ChatType::Dm), true),
    ];
    for chat_key in spellings {
        if key == chat_key {
            return None;
        }
        if let Some(thread) = key
            .strip_prefix(chat_key.as_str())
            .and_then(|r| r.strip_prefix(':'))
            && !thread.is_empty()
        {
            return Some(thread.to_owned());
        }
    }
    None
}

/// How the scheduler is timed.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerTiming {
    /// Between ticks (at most a second).
    pub tick: Duration,
    /// The job leases.
    pub lease: LeaseTiming,
    /// The first delivery retry waits this long; each next one twice as long.
    pub retry_base: Duration,
    /// Delivery attempts before a run is "delivery failed" for good.
    pub max_attempts: u32,
    /// How long a job's script may run.
    pub script_timeout: Duration,
}

impl Default for SchedulerTiming {
    fn default() -> Self {
        SchedulerTiming {
            tick: Duration::from_secs(1),
            lease: LeaseTiming::default(),
            retry_base: Duration::from_secs(5),
            max_attempts: 5,
            script_timeout: hermes_runtime::tools::script::DEFAULT_SCRIPT_TIMEOUT,
        }
    }
}

/// What the scheduler needs.
pub struct SchedulerDeps {
    /// The runner, started: it sends the answers and says which bots this
    /// gateway serves.
    pub runner: GatewayRunner,
    /// Builds the runs' agents (the runner's).
    pub factory: Arc<dyn AgentFactory>,
    /// The store (the runner's).
    pub store: Arc<Mutex<Store>>,
    /// Now.
    pub clock: Arc<dyn Clock>,
    /// `[gateway] timezone`, `[cron] catch_up`, home channels.
    pub settings: CronSettings,
    /// Timing.
    pub timing: SchedulerTiming,
    /// Where jobs' scripts run (the terminal's sandbox settings:
    /// `hermes_runtime::assemble::script_env`); `None`: a job with a
    /// script fails with that reason.
    pub scripts: Option<hermes_runtime::tools::ToolEnv>,
}

impl std::fmt::Debug for SchedulerDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerDeps")
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// The running scheduler. Dropping it does not stop it: call [`Scheduler::stop`].
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

struct Inner {
    runner: GatewayRunner,
    factory: Arc<dyn AgentFactory>,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    settings: CronSettings,
    timing: SchedulerTiming,
    scripts: Option<hermes_runtime::tools::ToolEnv>,
    /// This gateway's name in lease rows.
    owner: String,
    /// SQLite: this process alone uses the database (take leases over).
    exclusive: bool,
    /// Jobs a task of this process works on (claimed, running, delivering).
    busy: Mutex<HashSet<String>>,
    /// Interrupt flags of the agents running now (stopped on shutdown).
    running: Mutex<Vec<(String, hermes_core::InterruptFlag)>>,
    stopping: AtomicBool,
    stop: watch::Sender<bool>,
    handle: Handle,
    last_status_ms: AtomicU64,
    last_prune_ms: AtomicU64,
    tasks: tokio::sync::Semaphore,
    /// Deliveries the platform reported failed after accepting them.
    late: Arc<late::LateFailures>,
}

impl Scheduler {
    /// Starts ticking on the current tokio runtime.
    pub fn start(deps: SchedulerDeps) -> Scheduler {
        let exclusive = lock(&deps.store).kind() == hermes_runtime::store::BackendKind::Sqlite;
        let owner = deps.runner.instance_id().to_owned();
        let late = late::LateFailures::new(Arc::clone(&deps.store), Arc::clone(&deps.clock));
        deps.runner.set_late_failures(late.handler());
        let inner = Arc::new(Inner {
            runner: deps.runner,
            factory: deps.factory,
            store: deps.store,
            clock: deps.clock,
            settings: deps.settings,
            timing: SchedulerTiming {
                tick: deps.timing.tick.min(Duration::from_secs(1)),
                ..deps.timing
            },
            scripts: deps.scripts,
            owner,
            exclusive,
            busy: Mutex::new(HashSet::new()),
            running: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            stop: watch::Sender::new(false),
            handle: Handle::current(),
            last_status_ms: AtomicU64::new(0),
            last_prune_ms: AtomicU64::new(0),
            tasks: tokio::sync::Semaphore::new(64),
            late,
        });
        let ticking = Arc::clone(&inner);
        hermes_runtime::task::spawn(async move { ticking.tick_loop().await });
        Scheduler { inner }
    }

    /// Stops ticking and interrupts the runs in progress (a run that did
    /// not store its answer runs again at the next start); waits up to
    /// `within` for their tasks to end.
    pub async fn stop(&self, within: Duration) {
        let inner = &self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        inner.stop.send_replace(true);
        for (_, flag) in lock(&inner.running).iter() {
            flag.interrupt();
        }
        let deadline = tokio::time::Instant::now() + within;
        while !lock(&inner.busy).is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Inner {
    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    async fn tick_loop(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        loop {
            let inner = Arc::clone(&self);
            match hermes_runtime::task::spawn_blocking(move || inner.tick()).await {
                Ok(Ok(())) => crate::ops::ops().scheduler_tick(),
                Ok(Err(e)) => tracing::warn!(error = %e, "scheduler tick failed; retrying"),
                Err(e) => tracing::error!(error = %e, "scheduler tick panicked"),
            }
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(self.timing.tick) => {}
            }
            if *stop.borrow() {
                return;
            }
        }
    }

    /// One tick: status, claims, the sweep of open runs.
    fn tick(self: &Arc<Self>) -> Result<(), StoreError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        let now = self.clock.now_ms();
        if now.saturating_sub(self.last_status_ms.load(Ordering::Relaxed)) >= STATUS_EVERY_MS {
            let status = serde_json::json!({"owner": self.owner, "at_ms": now}).to_string();
            self.store().kv_set(STATUS_KEY, &status)?;
            self.last_status_ms.store(now, Ordering::Relaxed);
        }
        if now.saturating_sub(self.last_prune_ms.load(Ordering::Relaxed)) >= PRUNE_EVERY_MS {
            self.last_prune_ms.store(now, Ordering::Relaxed);
            match prune_events(&mut self.store(), now) {
                Ok(0) => {}
                Ok(n) => tracing::info!(pruned = n, "scheduler: finished event rows pruned"),
                Err(e) => tracing::warn!(error = %e, "scheduler: cannot prune event rows"),
            }
            if let Err(e) = late::prune(&mut self.store(), now) {
                tracing::warn!(error = %e, "scheduler: cannot prune the sent messages of deliveries");
            }
        }
        let due = self.store().due_jobs(now, CLAIMS_PER_TICK)?;
        for job in due {
            if let Err(e) = self.claim(&job, now) {
                tracing::warn!(job = %job.id, error = %e, "cannot claim a due job");
            }
        }
        self.sweep(now)
    }

    /// Whether this gateway should act for a job delivered to `platform`:
    /// stored-only jobs, and jobs of a platform this gateway serves (or
    /// has no adapter for: its run fails with that reason).
    fn acts_for(&self, platform: Option<&str>) -> bool {
        match platform {
            None => true,
            Some(p) => self.runner.serves(p) || !self.runner.has_platform(p),
        }
    }

    fn claim(self: &Arc<Self>, job: &JobRecord, now: u64) -> Result<(), StoreError> {
        let Some(due) = job.next_run_ms else {
            return Ok(());
        };
        if lock(&self.busy).contains(&job.id)
            || !self.acts_for(home::target_platform(job).as_deref())
        {
            return Ok(());
        }
        let next = match hermes_runtime::cron::next_due(job, due, now, &self.settings.tz) {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "unreadable schedule; job left alone");
                return Ok(());
            }
        };
        let missed = now.saturating_sub(due) > MISSED_AFTER.as_millis() as u64;
        let state = if missed && self.settings.catch_up == CatchUp::Skip {
            RunState::Skipped
        } else {
            RunState::Running
        };
        let run_id = new_run_id();
        lock(&self.busy).insert(job.id.clone());
        let claimed = self.store().job_claim(&Claim {
            job_id: &job.id,
            due_ms: due,
            next_run_ms: next,
            run_id: &run_id,
            state,
            now_ms: now,
        });
        if !matches!(claimed, Ok(true)) || state != RunState::Running {
            lock(&self.busy).remove(&job.id);
            if let Ok(true) = claimed {
                tracing::info!(job = %job.id, due, "missed run skipped (catch_up = \"skip\")");
            }
            return claimed.map(|_| ());
        }
        tracing::info!(job = %job.id, run = %run_id, due, "job due: run claimed");
        self.take_and_work(&job.id)
    }

    /// Open runs nobody here works on: carry them on if their job's lease
    /// can be had.
    fn sweep(self: &Arc<Self>, now: u64) -> Result<(), StoreError> {
        let open = self.store().open_runs()?;
        for run in open {
            if run.state == RunState::Pending && run.next_attempt_ms.is_some_and(|t| t > now) {
                continue;
            }
            if lock(&self.busy).contains(&run.job_id) {
                continue;
            }
            let job = match self.store().find_job(&run.job_id) {
                Ok(Some(job)) if job.id == run.job_id => job,
                _ => continue,
            };
            if !self.acts_for(home::target_platform(&job).as_deref()) {
                continue;
            }
            lock(&self.busy).insert(job.id.clone());
            self.take_and_work(&job.id)?;
        }
        Ok(())
    }

    /// With `job_id` marked busy: acquires its lease and starts a task on
    /// its open run; unmarks it when the lease is another's.
    fn take_and_work(self: &Arc<Self>, job_id: &str) -> Result<(), StoreError> {
        let acquired = try_acquire(
            &self.store,
            &hermes_runtime::store::job_lease(job_id),
            &self.owner,
            self.timing.lease.ttl,
            self.exclusive,
            false,
        );
        let held = match acquired {
            Ok(Acquired::Granted { held, .. }) => held,
            Ok(Acquired::Busy { .. }) => {
                lock(&self.busy).remove(job_id);
                return Ok(());
            }
            Err(e) => {
                lock(&self.busy).remove(job_id);
                return Err(e);
            }
        };
        let inner = Arc::clone(self);
        let job_id = job_id.to_owned();
        hermes_runtime::task::spawn_on(&self.handle, async move { inner.work(job_id, held).await });
        Ok(())
    }
}

/// Deletes the rows of one-off event jobs — webhook events (`w…`), sent
/// messages (`m…`), background notices (`b…`) — whose run ended long
/// enough ago; their runs stay as history. Returns how many went.
pub fn prune_events(store: &mut Store, now_ms: u64) -> Result<usize, StoreError> {
    let mut pruned = 0;
    for job in store.jobs(true)? {
        let kept = if job.id.starts_with(WEBHOOK_JOB_PREFIX) {
            WEBHOOK_ROWS_KEPT_MS
        } else if job.id.starts_with(send::MESSAGE_JOB_PREFIX)
            || job.id.starts_with(background::NOTICE_JOB_PREFIX)
        {
            MESSAGE_ROWS_KEPT_MS
        } else {
            continue;
        };
        let ended_long_ago = job.state == hermes_runtime::store::JobState::Done
            && job
                .last_run_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= kept);
        if ended_long_ago
            && store
                .job_runs(&job.id, 16)?
                .iter()
                .all(|r| !r.state.is_open())
            && store.job_delete(&job.id)?
        {
            pruned += 1;
        }
    }
    Ok(pruned)
}
