//! Scheduled jobs in a running gateway (SPEC Y1, Y2), in one process: the
//! runner over the in-process test adapter, a real SQLite store, the
//! scheduler ticking, a model that schedules a job when asked. Time is a
//! manual clock the test moves past the due times.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{
    ChatRequest, Completion, FinishReason, Message, Model, ModelError, StreamSink, ToolCall,
};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::cron::{CronOffer, Scheduler, SchedulerDeps, SchedulerTiming};
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{ManualClock, TestAdapter, TestAgentFactory, event, last_user_text};
use hermes_runtime::cron::{self, CatchUp, CronContext, CronSettings, JobSpec, Origin, TimeZone};
use hermes_runtime::store::{JobState, RunRecord, RunState, Store};

const WAIT: Duration = Duration::from_secs(30);
/// 2026-12-02 08:30 UTC.
const T0: u64 = 1_796_200_200_000;

/// What the model saw on one call: the last user text and the tools offered.
#[derive(Clone, Debug)]
struct Seen {
    user: String,
    tools: Vec<String>,
}

/// Asked to "schedule: PROMPT", it calls the `cronjob` tool to create a
/// job running PROMPT in 90 s; any other message it answers with
/// `answer: TEXT` (the last line of the user message, without the cron
/// preface).
#[derive(Default)]
struct SchedulingModel {
    seen: Mutex<Vec<Seen>>,
}

impl Model for SchedulingModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let messages: Vec<Message> = request.messages.iter().map(|e| e.message.clone()).collect();
        let user = last_user_text(&messages);
        self.seen.lock().unwrap().push(Seen {
            user: user.clone(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
        });
        if let Some(Message::Tool { content, .. }) = messages.last() {
            return Ok(Completion {
                content: Some(format!("tool said: {content}")),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            });
        }
        if let Some(rest) = user.strip_prefix("send: ") {
            let (target, message) = rest.split_once(' ').unwrap();
            let args = serde_json::json!({"action": "send", "target": target, "message": message});
            return Ok(Completion {
                tool_calls: vec![ToolCall::new("call_s", "send_message", args.to_string())],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            });
        }
        if let Some(prompt) = user.strip_prefix("schedule: ") {
            let args = serde_json::json!({"action": "create", "schedule": "90s", "prompt": prompt});
            return Ok(Completion {
                tool_calls: vec![ToolCall::new("call_1", "cronjob", args.to_string())],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            });
        }
        let last = user.lines().last().unwrap_or_default();
        // A heartbeat with nothing to report, and one whose answer never changes.
        let text = match last {
            "check quietly" => "[SILENT]".to_owned(),
            "same every time" => "disk at 40%".to_owned(),
            _ => format!("answer: {last}"),
        };
        Ok(Completion {
            content: Some(text),
            finish_reason: Some(FinishReason::Stop),
            usage: Some(caps::CALL_USAGE),
            ..Completion::default()
        })
    }
}

struct Gateway {
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
    adapter: Arc<TestAdapter>,
    model: Arc<SchedulingModel>,
    store: Arc<Mutex<Store>>,
    clock: Arc<ManualClock>,
    runner: GatewayRunner,
    factory: Arc<TestAgentFactory>,
    settings: CronSettings,
    scheduler: Option<Scheduler>,
}

fn settings(catch_up: CatchUp) -> CronSettings {
    CronSettings {
        tz: TimeZone::UTC,
        catch_up,
        home_channels: Default::default(),
        silent_marker: "[SILENT]".into(),
        ..CronSettings::default()
    }
}

fn gateway(settings: CronSettings, start_scheduler: bool) -> Gateway {
    gateway_in(tempfile::tempdir().unwrap(), T0, settings, start_scheduler)
}

/// A gateway over the home `dir` (a restart keeps it), its clock at `now`.
fn gateway_in(dir: tempfile::TempDir, now: u64, settings: CronSettings, start: bool) -> Gateway {
    let clock = ManualClock::new(now);
    let store = Arc::new(Mutex::new(
        Store::open(&dir.path().join("state.db"))
            .unwrap()
            .with_clock(clock.clone()),
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let adapter = TestAdapter::new("test");
    let model = Arc::new(SchedulingModel::default());
    let factory = TestAgentFactory::new(model.clone());
    factory.offer_cron(
        CronOffer::new(
            store.clone(),
            settings.clone(),
            vec!["test".into()],
            clock.clone(),
            None,
        )
        .with_send_message(vec!["test:friend".into()], None),
    );
    let mut config = GatewayConfig {
        timezone: settings.tz.clone(),
        ..GatewayConfig::default()
    };
    config.allow.everywhere = ["alice".to_owned()].into_iter().collect();
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: factory.clone(),
        store: store.clone(),
        clock: clock.clone(),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    let mut g = Gateway {
        rt,
        _dir: dir,
        adapter,
        model,
        store,
        clock,
        runner,
        factory,
        settings,
        scheduler: None,
    };
    if start {
        g.start_scheduler();
    }
    g
}

impl Gateway {
    fn start_scheduler(&mut self) {
        let deps = SchedulerDeps {
            runner: self.runner.clone(),
            factory: self.factory.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
            settings: self.settings.clone(),
            timing: SchedulerTiming {
                tick: Duration::from_millis(50),
                retry_base: Duration::from_millis(200),
                max_attempts: 3,
                script_timeout: Duration::from_secs(2),
                ..SchedulerTiming::default()
            },
            scripts: Some(self.script_env()),
        };
        self.scheduler = Some(self.rt.block_on(async { Scheduler::start(deps) }));
    }

    /// `$HERMES_HOME/scripts` (the temp dir is the home).
    fn scripts_dir(&self) -> std::path::PathBuf {
        hermes_runtime::tools::script::scripts_dir(self._dir.path())
    }

    /// Scripts run as the terminal's commands: sandboxed, in the working
    /// directory `work/` beside the home.
    fn script_env(&self) -> hermes_runtime::tools::ToolEnv {
        let work = self._dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        hermes_runtime::tools::ToolEnv::new(work, self._dir.path())
    }

    fn script(&self, name: &str, body: &str) {
        std::fs::create_dir_all(self.scripts_dir()).unwrap();
        std::fs::write(self.scripts_dir().join(name), body).unwrap();
    }

    fn ctx(&self) -> CronContext {
        CronContext {
            now_ms: hermes_core::Clock::now_ms(&*self.clock),
            tz: TimeZone::UTC,
            platforms: Some(vec!["test".into()]),
            scripts_dir: Some(self.scripts_dir()),
        }
    }

    fn texts(&self, chat: &str) -> Vec<String> {
        self.adapter.texts_to(chat)
    }

    fn wait_for(&self, chat: &str, text: &str) {
        let found = self.adapter.wait_until(WAIT, |sent| {
            sent.iter()
                .any(|s| s.chat_id == chat && s.text.contains(text))
        });
        assert!(
            found.is_ok(),
            "no {text:?} in {chat}: {:#?}",
            self.adapter.sent()
        );
    }

    fn runs(&self, job_id: &str) -> Vec<RunRecord> {
        self.store.lock().unwrap().job_runs(job_id, 10).unwrap()
    }

    fn wait_run(&self, job_id: &str, done: impl Fn(&[RunRecord]) -> bool) -> Vec<RunRecord> {
        let deadline = Instant::now() + WAIT;
        loop {
            let runs = self.runs(job_id);
            if done(&runs) {
                return runs;
            }
            assert!(Instant::now() < deadline, "runs of {job_id}: {runs:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A few ticks' worth of real time, for "nothing more happens".
    fn settle(&self) {
        std::thread::sleep(Duration::from_millis(400));
    }

    fn create(&self, spec: JobSpec, origin: Option<&Origin>) -> hermes_runtime::store::JobRecord {
        cron::create(&mut self.store.lock().unwrap(), &spec, origin, &self.ctx()).unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.scheduler.take() {
            self.rt.block_on(s.stop(Duration::from_secs(2)));
        }
        self.rt.block_on(self.runner.shutdown());
    }
}

fn spec(schedule: &str, prompt: &str, deliver: Option<&str>) -> JobSpec {
    JobSpec {
        schedule: Some(schedule.into()),
        prompt: Some(prompt.into()),
        deliver: deliver.map(str::to_owned),
        ..JobSpec::default()
    }
}

fn alice() -> Origin {
    Origin {
        platform: "test".into(),
        chat: "dm-alice".into(),
        thread: None,
    }
}

#[test]
fn the_tool_in_a_chat_schedules_a_job_delivered_once_to_that_chat_without_the_tool() {
    let g = gateway(settings(CatchUp::Once), true);
    g.adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "schedule: report the weather",
    );
    g.wait_for("dm-alice", "Scheduled");
    let jobs = g.store.lock().unwrap().jobs(false).unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.origin_chat.as_deref(), Some("dm-alice"));
    assert_eq!(job.deliver, "origin");
    // Not due yet: nothing runs.
    g.settle();
    assert!(g.runs(&job.id).is_empty());
    g.clock.advance(Duration::from_secs(91));
    g.wait_for("dm-alice", "answer: report the weather");
    let runs = g.wait_run(&job.id, |r| {
        r.len() == 1 && r[0].state == RunState::Delivered
    });
    assert!(runs[0].session_id.is_some());
    g.clock.advance(Duration::from_secs(3600));
    g.settle();
    let deliveries = g
        .texts("dm-alice")
        .iter()
        .filter(|t| t.contains("answer: report the weather"))
        .count();
    assert_eq!(
        deliveries,
        1,
        "delivered exactly once: {:#?}",
        g.texts("dm-alice")
    );
    assert_eq!(g.runs(&job.id).len(), 1, "a one-off runs once");
    let job = cron::find(&g.store.lock().unwrap(), &job.id).unwrap();
    assert_eq!(job.state, JobState::Done);
    assert!(job.last_outcome.unwrap().starts_with("delivered"));
    // The chat's calls were offered the tool; the cron run's were not.
    let seen = g.model.seen.lock().unwrap().clone();
    let chat = seen
        .iter()
        .find(|s| s.user.starts_with("schedule: "))
        .unwrap();
    assert!(chat.tools.contains(&"cronjob".to_owned()), "{chat:?}");
    let run = seen
        .iter()
        .find(|s| s.user.contains("[Scheduled job"))
        .unwrap();
    assert!(
        !run.tools.contains(&"cronjob".to_owned()),
        "a cron run has no cronjob tool: {run:?}"
    );
    // The run's session is stored like any other.
    let session = g
        .store
        .lock()
        .unwrap()
        .session(runs[0].session_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        session.session_key.as_deref(),
        Some(format!("cron:{}", job.id).as_str())
    );
}

#[test]
fn sethome_makes_the_chat_the_platforms_home_channel() {
    let g = gateway(settings(CatchUp::Once), true);
    // No home yet: the run fails with the reason, the answer kept.
    let early = g.create(spec("90s", "first", Some("test")), None);
    g.clock.advance(Duration::from_secs(91));
    let runs = g.wait_run(&early.id, |r| r.first().is_some_and(|r| !r.state.is_open()));
    assert_eq!(runs[0].state, RunState::DeliveryFailed, "{runs:#?}");
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("no home channel"),
        "{runs:#?}"
    );
    assert_eq!(runs[0].answer.as_deref(), Some("answer: first"));
    g.adapter.say(ChatType::Dm, "dm-alice", "alice", "/sethome");
    g.wait_for("dm-alice", "is now the test home channel");
    let job = g.create(spec("90s", "to the home channel", Some("test")), None);
    g.clock.advance(Duration::from_secs(91));
    g.wait_for("dm-alice", "answer: to the home channel");
    g.wait_run(&job.id, |r| {
        r.first().is_some_and(|r| r.state == RunState::Delivered)
    });
}

#[test]
fn a_removed_job_never_runs_and_a_failed_delivery_is_retried_and_reported() {
    let g = gateway(settings(CatchUp::Once), true);
    let removed = g.create(spec("every 1m", "never", None), Some(&alice()));
    cron::remove(&mut g.store.lock().unwrap(), &removed.id).unwrap();
    // Two sends fail: the third attempt delivers.
    g.adapter.fail_next_sends(2);
    let flaky = g.create(spec("90s", "flaky", None), Some(&alice()));
    g.clock.advance(Duration::from_secs(91));
    g.wait_run(&flaky.id, |r| {
        r.first()
            .is_some_and(|r| r.attempts == 1 && r.state == RunState::Pending)
    });
    let job = cron::find(&g.store.lock().unwrap(), &flaky.id).unwrap();
    assert!(
        job.last_outcome
            .unwrap()
            .starts_with("delivery failed (attempt 1), retrying")
    );
    g.clock.advance(Duration::from_secs(10));
    g.wait_run(&flaky.id, |r| r.first().is_some_and(|r| r.attempts == 2));
    g.clock.advance(Duration::from_secs(10));
    let runs = g.wait_run(&flaky.id, |r| {
        r.first().is_some_and(|r| r.state == RunState::Delivered)
    });
    assert_eq!(runs[0].attempts, 3);
    // Platform down for good: "delivery failed" with the reason, answer kept.
    g.adapter.fail_next_sends(100);
    let down = g.create(spec("90s", "down", None), Some(&alice()));
    g.clock.advance(Duration::from_secs(91));
    for _ in 0..3 {
        g.settle();
        g.clock.advance(Duration::from_secs(10));
    }
    let runs = g.wait_run(&down.id, |r| r.first().is_some_and(|r| !r.state.is_open()));
    assert_eq!(runs[0].state, RunState::DeliveryFailed);
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("platform is down")
    );
    assert_eq!(runs[0].answer.as_deref(), Some("answer: down"));
    g.clock.advance(Duration::from_secs(600));
    g.settle();
    assert!(g.runs(&removed.id).is_empty(), "a removed job never runs");
    assert!(!g.texts("dm-alice").iter().any(|t| t.contains("never")));
}

#[test]
fn a_job_due_while_stopped_runs_once_on_start_or_is_skipped() {
    for catch_up in [CatchUp::Once, CatchUp::Skip] {
        let mut g = gateway(settings(catch_up), false);
        let job = g.create(spec("every 1m", "catch up", None), Some(&alice()));
        // Ten periods pass with no scheduler.
        g.clock.advance(Duration::from_secs(600));
        g.start_scheduler();
        let runs = g.wait_run(&job.id, |r| r.first().is_some_and(|r| !r.state.is_open()));
        g.settle();
        let runs_after = g.runs(&job.id);
        assert_eq!(
            runs_after.len(),
            1,
            "once for the missed period: {runs_after:#?}"
        );
        let job = cron::find(&g.store.lock().unwrap(), &job.id).unwrap();
        let now = hermes_core::Clock::now_ms(&*g.clock);
        assert!(job.next_run_ms.unwrap() > now, "the next run is after now");
        match catch_up {
            CatchUp::Once => {
                assert_eq!(runs[0].state, RunState::Delivered);
                assert_eq!(
                    g.texts("dm-alice")
                        .iter()
                        .filter(|t| t.contains("answer: catch up"))
                        .count(),
                    1
                );
            }
            CatchUp::Skip => {
                assert_eq!(runs[0].state, RunState::Skipped);
                assert!(g.texts("dm-alice").is_empty());
            }
        }
    }
}

#[test]
fn a_job_made_in_a_topic_is_delivered_into_it_and_cron_shows_the_configured_zone() {
    let mut berlin = settings(CatchUp::Once);
    berlin.tz = TimeZone::get("Europe/Berlin").unwrap();
    let g = gateway(berlin, true);
    let in_topic = |id: &str, text: &str| {
        let mut ev = event("test", ChatType::Group, "forum", "alice", id, text);
        ev.source.thread_id = Some("77".into());
        assert!(g.adapter.inject(ev));
    };
    in_topic("t1", "schedule: topic news");
    g.wait_for("forum", "Scheduled");
    let job = g.store.lock().unwrap().jobs(false).unwrap().remove(0);
    assert_eq!(job.origin_chat.as_deref(), Some("forum"));
    assert_eq!(job.origin_thread.as_deref(), Some("77"), "{job:#?}");
    // `/cron` shows the next run in [gateway] timezone and names it:
    // T0 + 90 s is 08:31:30 UTC, 09:31:30 in Berlin (CET).
    in_topic("t2", "/cron");
    g.wait_for("forum", "times in Europe/Berlin");
    let listing = g.texts("forum").into_iter().last().unwrap();
    assert!(listing.contains("2026-12-02 09:31:30 CET"), "{listing}");
    g.clock.advance(Duration::from_secs(91));
    g.wait_for("forum", "answer: topic news");
    let delivered: Vec<_> = g
        .adapter
        .sent()
        .into_iter()
        .filter(|s| s.text.contains("answer: topic news"))
        .collect();
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0].thread.as_deref(), Some("77"), "into the topic");
    assert_eq!(delivered[0].reply_to, None);
}

fn script_spec(schedule: &str, prompt: &str, script: &str, no_agent: bool) -> JobSpec {
    JobSpec {
        script: Some(script.into()),
        no_agent: Some(no_agent),
        ..spec(schedule, prompt, None)
    }
}

#[test]
fn a_jobs_script_runs_sandboxed_and_gives_the_agent_context_or_the_answer() {
    let g = gateway(settings(CatchUp::Once), true);
    std::fs::write(
        g._dir.path().join(".env"),
        "OPENAI_API_KEY=sk-secret-in-home\n",
    )
    .unwrap();
    let home_env = g._dir.path().join(".env").display().to_string();
    g.script("disk.sh", "#!/bin/sh\necho \"disk at 91%\"\n");
    g.script("verbatim", "printf 'line one\\n  line two\\n'\n");
    g.script("quiet.sh", "#!/bin/sh\nexit 0\n");
    g.script(
        "broken.sh",
        "#!/bin/sh\necho half-done\necho 'cannot reach the disk' >&2\nexit 3\n",
    );
    g.script("slow.sh", "#!/bin/sh\nsleep 30\necho never\n");
    g.script("peek.sh", &format!("#!/bin/sh\ncat {home_env}\n"));
    // Bad input is refused before anything is stored.
    let c = g.ctx();
    let mut store = g.store.lock().unwrap();
    for (bad, why) in [
        (script_spec("90s", "x", "../.env", false), "no `..`"),
        (script_spec("90s", "x", "missing.sh", false), "no script"),
        (
            JobSpec {
                no_agent: Some(true),
                ..spec("90s", "x", None)
            },
            "needs a script",
        ),
    ] {
        let err = cron::create(&mut store, &bad, Some(&alice()), &c).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    assert!(store.jobs(true).unwrap().is_empty());
    drop(store);

    let with_agent = g.create(
        script_spec("90s", "summarise the disk", "disk.sh", false),
        Some(&alice()),
    );
    let verbatim = g.create(script_spec("90s", "", "verbatim", true), Some(&alice()));
    let quiet = g.create(script_spec("90s", "", "quiet.sh", true), Some(&alice()));
    let broken = g.create(
        script_spec("90s", "never asked", "broken.sh", false),
        Some(&alice()),
    );
    let slow = g.create(script_spec("90s", "", "slow.sh", true), Some(&alice()));
    let peek = g.create(script_spec("90s", "", "peek.sh", true), Some(&alice()));
    g.clock.advance(Duration::from_secs(91));
    for job in [&with_agent, &verbatim, &quiet, &broken, &slow, &peek] {
        g.wait_run(&job.id, |r| r.first().is_some_and(|r| !r.state.is_open()));
    }
    // With the agent: the script's stdout is the run's context.
    g.wait_for("dm-alice", "answer: summarise the disk");
    let seen = g.model.seen.lock().unwrap().clone();
    let run = seen
        .iter()
        .find(|s| s.user.contains("summarise the disk"))
        .unwrap();
    assert!(run.user.contains("disk at 91%"), "{}", run.user);
    assert_eq!(
        seen.iter()
            .filter(|s| s.user.contains("[Scheduled job"))
            .count(),
        1,
        "only the job with an agent called the model: {seen:#?}"
    );
    // --no-agent: stdout delivered as it is; nothing printed, nothing sent.
    g.wait_for("dm-alice", "line one");
    assert!(
        g.texts("dm-alice")
            .contains(&"line one\n  line two".to_owned()),
        "{:#?}",
        g.texts("dm-alice")
    );
    let runs = g.runs(&verbatim.id);
    assert_eq!(runs[0].state, RunState::Delivered);
    assert_eq!(runs[0].session_id, None, "no agent, no session");
    assert_eq!(g.runs(&quiet.id)[0].state, RunState::Stored);
    // Failures are the run's outcome, with the reason, never lost.
    for (job, reason) in [
        (&broken, "exited with code 3: cannot reach the disk"),
        (&slow, "timed out after 2 s"),
        (&peek, "exited with code 1"),
    ] {
        let runs = g.runs(&job.id);
        assert_eq!(runs[0].state, RunState::Failed, "{runs:#?}");
        assert!(
            runs[0].error.as_deref().unwrap().contains(reason),
            "{runs:#?}"
        );
        let job = cron::find(&g.store.lock().unwrap(), &job.id).unwrap();
        assert!(
            job.last_outcome.as_deref().unwrap().starts_with("failed: "),
            "{job:#?}"
        );
    }
    // The sandbox kept the home's secrets from the script.
    assert!(
        !g.runs(&peek.id)[0]
            .error
            .as_deref()
            .unwrap()
            .contains("sk-secret")
    );
    let sent = g.texts("dm-alice");
    assert!(
        !sent
            .iter()
            .any(|t| t.contains("sk-secret") || t.contains("half-done") || t.contains("never")),
        "{sent:#?}"
    );
    assert_eq!(sent.len(), 2, "{sent:#?}");
}

#[test]
fn a_silent_run_is_recorded_and_an_unchanged_answer_is_not_sent_again() {
    let g = gateway(settings(CatchUp::Once), true);
    let quiet = g.create(
        spec("every 1m", "check quietly", Some("test:dm-alice")),
        None,
    );
    let same = g.create(
        spec("every 1m", "same every time", Some("test:dm-alice")),
        None,
    );
    let key = format!("{}{}", cron::UNLESS_CHANGED_PREFIX, same.id);
    g.store.lock().unwrap().kv_set(&key, "").unwrap();
    for round in 1..=2 {
        g.clock.advance(Duration::from_secs(61));
        g.wait_run(&quiet.id, |r| {
            r.len() == round && r.iter().all(|r| !r.state.is_open())
        });
        g.wait_run(&same.id, |r| {
            r.len() == round && r.iter().all(|r| !r.state.is_open())
        });
    }
    g.settle();
    let quiet_runs = g.runs(&quiet.id);
    assert!(
        quiet_runs
            .iter()
            .all(|r| r.state == RunState::Stored && r.answer.as_deref() == Some("[SILENT]")),
        "recorded with the answer, not sent: {quiet_runs:#?}"
    );
    let job = cron::find(&g.store.lock().unwrap(), &quiet.id).unwrap();
    assert_eq!(
        job.last_outcome.as_deref(),
        Some("silent (nothing to report)")
    );
    let mut same_runs = g.runs(&same.id);
    same_runs.reverse();
    let states: Vec<RunState> = same_runs.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        [RunState::Delivered, RunState::Stored],
        "{same_runs:#?}"
    );
    let sent = g.texts("dm-alice");
    assert_eq!(
        sent,
        ["disk at 40%"],
        "one delivery, no [SILENT]: {sent:#?}"
    );
    // The model was told how to stay silent.
    let seen = g.model.seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|s| s.user.contains("answer just [SILENT]")),
        "{seen:#?}"
    );
}

#[path = "cron/send_message.rs"]
mod send_message;

#[path = "cron/background.rs"]
mod background;
#[path = "cron/caps.rs"]
mod caps;
