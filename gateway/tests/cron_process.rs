//! Scheduled jobs with real processes (SPEC Y1): `hermes gateway run`
//! children (this test binary re-run as the gateway, as `failover.rs`
//! does), the Telegram fake, a slow scripted provider.
//!
//! - A gateway SIGKILLed while a run's model call streams: after the
//!   restart the run is run again and its answer delivered exactly once.
//! - Two gateways on one PostgreSQL database: every due time of a job is
//!   run by exactly one of them, and every answer delivered once.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod background;
mod cron_events;
use crate::telegram_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::app::run_gateway;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::cron::{self, CronContext, JobSpec, TimeZone};
use hermes_runtime::store::{RunState, Store, StoreTarget};
use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;
use telegram_support::{Fake, TOKEN};

const CHILD_ENV: &str = "HERMES_CRON_PROCESS_CHILD";
const TEST_ENV: &str = "HERMES_CRON_PROCESS_TEST";
const WAIT: Duration = Duration::from_secs(90);
const CHAT: &str = "555";

/// Runs the gateway when this binary was started as a child.
fn child_gateway() -> bool {
    if std::env::var_os(CHILD_ENV).is_none() {
        return false;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
    let code = match run_gateway(&settings, false) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gateway error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// Model calls of scheduled runs, by gateway.
type Calls = Arc<Mutex<Vec<(&'static str, String, Instant)>>>;

/// A provider whose answers to a scheduled run take `pieces` × `delay`.
fn provider(gateway: &'static str, calls: &Calls, pieces: usize, delay: Duration) -> FakeProvider {
    let calls = Arc::clone(calls);
    FakeProvider::start_with(
        Vec::new(),
        None,
        Some(Arc::new(move |request: &Value| {
            let user = request["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            let Some(prompt) = user
                .lines()
                .last()
                .filter(|_| user.starts_with("[Scheduled job"))
            else {
                return Reply::text("(not a scheduled run)");
            };
            let prompt = prompt.to_owned();
            calls
                .lock()
                .unwrap()
                .push((gateway, prompt.clone(), Instant::now()));
            let mut parts: Vec<String> = (0..pieces.saturating_sub(1))
                .map(|i| format!("part{i} "))
                .collect();
            parts.push(format!("done: {prompt}"));
            Reply::SlowText {
                pieces: parts,
                delay,
            }
        })),
    )
    .unwrap()
}

struct Gateway {
    child: Child,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gateway(
    test: &str,
    home: &Path,
    db: Option<&str>,
    telegram: &str,
    provider: &FakeProvider,
) -> Gateway {
    std::fs::create_dir_all(home).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("gateway.log"))
        .unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    // Test names are relative to this test binary's former root, now the
    // `cron_process` module of the one gateway test binary.
    let exact = format!("cron_process::{test}");
    cmd.args(["--exact", &exact, "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env(TEST_ENV, test)
        .env("HERMES_HOME", home)
        .env("GATEWAY_LEASE_TTL_MS", "1500")
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_URL", telegram)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", "1000")
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_MODEL", "cron-model")
        .env("HERMES_TOOLSETS", "todo")
        .env("GATEWAY_STREAM_REPLIES", "false")
        .env(
            "RUST_LOG",
            "hermes_gateway=info,hermes_runner=info,hermes_runtime=warn",
        )
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(log);
    if let Some(db) = db {
        cmd.env("HERMES_DATABASE_URL", db);
    }
    Gateway {
        child: cmd.spawn().unwrap(),
    }
}

fn log_of(home: &Path) -> String {
    std::fs::read_to_string(home.join("gateway.log")).unwrap_or_default()
}

fn wait_until(what: &str, homes: &[&Path], mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        if Instant::now() > deadline {
            let logs: Vec<String> = homes.iter().map(|h| log_of(h)).collect();
            panic!("timed out waiting for {what}\n{}", logs.join("\n-----\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Texts sent to `CHAT` through the fake.
fn delivered(fake: &Fake) -> Vec<String> {
    fake.requests("sendMessage")
        .into_iter()
        .filter(|r| r.body["chat_id"].to_string().trim_matches('"') == CHAT)
        .map(|r| r.body["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn create(target: &StoreTarget, schedule: &str, prompt: &str, deliver: &str) -> String {
    let target = target.clone();
    let (schedule, prompt, deliver) = (schedule.to_owned(), prompt.to_owned(), deliver.to_owned());
    std::thread::spawn(move || {
        let mut store = Store::open_target(&target).unwrap();
        let ctx = CronContext {
            now_ms: hermes_core::Clock::now_ms(&hermes_runtime::store::SystemClock),
            tz: TimeZone::UTC,
            platforms: None,
            scripts_dir: None,
        };
        let spec = JobSpec {
            schedule: Some(schedule),
            prompt: Some(prompt),
            deliver: Some(deliver),
            ..JobSpec::default()
        };
        cron::create(&mut store, &spec, None, &ctx).unwrap().id
    })
    .join()
    .unwrap()
}

fn runs(target: &StoreTarget, job: &str) -> Vec<hermes_runtime::store::RunRecord> {
    let (target, job) = (target.clone(), job.to_owned());
    std::thread::spawn(move || {
        Store::open_target(&target)
            .unwrap()
            .job_runs(&job, 1000)
            .unwrap()
    })
    .join()
    .unwrap()
}

#[test]
fn a_gateway_killed_during_a_run_delivers_its_answer_once_after_restart() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let target = StoreTarget::Sqlite(home.join("state.db"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(Fake::start(false));
    let calls: Calls = Arc::default();
    // A run streams for about 3 s.
    let provider = provider("a", &calls, 6, Duration::from_millis(500));
    let job = create(
        &target,
        "2s",
        "the morning report",
        &format!("telegram:{CHAT}"),
    );
    let test = "a_gateway_killed_during_a_run_delivers_its_answer_once_after_restart";
    let mut gateway = spawn_gateway(test, &home, None, &fake.base, &provider);
    // Mid-stream of the run's model call: kill -9.
    wait_until("the run's model call", &[&home], || {
        calls
            .lock()
            .unwrap()
            .last()
            .is_some_and(|c| c.2.elapsed() > Duration::from_millis(700))
    });
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    assert!(delivered(&fake).is_empty(), "nothing sent before the kill");
    let open = runs(&target, &job);
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].state,
        RunState::Running,
        "claimed, not finished: {open:#?}"
    );
    let _again = spawn_gateway(test, &home, None, &fake.base, &provider);
    wait_until("the delivery after the restart", &[&home], || {
        !delivered(&fake).is_empty()
    });
    // Time for a second delivery, if there were to be one.
    std::thread::sleep(Duration::from_secs(3));
    let sent = delivered(&fake);
    assert_eq!(sent.len(), 1, "one delivery, not zero, not two: {sent:#?}");
    assert!(sent[0].contains("done: the morning report"), "{sent:?}");
    let after = runs(&target, &job);
    assert_eq!(after.len(), 1, "{after:#?}");
    assert_eq!(after[0].state, RunState::Delivered, "{after:#?}");
    assert_eq!(
        calls.lock().unwrap().len(),
        2,
        "run once, run again after the kill"
    );
}

#[test]
fn two_gateways_on_postgresql_run_each_due_time_once() {
    if child_gateway() {
        return;
    }
    hermes_tests::require!(Postgres);
    let db = hermes_tests::postgres::fresh_database();
    let target = StoreTarget::Postgres(db.clone());
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(Fake::start(true));
    let door_b = rt.block_on(fake.open_door());
    let calls: Calls = Arc::default();
    let pa = provider("a", &calls, 1, Duration::from_millis(100));
    let pb = provider("b", &calls, 1, Duration::from_millis(100));
    // Jobs stored only race on the claim in both gateways; a Telegram job
    // is run by the bot's holder and delivered once.
    let local = create(&target, "every 2s", "local tick", "local");
    let sent_job = create(
        &target,
        "every 3s",
        "telegram tick",
        &format!("telegram:{CHAT}"),
    );
    let test = "two_gateways_on_postgresql_run_each_due_time_once";
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    let _a = spawn_gateway(test, &home_a, Some(&db), &fake.base, &pa);
    let _b = spawn_gateway(test, &home_b, Some(&db), &door_b, &pb);
    wait_until("several runs of both jobs", &[&home_a, &home_b], || {
        runs(&target, &local)
            .iter()
            .filter(|r| !r.state.is_open())
            .count()
            >= 5
            && runs(&target, &sent_job)
                .iter()
                .filter(|r| r.state == RunState::Delivered)
                .count()
                >= 3
    });
    drop(_a);
    drop(_b);
    let local_runs = runs(&target, &local);
    let mut dues: Vec<u64> = local_runs.iter().map(|r| r.due_ms).collect();
    dues.sort_unstable();
    dues.dedup();
    assert_eq!(dues.len(), local_runs.len(), "one run per due time");
    let calls = calls.lock().unwrap().clone();
    for (prompt, job_runs) in [
        ("local tick", &local_runs),
        ("telegram tick", &runs(&target, &sent_job)),
    ] {
        let finished = job_runs.iter().filter(|r| !r.state.is_open()).count();
        let made = calls.iter().filter(|c| c.1 == prompt).count();
        // Each finished run made one model call; at most the open ones one more.
        assert!(
            made >= finished && made <= job_runs.len(),
            "{prompt}: {made} calls for {job_runs:#?}"
        );
    }
    let gateways: std::collections::HashSet<&str> = calls
        .iter()
        .filter(|c| c.1 == "local tick")
        .map(|c| c.0)
        .collect();
    eprintln!("local runs made by gateways {gateways:?}");
    let sent = delivered(&fake);
    let delivered_runs = runs(&target, &sent_job)
        .iter()
        .filter(|r| r.state == RunState::Delivered)
        .count();
    assert_eq!(
        sent.len(),
        delivered_runs,
        "each delivered run sent once: {sent:#?}"
    );
}

/// `/background` (issue 46) from a chat: the gateway is SIGKILLed while the
/// background run's model call streams; after the restart the answer is
/// delivered to the chat exactly once, and the command is not run again.
#[test]
fn background_work_survives_a_kill_and_is_delivered_once() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let target = StoreTarget::Sqlite(home.join("state.db"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(Fake::start(false));
    let calls: Calls = Arc::default();
    let provider = provider("a", &calls, 6, Duration::from_millis(500));
    let test = "background_work_survives_a_kill_and_is_delivered_once";
    let mut gateway = spawn_gateway(test, &home, None, &fake.base, &provider);
    fake.push_update(serde_json::json!({"update_id": 1, "message": {
        "message_id": 1, "date": 0, "text": "/background the evening report",
        "from": {"id": 1000, "is_bot": false, "first_name": "Ann"},
        "chat": {"id": CHAT.parse::<i64>().unwrap(), "type": "private"},
    }}));
    wait_until("the background run's model call", &[&home], || {
        calls
            .lock()
            .unwrap()
            .last()
            .is_some_and(|c| c.2.elapsed() > Duration::from_millis(700))
    });
    let acks = delivered(&fake);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert!(
        acks[0].contains("Working on it in the background"),
        "{acks:?}"
    );
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    let _again = spawn_gateway(test, &home, None, &fake.base, &provider);
    let done = |fake: &Fake| {
        delivered(fake)
            .into_iter()
            .filter(|t| t.contains("done: the evening report"))
            .count()
    };
    wait_until("the delivery after the restart", &[&home], || {
        done(&fake) > 0
    });
    // Time for a second delivery (or a second run of the command).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(done(&fake), 1, "{:#?}", delivered(&fake));
    let sent = delivered(&fake);
    assert_eq!(sent.len(), 2, "one ack, one answer: {sent:#?}");
    let jobs = std::thread::spawn(move || Store::open_target(&target).unwrap().jobs(true).unwrap())
        .join()
        .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!(
        calls.lock().unwrap().len(),
        2,
        "run once, again after the kill"
    );
}
