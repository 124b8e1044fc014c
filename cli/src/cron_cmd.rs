//! `hermes cron …`: the scheduled jobs in the store (SPEC Y1). The gateway
//! runs them; these commands create, change and inspect them, with the
//! same checks and sentences as the `cronjob` tool (`hermes_runtime::cron`).

use hermes_core::Clock;
use hermes_runtime::config::Settings;
use hermes_runtime::cron::{self, CronContext, CronSettings, JobSpec, STATUS_KEY, schedule};
use hermes_runtime::store::{JobRecord, RunRecord, SystemClock};
use serde_json::json;

use crate::app::{CliError, open_store, runtime};
use crate::args::CronCommand;

/// A scheduler that wrote its status within this long is running.
const ALIVE_MS: u64 = 15_000;

fn fail(e: cron::CronError) -> CliError {
    match e {
        cron::CronError::Store(e) => runtime(e),
        other => CliError::Config(other.to_string()),
    }
}

fn time(ms: Option<u64>, tz: &cron::TimeZone) -> String {
    ms.map_or_else(|| "-".into(), |ms| schedule::local_time(ms, tz))
}

fn job_json(job: &JobRecord, tz: &cron::TimeZone) -> serde_json::Value {
    let shown = cron::Schedule::from_stored(&job.schedule)
        .map(|s| s.describe(tz))
        .unwrap_or_else(|_| job.schedule.clone());
    json!({
        "id": job.id,
        "name": job.name,
        "schedule": shown,
        "prompt": job.prompt,
        "deliver": job.deliver,
        "state": job.state.as_str(),
        "next_run_ms": job.next_run_ms,
        "next_run": job.next_run_ms.map(|ms| schedule::local_time(ms, tz)),
        "last_run_ms": job.last_run_ms,
        "last_outcome": job.last_outcome,
        "runs_done": job.runs_done,
        "repeat": job.repeat,
        "script": job.script,
        "no_agent": job.no_agent,
    })
}

fn run_line(run: &RunRecord, tz: &cron::TimeZone) -> String {
    let mut line = format!(
        "{}  due {}  {}",
        run.id,
        schedule::local_time(run.due_ms, tz),
        run.state
    );
    if run.attempts > 0 {
        line.push_str(&format!("  attempts {}", run.attempts));
    }
    if let Some(e) = &run.error {
        line.push_str(&format!("  reason: {e}"));
    }
    if let Some(s) = &run.session_id {
        line.push_str(&format!("  session {s}"));
    }
    line
}

/// Runs one `cron` subcommand.
pub fn run(settings: &Settings, command: CronCommand) -> Result<i32, CliError> {
    let cron_settings =
        CronSettings::load(settings).map_err(|e| CliError::Config(e.to_string()))?;
    let tz = cron_settings.tz.clone();
    let ctx = CronContext {
        now_ms: SystemClock.now_ms(),
        tz: tz.clone(),
        platforms: None,
        scripts_dir: Some(hermes_runtime::tools::script::scripts_dir(&settings.home)),
    };
    let mut store = open_store(settings)?;
    match command {
        CronCommand::List { all, json } => {
            let jobs = store.jobs(all).map_err(runtime)?;
            if json {
                for job in &jobs {
                    println!("{}", job_json(job, &tz));
                }
            } else if jobs.is_empty() {
                println!("No scheduled jobs.");
            } else {
                println!("Times in {}.", schedule::zone_name(&tz));
                for job in &jobs {
                    println!("{}", cron::describe(job, &tz));
                }
            }
        }
        CronCommand::Create {
            schedule,
            prompt,
            name,
            deliver,
            repeat,
            script,
            no_agent,
            silent_unless_changed,
        } => {
            let spec = JobSpec {
                schedule: Some(schedule),
                prompt: Some(prompt.join(" ")),
                name,
                repeat,
                deliver,
                script,
                no_agent: Some(no_agent),
            };
            let job = cron::create(&mut store, &spec, None, &ctx).map_err(fail)?;
            if silent_unless_changed {
                // The mark (and, later, the last answer delivered) beside the job.
                let key = format!("{}{}", cron::UNLESS_CHANGED_PREFIX, job.id);
                if let Err(e) = store.kv_set(&key, "") {
                    let _ = cron::remove(&mut store, &job.id);
                    return Err(fail(e.into()));
                }
            }
            println!("{}", job.id);
            eprintln!("Next run: {}", time(job.next_run_ms, &tz));
        }
        CronCommand::Pause { id } => {
            let job = cron::set_paused(&mut store, &id, true, &ctx).map_err(fail)?;
            println!("Paused job {} ({}).", job.id, job.name);
        }
        CronCommand::Resume { id } => {
            let job = cron::set_paused(&mut store, &id, false, &ctx).map_err(fail)?;
            println!(
                "Resumed job {} ({}); next run {}.",
                job.id,
                job.name,
                time(job.next_run_ms, &tz)
            );
        }
        CronCommand::Run { id } => {
            let job = cron::run_now(&mut store, &id, &ctx).map_err(fail)?;
            println!(
                "Job {} ({}) is due now; a running gateway runs it within a second.",
                job.id, job.name
            );
        }
        CronCommand::Remove { id } => {
            let job = cron::remove(&mut store, &id).map_err(fail)?;
            println!(
                "Removed job {} ({}); it will not run again.",
                job.id, job.name
            );
        }
        CronCommand::Runs { id, limit } => {
            let job = cron::find(&store, &id).map_err(fail)?;
            let runs = store.job_runs(&job.id, limit).map_err(runtime)?;
            if runs.is_empty() {
                println!("Job {} has not run yet.", job.id);
            }
            for run in &runs {
                println!("{}", run_line(run, &tz));
            }
        }
        CronCommand::Status => {
            let status = store.kv_get(STATUS_KEY).map_err(runtime)?;
            let parsed = status
                .as_deref()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok());
            let at = parsed.as_ref().and_then(|v| v["at_ms"].as_u64());
            let owner = parsed
                .as_ref()
                .and_then(|v| v["owner"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let jobs = store.jobs(false).map_err(runtime)?;
            match at {
                Some(at) if ctx.now_ms.saturating_sub(at) <= ALIVE_MS => println!(
                    "Scheduler: running (gateway {owner}), last tick {}.",
                    schedule::local_time(at, &tz)
                ),
                Some(at) => println!(
                    "Scheduler: not running; the last tick was {} (gateway {owner}). Start `hermes gateway run`.",
                    schedule::local_time(at, &tz)
                ),
                None => {
                    println!("Scheduler: no gateway has run it yet. Start `hermes gateway run`.")
                }
            }
            println!(
                "Jobs: {} ({} active).",
                jobs.len(),
                jobs.iter()
                    .filter(|j| j.state == hermes_runtime::store::JobState::Active)
                    .count()
            );
        }
    }
    Ok(0)
}
