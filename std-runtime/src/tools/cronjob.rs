//! The `cronjob` tool (SPEC Y1): the agent schedules, lists and changes
//! jobs, with hermes-agent's schema. Offered in chats and the CLI, never to
//! a cron run itself (the front-ends check [`crate::cron::is_cron_session`]
//! before registering it), so a job cannot schedule more jobs.

use std::sync::{Arc, Mutex, MutexGuard};

use hermes_core::{Clock, Tool, ToolContext, ToolError, ToolSpec, schema_text};
use jiff::tz::TimeZone;
use serde::Deserialize;

use super::{failed, parse_args, spec};
use crate::cron::{self, ACCEPTED_FORMS, CronContext, JobSpec, Origin, TARGET_FORMS};
use crate::store::{JobRecord, Store};
use crate::sync::lock;

/// The tool's name (and its toolset's).
pub const NAME: &str = "cronjob";

/// Whether the configured toolsets (`None`: all) include `cronjob`.
pub fn offered(toolsets: Option<&[String]>) -> bool {
    toolsets.is_none_or(|t| t.iter().any(|n| n == NAME))
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Action {
    Create,
    List,
    Update,
    Pause,
    Resume,
    Remove,
    Run,
}

#[derive(Deserialize)]
struct Args {
    action: Action,
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(default)]
    deliver: Option<String>,
}

/// The `cronjob` tool of one session.
pub struct CronjobTool {
    spec: ToolSpec,
    store: Arc<Mutex<Store>>,
    origin: Option<Origin>,
    tz: TimeZone,
    platforms: Option<Vec<String>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for CronjobTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronjobTool")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl CronjobTool {
    /// A tool over `store` for a session started in `origin` (a chat; `None`
    /// in the CLI), reading schedules in `tz`; `platforms` are those a
    /// target may name (`None`: any).
    pub fn new(
        store: Arc<Mutex<Store>>,
        origin: Option<Origin>,
        tz: TimeZone,
        platforms: Option<Vec<String>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let description = format!(
            "Schedule a task to run later or repeatedly, with no user present: at each due time a \
             fresh agent runs `prompt` and its final answer is delivered. action 'create' needs \
             schedule and prompt (optional name, repeat = number of runs, deliver); 'list'; \
             'update' (job_id and what changes); 'pause', 'resume', 'remove', 'run' (now) need \
             job_id. schedule: {ACCEPTED_FORMS}. deliver: {TARGET_FORMS}; default origin. Write \
             the prompt so it stands alone: the run sees nothing of this conversation."
        );
        CronjobTool {
            spec: spec(
                NAME,
                description,
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["create", "list", "update", "pause", "resume", "remove", "run"]},
                        "job_id": {"type": "string", "description": "The job (update, pause, resume, remove, run); a unique prefix will do."},
                        "prompt": {"type": "string", "description": "What the agent does at each run (create, update)."},
                        "schedule": {"type": "string", "description": "When: 30m, every 2h, 0 9 * * *, 2026-12-24T09:00."},
                        "name": {"type": "string", "description": "A short name."},
                        "repeat": {"type": "integer", "minimum": 1, "description": "How many runs in all (recurring schedules)."},
                        "deliver": {"type": "string", "description": "origin, local, telegram, or platform:chat_id[:thread_id]."}
                    },
                    "required": ["action"]
                }"#,
                ),
            ),
            store,
            origin,
            tz,
            platforms,
            clock,
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    fn ctx(&self) -> CronContext {
        CronContext {
            now_ms: self.clock.now_ms(),
            tz: self.tz.clone(),
            platforms: self.platforms.clone(),
            // The agent cannot attach scripts: a script is the user's choice.
            scripts_dir: None,
        }
    }

    fn mine(&self, job: &JobRecord) -> bool {
        match &self.origin {
            None => true,
            Some(o) => {
                job.origin_platform.as_deref() == Some(o.platform.as_str())
                    && job.origin_chat.as_deref() == Some(o.chat.as_str())
            }
        }
    }

    fn list(&self) -> Result<String, ToolError> {
        let jobs = self
            .store()
            .jobs(false)
            .map_err(|e| failed(e.to_string()))?;
        let lines: Vec<String> = jobs
            .iter()
            .filter(|j| self.mine(j))
            .map(|j| cron::describe(j, &self.tz))
            .collect();
        if lines.is_empty() {
            return Ok("No scheduled jobs.".into());
        }
        Ok(format!(
            "Scheduled jobs (times in {}):\n{}",
            cron::schedule::zone_name(&self.tz),
            lines.join("\n")
        ))
    }

    fn job_id(args: &Args) -> Result<&str, ToolError> {
        args.job_id
            .as_deref()
            .ok_or_else(|| failed("this action needs job_id (see action 'list')"))
    }
}

impl Tool for CronjobTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: Args = parse_args(NAME, arguments)?;
        let spec = JobSpec {
            schedule: args.schedule.clone(),
            prompt: args.prompt.clone(),
            name: args.name.clone(),
            repeat: args.repeat,
            deliver: args.deliver.clone(),
            script: None,
            no_agent: None,
        };
        let ctx = self.ctx();
        let fail = |e: cron::CronError| failed(e.to_string());
        let shown =
            |verb: &str, job: &JobRecord| format!("{verb}: {}", cron::describe(job, &self.tz));
        match args.action {
            Action::List => self.list(),
            Action::Create => {
                let job = cron::create(&mut self.store(), &spec, self.origin.as_ref(), &ctx)
                    .map_err(fail)?;
                Ok(shown("Scheduled", &job))
            }
            Action::Update => {
                let job = cron::update(&mut self.store(), Self::job_id(&args)?, &spec, &ctx)
                    .map_err(fail)?;
                Ok(shown("Updated", &job))
            }
            Action::Pause | Action::Resume => {
                let paused = args.action == Action::Pause;
                let job = cron::set_paused(&mut self.store(), Self::job_id(&args)?, paused, &ctx)
                    .map_err(fail)?;
                Ok(shown(if paused { "Paused" } else { "Resumed" }, &job))
            }
            Action::Run => {
                let job =
                    cron::run_now(&mut self.store(), Self::job_id(&args)?, &ctx).map_err(fail)?;
                Ok(shown("Runs now", &job))
            }
            Action::Remove => {
                let job = cron::remove(&mut self.store(), Self::job_id(&args)?).map_err(fail)?;
                Ok(format!(
                    "Removed job {} ({}); it will not run again.",
                    job.id, job.name
                ))
            }
        }
    }
}
