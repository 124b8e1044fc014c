//! The latency from a scheduled job's due time to its delivery (SPEC Y1),
//! through the real scheduler at its production timing (a tick a second):
//! the runner over the in-process test adapter, a real SQLite store, the
//! system clock, a scripted model that answers at once (so what is
//! measured is the scheduler: the tick's phase, the claim, the run's
//! session and transcript writes, the outbox, the send).
//!
//! `cargo run --release -p hermes-benches --example cron_latency [JOBS [IDLE]]`
//!
//! Jobs fall due 1.37 s apart, so their due times fall at every phase of
//! the tick; the report is min / p50 / p95 / max over JOBS (default 20).
//! IDLE more jobs (default 0), due in 30 days, sit in the store meanwhile —
//! the scheduler's load with many jobs — and the process's resident memory
//! (`VmRSS`, `VmHWM`) is printed at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_core::{
    ChatRequest, Clock, Completion, FinishReason, Message, Model, ModelError, StreamSink,
};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::cron::{Scheduler, SchedulerDeps, SchedulerTiming};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{TestAdapter, TestAgentFactory, last_user_text};
use hermes_runtime::cron::{self, CronContext, CronSettings, JobSpec, Origin, TimeZone};
use hermes_runtime::store::{Store, SystemClock};

/// Answers every run at once.
struct AtOnce;

impl Model for AtOnce {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let messages: Vec<Message> = request.messages.iter().map(|e| e.message.clone()).collect();
        // The prompt ("job N") is the run message's last line.
        let user = last_user_text(&messages);
        Ok(Completion {
            content: Some(user.lines().last().unwrap_or_default().to_owned()),
            finish_reason: Some(FinishReason::Stop),
            ..Completion::default()
        })
    }
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn main() {
    let jobs: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("JOBS is a number"))
        .unwrap_or(20);
    let idle: usize = std::env::args()
        .nth(2)
        .map(|n| n.parse().expect("IDLE is a number"))
        .unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Mutex::new(
        Store::open(&dir.path().join("state.db")).unwrap(),
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let adapter = TestAdapter::new("test");
    let factory = TestAgentFactory::new(Arc::new(AtOnce));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: factory.clone(),
        store: Arc::clone(&store),
        clock: Arc::clone(&clock),
        config: GatewayConfig::default(),
    });
    rt.block_on(runner.start()).unwrap();
    let settings = CronSettings {
        tz: TimeZone::UTC,
        ..CronSettings::default()
    };
    let scheduler = rt.block_on(async {
        Scheduler::start(SchedulerDeps {
            runner: runner.clone(),
            factory,
            store: Arc::clone(&store),
            clock,
            settings: settings.clone(),
            timing: SchedulerTiming::default(),
            scripts: None,
        })
    });
    let origin = Origin {
        platform: "test".into(),
        chat: "chat".into(),
        thread: None,
    };
    if idle > 0 {
        let mut s = store.lock().unwrap();
        let ctx = CronContext {
            now_ms: now_ms(),
            tz: TimeZone::UTC,
            platforms: None,
            scripts_dir: None,
        };
        for i in 0..idle {
            let spec = JobSpec {
                schedule: Some("30d".into()),
                prompt: Some(format!("idle {i}")),
                name: Some(format!("idle{i}")),
                ..JobSpec::default()
            };
            cron::create(&mut s, &spec, Some(&origin), &ctx).unwrap();
        }
    }
    // Due times 1.37 s apart from 2 s on (ISO timestamps carry seconds, so
    // each job is moved to its exact due millisecond after creation).
    let start = now_ms() + 2_000;
    let mut due = Vec::new();
    for i in 0..jobs {
        let at = start + 1_370 * i as u64;
        let mut s = store.lock().unwrap();
        let ctx = CronContext {
            now_ms: now_ms(),
            tz: TimeZone::UTC,
            platforms: None,
            scripts_dir: None,
        };
        let spec = JobSpec {
            schedule: Some("1d".into()),
            prompt: Some(format!("job {i}")),
            name: Some(format!("j{i}")),
            ..JobSpec::default()
        };
        let mut job = cron::create(&mut s, &spec, Some(&origin), &ctx).unwrap();
        job.next_run_ms = Some(at);
        assert!(s.job_update(&job).unwrap());
        due.push(at);
    }
    // Instants of sends are turned into wall-clock milliseconds.
    let (epoch_instant, epoch_ms) = (Instant::now(), now_ms());
    let deadline = Instant::now() + Duration::from_millis(1_370 * jobs as u64 + 30_000);
    adapter
        .wait_until(deadline - Instant::now(), |sent| sent.len() >= jobs)
        .expect("every job delivered");
    let mut latencies: Vec<u64> = adapter
        .sent()
        .iter()
        .map(|sent| {
            let job: usize = sent
                .text
                .strip_prefix("job ")
                .and_then(|n| n.trim().parse().ok())
                .expect("an answer names its job");
            let sent_ms = if sent.at >= epoch_instant {
                epoch_ms + u64::try_from((sent.at - epoch_instant).as_millis()).unwrap()
            } else {
                epoch_ms - u64::try_from((epoch_instant - sent.at).as_millis()).unwrap()
            };
            sent_ms.saturating_sub(due[job])
        })
        .collect();
    latencies.sort_unstable();
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "due -> delivered over {jobs} jobs (tick 1 s): min {} ms, p50 {} ms, p95 {} ms, max {} ms",
        latencies[0],
        pick(0.5),
        pick(0.95),
        latencies[latencies.len() - 1]
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map_or("?".to_owned(), |l| l[name.len()..].trim().to_owned())
    };
    println!(
        "{idle} idle jobs in the store: VmRSS {}, VmHWM {}",
        field("VmRSS:"),
        field("VmHWM:")
    );
    rt.block_on(scheduler.stop(Duration::from_secs(5)));
    rt.block_on(runner.shutdown());
}
