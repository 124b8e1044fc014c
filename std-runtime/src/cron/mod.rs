//! Scheduled jobs (SPEC Y1): schedules, delivery targets, and the one set
//! of operations (create, update, pause, resume, remove, run now) that the
//! `cronjob` tool, `hermes cron` and the gateway's `/cron` share, so each
//! front-end refuses the same bad input with the same sentence and nothing
//! is half-created. The scheduler that runs the jobs lives in the gateway
//! (`hermes_gateway::cron`); the rows in the store (`store/src/jobs.rs`,
//! crate `hermes-store`).

pub mod schedule;
pub mod script;
pub mod settings;
pub mod target;

pub use jiff::tz::TimeZone;

pub use schedule::{ACCEPTED_FORMS, Schedule, ScheduleError, time_zone};
pub use settings::{CatchUp, CronSettings};
pub use target::{TARGET_FORMS, Target};

use crate::store::{JobRecord, JobState, Store, StoreError, new_job_id};

/// The longest prompt a job may have, in bytes.
pub const MAX_PROMPT_BYTES: usize = 16 * 1024;
/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 80;
/// The session key prefix of cron runs (`cron:JOB_ID`): a session with it
/// is never offered the `cronjob` tool.
pub const SESSION_KEY_PREFIX: &str = "cron:";
/// The key-value entry a running scheduler refreshes every few seconds
/// (`{"owner": …, "at_ms": …}`), for `hermes cron status`.
pub const STATUS_KEY: &str = "cron:status";
/// A job created with `--silent-unless-changed` has a key-value entry
/// under this prefix and its id, holding the last answer delivered: a run
/// whose answer is the same is recorded, not delivered.
pub const UNLESS_CHANGED_PREFIX: &str = "cron:unless_changed:";
/// The platform name cron sessions are stored under.
pub const PLATFORM: &str = "cron";

/// Why an operation on jobs was refused. Each is one sentence for the user.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    /// A bad schedule.
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    /// Anything else the caller gave that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// No job with that id.
    #[error(
        "no scheduled job {0:?}; `hermes cron list` (or the cronjob tool's list) shows the ids"
    )]
    NotFound(String),
    /// The store failed; nothing was changed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The chat a job was created from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// Its platform.
    pub platform: String,
    /// Its chat.
    pub chat: String,
    /// Its thread, if any.
    pub thread: Option<String>,
}

/// What a new job (or a change to one) says; `None` keeps (or defaults).
#[derive(Clone, Debug, Default)]
pub struct JobSpec {
    /// The schedule as written.
    pub schedule: Option<String>,
    /// The prompt.
    pub prompt: Option<String>,
    /// A name.
    pub name: Option<String>,
    /// How many runs in all.
    pub repeat: Option<u32>,
    /// Where answers go.
    pub deliver: Option<String>,
    /// A script of `$HERMES_HOME/scripts/` each run starts with (`""`
    /// removes it in an update).
    pub script: Option<String>,
    /// With the script: its output is delivered as it is, no model call.
    pub no_agent: Option<bool>,
}

/// What the operations need besides the store.
#[derive(Clone, Debug)]
pub struct CronContext {
    /// Now, ms since the epoch.
    pub now_ms: u64,
    /// The time zone schedules are read and shown in.
    pub tz: TimeZone,
    /// The platforms a target may name (`None`: any; the CLI cannot know
    /// which adapters a gateway will start).
    pub platforms: Option<Vec<String>>,
    /// `$HERMES_HOME/scripts`, where job scripts must live (`None`: jobs
    /// cannot have scripts here).
    pub scripts_dir: Option<std::path::PathBuf>,
}

fn check_prompt(prompt: &str) -> Result<String, CronError> {
    let prompt = prompt.trim();
    if prompt.is_empty() {
        return Err(CronError::Invalid(
            "the prompt is empty; say what the job should do".into(),
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(CronError::Invalid(format!(
            "the prompt is {} bytes; at most {MAX_PROMPT_BYTES} are accepted",
            prompt.len()
        )));
    }
    if prompt.contains('\0') {
        return Err(CronError::Invalid(
            "the prompt contains a NUL character".into(),
        ));
    }
    Ok(prompt.to_owned())
}

fn check_name(name: &str) -> Result<String, CronError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.contains(char::is_control) {
        return Err(CronError::Invalid(format!(
            "a job name is 1 to {MAX_NAME_CHARS} characters on one line"
        )));
    }
    Ok(name.to_owned())
}

fn default_name(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or_default().trim();
    let mut name: String = line.chars().take(40).collect();
    if line.chars().count() > 40 {
        name.push('…');
    }
    name
}

fn check_target(
    deliver: &str,
    origin: Option<&Origin>,
    ctx: &CronContext,
) -> Result<Target, CronError> {
    let target = Target::parse(deliver).map_err(CronError::Invalid)?;
    if target == Target::Origin && origin.is_none() {
        return Err(CronError::Invalid(
            "this job has no chat to deliver to (it was not created in a chat): give deliver \
             `local`, a platform name for its home channel, or `platform:chat_id`"
                .into(),
        ));
    }
    if let (Some(p), Some(known)) = (target.platform(), &ctx.platforms)
        && !known.iter().any(|k| k == p)
    {
        return Err(CronError::Invalid(format!(
            "{p} is not a configured platform here (configured: {}); use {TARGET_FORMS}",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    Ok(target)
}

fn check_repeat(repeat: Option<u32>) -> Result<Option<u32>, CronError> {
    match repeat {
        Some(0) => Err(CronError::Invalid(
            "repeat must be at least 1 (leave it out to repeat until removed)".into(),
        )),
        other => Ok(other),
    }
}

/// The script and no-agent flag a spec comes to, from `current` ones.
fn check_script(
    spec: &JobSpec,
    current: (Option<String>, bool),
    ctx: &CronContext,
) -> Result<(Option<String>, bool), CronError> {
    let script = match spec.script.as_deref().map(str::trim) {
        None => current.0,
        Some("") => None,
        Some(given) => {
            let Some(dir) = &ctx.scripts_dir else {
                return Err(CronError::Invalid(
                    "jobs made here cannot have scripts (no $HERMES_HOME)".into(),
                ));
            };
            Some(script::check_script(dir, given).map_err(CronError::Invalid)?)
        }
    };
    let no_agent = spec.no_agent.unwrap_or(current.1 && script.is_some());
    if no_agent && script.is_none() {
        return Err(CronError::Invalid(
            "no-agent needs a script: its output is what gets delivered".into(),
        ));
    }
    Ok((script, no_agent))
}

/// Creates a job: everything is checked before anything is stored.
pub fn create(
    store: &mut Store,
    spec: &JobSpec,
    origin: Option<&Origin>,
    ctx: &CronContext,
) -> Result<JobRecord, CronError> {
    let schedule_text = spec
        .schedule
        .as_deref()
        .ok_or_else(|| CronError::Invalid(format!("a schedule is needed: {ACCEPTED_FORMS}")))?;
    let schedule = Schedule::parse(schedule_text, ctx.now_ms, &ctx.tz)?;
    let (script, no_agent) = check_script(spec, (None, false), ctx)?;
    let given_prompt = spec.prompt.as_deref().unwrap_or_default();
    // A script whose output is the answer needs no prompt.
    let prompt = if no_agent && given_prompt.trim().is_empty() {
        String::new()
    } else {
        check_prompt(given_prompt)?
    };
    let name = match (&spec.name, &script) {
        (Some(n), _) => check_name(n)?,
        (None, Some(script)) if prompt.is_empty() => default_name(script),
        (None, _) => default_name(&prompt),
    };
    // Made outside a chat (the CLI), a job is stored only unless told.
    let default_target = if origin.is_some() { "origin" } else { "local" };
    let target = check_target(
        spec.deliver.as_deref().unwrap_or(default_target),
        origin,
        ctx,
    )?;
    let repeat = check_repeat(spec.repeat)?;
    let job = JobRecord {
        id: new_job_id(),
        name,
        schedule: schedule.stored(),
        prompt,
        deliver: target.to_string(),
        origin_platform: origin.map(|o| o.platform.clone()),
        origin_chat: origin.map(|o| o.chat.clone()),
        origin_thread: origin.and_then(|o| o.thread.clone()),
        repeat: if schedule.recurs() { repeat } else { Some(1) },
        runs_done: 0,
        state: JobState::Active,
        next_run_ms: schedule.first(ctx.now_ms, &ctx.tz),
        last_run_ms: None,
        last_outcome: None,
        created_at_ms: ctx.now_ms,
        script,
        no_agent,
    };
    store.job_insert(&job)?;
    Ok(job)
}

/// The job `id` names (a unique prefix will do).
pub fn find(store: &Store, id: &str) -> Result<JobRecord, CronError> {
    let id = id.trim();
    if id.is_empty() {
        return Err(CronError::Invalid("a job id is needed".into()));
    }
    store
        .find_job(id)?
        .ok_or_else(|| CronError::NotFound(id.to_owned()))
}

fn save(store: &mut Store, job: &JobRecord) -> Result<(), CronError> {
    if store.job_update(job)? {
        Ok(())
    } else {
        Err(CronError::NotFound(job.id.clone()))
    }
}

/// Changes what `spec` gives; a new schedule starts over from now.
pub fn update(
    store: &mut Store,
    id: &str,
    spec: &JobSpec,
    ctx: &CronContext,
) -> Result<JobRecord, CronError> {
    let mut job = find(store, id)?;
    if let Some(text) = &spec.schedule {
        let schedule = Schedule::parse(text, ctx.now_ms, &ctx.tz)?;
        job.schedule = schedule.stored();
        job.next_run_ms = schedule.first(ctx.now_ms, &ctx.tz);
        if job.state == JobState::Done {
            job.state = JobState::Active;
        }
        if !schedule.recurs() {
            job.repeat = Some(job.runs_done.saturating_add(1));
        }
    }
    if let Some(p) = &spec.prompt {
        job.prompt = check_prompt(p)?;
    }
    if let Some(n) = &spec.name {
        job.name = check_name(n)?;
    }
    if let Some(d) = &spec.deliver {
        let origin = job.origin_platform.clone().map(|platform| Origin {
            platform,
            chat: job.origin_chat.clone().unwrap_or_default(),
            thread: job.origin_thread.clone(),
        });
        job.deliver = check_target(d, origin.as_ref(), ctx)?.to_string();
    }
    if spec.repeat.is_some() {
        job.repeat = check_repeat(spec.repeat)?;
    }
    (job.script, job.no_agent) = check_script(spec, (job.script.take(), job.no_agent), ctx)?;
    if job.prompt.is_empty() && !job.no_agent {
        return Err(CronError::Invalid(
            "this job has no prompt; give one for the agent to run".into(),
        ));
    }
    save(store, &job)?;
    Ok(job)
}

/// Pauses (`true`) or resumes a job. A resumed recurring job is next due
/// at its first time after now, not for the paused period.
pub fn set_paused(
    store: &mut Store,
    id: &str,
    paused: bool,
    ctx: &CronContext,
) -> Result<JobRecord, CronError> {
    let mut job = find(store, id)?;
    if job.state == JobState::Done {
        return Err(CronError::Invalid(format!(
            "job {} has finished; give it a new schedule (update) to run it again",
            job.id
        )));
    }
    if paused {
        job.state = JobState::Paused;
    } else if job.state == JobState::Paused {
        job.state = JobState::Active;
        let schedule = Schedule::from_stored(&job.schedule)?;
        if schedule.recurs() && job.next_run_ms.is_some_and(|n| n < ctx.now_ms) {
            job.next_run_ms = schedule.first(ctx.now_ms, &ctx.tz);
        }
    }
    save(store, &job)?;
    Ok(job)
}

/// Makes the job due now (the scheduler runs it within a tick).
pub fn run_now(store: &mut Store, id: &str, ctx: &CronContext) -> Result<JobRecord, CronError> {
    let mut job = find(store, id)?;
    job.state = JobState::Active;
    if job.repeat.is_some_and(|r| job.runs_done >= r) {
        job.repeat = Some(job.runs_done.saturating_add(1));
    }
    job.next_run_ms = Some(ctx.now_ms);
    save(store, &job)?;
    Ok(job)
}

/// Removes a job; it never runs again.
pub fn remove(store: &mut Store, id: &str) -> Result<JobRecord, CronError> {
    let job = find(store, id)?;
    if !store.job_delete(&job.id)? {
        return Err(CronError::NotFound(job.id));
    }
    store.kv_delete(&[&format!("{UNLESS_CHANGED_PREFIX}{}", job.id)])?;
    Ok(job)
}

/// The next due time of `job` after the run due at `due_ms`, at `now_ms`:
/// `None` when it has run its last time.
pub fn next_due(
    job: &JobRecord,
    due_ms: u64,
    now_ms: u64,
    tz: &TimeZone,
) -> Result<Option<u64>, ScheduleError> {
    if job
        .repeat
        .is_some_and(|r| job.runs_done.saturating_add(1) >= r)
    {
        return Ok(None);
    }
    Ok(Schedule::from_stored(&job.schedule)?.next_after(due_ms, now_ms, tz))
}

/// Whether a session key is a cron run's (never offered the `cronjob` tool).
pub fn is_cron_session(key: Option<&str>) -> bool {
    key.is_some_and(|k| k.starts_with(SESSION_KEY_PREFIX))
}

/// One line per job, for lists (tool, CLI, `/cron`).
pub fn describe(job: &JobRecord, tz: &TimeZone) -> String {
    let schedule = Schedule::from_stored(&job.schedule)
        .map(|s| s.describe(tz))
        .unwrap_or_else(|_| job.schedule.clone());
    let next = job
        .next_run_ms
        .filter(|_| job.state == JobState::Active)
        .map(|ms| schedule::local_time(ms, tz))
        .unwrap_or_else(|| "-".into());
    let script = match (&job.script, job.no_agent) {
        (Some(s), true) => format!("  script: {s} (no agent)"),
        (Some(s), false) => format!("  script: {s}"),
        (None, _) => String::new(),
    };
    format!(
        "{}  {}  [{}]  {}  next: {}  deliver: {}{script}  last: {}",
        job.id,
        job.name,
        job.state,
        schedule,
        next,
        job.deliver,
        job.last_outcome.as_deref().unwrap_or("-")
    )
}
