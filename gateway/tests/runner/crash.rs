//! A gateway killed with SIGKILL (a child process running this test
//! binary): one restart notice for the lost turn, accepted messages
//! answered after the kill, redeliveries not transcribed twice, and tool
//! calls already made kept.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::{
    Agent, ChatRequest, Clock, Completion, FinishReason, Flow, Message, Model, ModelError,
    StreamSink, Tool, ToolCall, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use hermes_gateway::config::BusyMode;
use hermes_gateway::event::{ChatType, SessionSource};
use hermes_gateway::lock::InstanceLock;
use hermes_gateway::runner::{
    AgentFactory, FactoryError, GatewayRunner, RESTART_NOTICE, RunnerDeps,
};
use hermes_gateway_testing::{
    ManualClock, Pace, ScriptedModel, TestAdapter, TestAgentFactory, event,
};
use hermes_runtime::store::{SessionStatus, Store, SystemClock};

use super::support::{WAIT, base_config, build, dm_key, pairs, user_texts};

const CHILD_ENV: &str = "HERMES_GATEWAY_TEST_CRASH_CHILD";

/// The child half of the crash test: a gateway on the given home with a
/// model that never answers; it reports READY once the user's message is
/// inside the model call (and therefore stored), then waits to be killed.
fn crash_child(home: &Path) -> ! {
    let _lock = InstanceLock::acquire(home).unwrap();
    let store = Store::open(&home.join("state.db")).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let adapter = TestAdapter::new("test");
    let model = ScriptedModel::new(Pace::Gated);
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(model.clone()),
        store: Arc::new(Mutex::new(store)),
        clock,
        config: base_config(),
    });
    rt.block_on(runner.start()).unwrap();
    adapter.say(ChatType::Dm, "dm-alice", "alice", "important message");
    assert!(model.wait_until(WAIT, |_, waiting| waiting == 1));
    // The harness prints "test … " on the same line first.
    println!("\nGATEWAY-CHILD-READY");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_turn_killed_midway_gets_one_restart_notice_and_is_not_resumed() {
    if let Some(home) = std::env::var_os(CHILD_ENV) {
        crash_child(Path::new(&home));
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "runner::crash::a_turn_killed_midway_gets_one_restart_notice_and_is_not_resumed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("GATEWAY-CHILD-READY") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("the gateway child never became ready");
    }
    // While the child lives, a second gateway on the same home is refused.
    let err = InstanceLock::acquire(&home).unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let _lock =
        InstanceLock::acquire(&home).expect("the kernel releases the lock of a killed process");

    // Restart in-process on the same store.
    let store = Store::open(&home.join("state.db")).unwrap();
    let crashed = store
        .active_session_for_key(&dm_key("alice"))
        .unwrap()
        .unwrap();
    let h = build(
        None,
        Arc::new(Mutex::new(store)),
        ManualClock::new(SystemClock.now_ms()),
        Pace::Instant,
        |_| {},
        &[],
    );
    // E3: the acknowledged message survived the kill; G11: suspended.
    {
        let store = h.store.lock().unwrap();
        let old = store.session(&crashed.id).unwrap().unwrap();
        assert_eq!(old.status, SessionStatus::Suspended);
        let transcript = store.load_transcript(&crashed.id).unwrap();
        assert_eq!(transcript.len(), 1);
        assert_eq!(transcript[0].message, Message::user("important message"));
    }
    h.adapter.set_next_id(1000);
    // X5: instead of silence, one notice, as a reply to the message whose
    // answer was lost — sent at start-up, before anything else.
    let sent = h.adapter.wait_until(WAIT, |sent| !sent.is_empty()).unwrap();
    assert_eq!(sent[0].text, RESTART_NOTICE);
    assert_eq!(sent[0].chat_id, "dm-alice");
    assert_eq!(sent[0].reply_to.as_deref(), Some("m1"));
    // The marker is gone: another restart would not repeat the notice.
    assert!(
        h.store
            .lock()
            .unwrap()
            .kv_scan(hermes_gateway::inbox::TURN_KV_PREFIX)
            .unwrap()
            .is_empty()
    );
    h.dm("alice", "hello again");
    let texts = h.wait_text("dm-alice", |t| t == "reply to: hello again");
    assert_eq!(
        texts,
        vec![
            RESTART_NOTICE.to_owned(),
            "reply to: hello again".to_owned()
        ]
    );
    // The fresh session did not resume the half-finished run.
    assert_eq!(user_texts(&h.model.calls()[0]), vec!["hello again"]);
    // The notice is given once.
    h.dm("alice", "and again");
    let texts = h.wait_text("dm-alice", |t| t == "reply to: and again");
    assert_eq!(texts.iter().filter(|t| *t == RESTART_NOTICE).count(), 1);
    drop(dir);
}

const ACCEPT_CHILD_ENV: &str = "HERMES_GATEWAY_TEST_ACCEPT_CHILD";

/// Runs this test binary's test `name` as a child with `env` set to `home`,
/// and waits until it prints `marker`.
fn spawn_child_until(name: &str, env: &str, home: &Path, marker: &'static str) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, home)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains(marker) {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the gateway child never printed {marker}");
    }
    child
}

/// The child half of the acceptance test: one worker, queue mode, a model
/// that never answers. bob's first message holds the only worker inside
/// the model; bob's second message waits behind it and alice's waits for a
/// worker. Once both handler calls have returned — when a real adapter
/// would acknowledge them to the platform — it reports READY.
fn accept_child(home: &Path) -> ! {
    let _lock = InstanceLock::acquire(home).unwrap();
    let store = Store::open(&home.join("state.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let adapter = TestAdapter::new("test");
    let model = ScriptedModel::new(Pace::Gated);
    let mut config = base_config();
    config.max_workers = 1;
    config.busy_mode = BusyMode::Queue;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(model.clone()),
        store: Arc::new(Mutex::new(store)),
        clock: Arc::new(SystemClock),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    adapter.say(ChatType::Dm, "dm-bob", "bob", "b1");
    assert!(model.wait_until(WAIT, |_, waiting| waiting == 1));
    adapter.say(ChatType::Dm, "dm-bob", "bob", "b2");
    adapter.say(ChatType::Dm, "dm-alice", "alice", "a1");
    // Neither turn has started: the only model call is b1's.
    assert_eq!(model.call_count(), 1);
    println!("\nGATEWAY-ACCEPT-CHILD-READY");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// The user messages of the (one) session stored under `key`.
fn stored_user_texts(store: &Store, key: &str) -> Vec<String> {
    let sessions: Vec<_> = store
        .list_sessions(100)
        .unwrap()
        .into_iter()
        .filter(|s| s.session_key.as_deref() == Some(key))
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:#?}");
    let transcript = store.load_transcript(&sessions[0].id).unwrap();
    let messages: Vec<Message> = transcript.into_iter().map(|e| e.message).collect();
    user_texts(&messages)
}

#[test]
fn a_message_accepted_but_not_started_is_answered_after_a_kill() {
    if let Some(home) = std::env::var_os(ACCEPT_CHILD_ENV) {
        accept_child(Path::new(&home));
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let mut child = spawn_child_until(
        "runner::crash::a_message_accepted_but_not_started_is_answered_after_a_kill",
        ACCEPT_CHILD_ENV,
        &home,
        "GATEWAY-ACCEPT-CHILD-READY",
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let store = Store::open(&home.join("state.db")).unwrap();
    let h = build(
        None,
        Arc::new(Mutex::new(store)),
        ManualClock::new(SystemClock.now_ms()),
        Pace::Instant,
        |_| {},
        &[],
    );
    h.adapter.set_next_id(1000);
    // b1's turn was killed midway: bob is told, and b1 is not resumed.
    // b2 and a1 were accepted but never started: they are answered, each
    // once — a1 in alice's untouched session, b2 in a fresh one for bob
    // (his old session is suspended, G11).
    let sent = h
        .adapter
        .wait_until(WAIT, |sent| {
            let texts: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
            texts.contains(&"reply to: b2") && texts.contains(&"reply to: a1")
        })
        .unwrap();
    let to = |chat: &str| -> Vec<String> {
        sent.iter()
            .filter(|s| s.chat_id == chat)
            .map(|s| s.text.clone())
            .collect()
    };
    assert_eq!(to("dm-bob"), [RESTART_NOTICE, "reply to: b2"]);
    assert_eq!(to("dm-alice"), ["reply to: a1"]);
    assert_eq!(sent[0].text, RESTART_NOTICE, "the notice comes first");
    assert_eq!(h.model.call_count(), 2, "b1 was not run again");
    {
        let store = h.store.lock().unwrap();
        assert_eq!(stored_user_texts(&store, &dm_key("alice")), vec!["a1"]);
        // Nothing is left to answer a second time.
        assert_eq!(
            store
                .kv_scan(hermes_gateway::inbox::INBOX_KV_PREFIX)
                .unwrap(),
            Vec::<(String, String)>::new()
        );
    }
    assert_eq!(
        h.transcript(&dm_key("bob")),
        pairs(&[("user", "b2"), ("assistant", "reply to: b2")])
    );
    // alice's session was never suspended: her next message continues it.
    h.dm("alice", "hello again");
    h.wait_text("dm-alice", |t| t == "reply to: hello again");
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "a1"),
            ("assistant", "reply to: a1"),
            ("user", "hello again"),
            ("assistant", "reply to: hello again"),
        ])
    );
    drop(h);
    drop(dir);
}

#[test]
fn a_redelivered_update_after_a_kill_is_not_transcribed_twice() {
    if let Some(home) = std::env::var_os(ACCEPT_CHILD_ENV) {
        accept_child(Path::new(&home));
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    // The child accepted b1 (its turn running), b2 and a1 (waiting), and is
    // killed before a platform like Telegram saved its offset: the platform
    // delivers all three again to the next process.
    let mut child = spawn_child_until(
        "runner::crash::a_redelivered_update_after_a_kill_is_not_transcribed_twice",
        ACCEPT_CHILD_ENV,
        &home,
        "GATEWAY-ACCEPT-CHILD-READY",
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let store = Store::open(&home.join("state.db")).unwrap();
    let h = build(
        None,
        Arc::new(Mutex::new(store)),
        ManualClock::new(SystemClock.now_ms()),
        Pace::Instant,
        |_| {},
        &[],
    );
    h.adapter.set_next_id(1000);
    for (chat, user, id, text) in [
        ("dm-bob", "bob", "m1", "b1"),
        ("dm-bob", "bob", "m2", "b2"),
        ("dm-alice", "alice", "m3", "a1"),
    ] {
        assert!(
            h.adapter
                .inject(event("test", ChatType::Dm, chat, user, id, text))
        );
    }
    let sent = h.adapter.wait_until(WAIT, |sent| sent.len() >= 3).unwrap();
    // A message the gateway knows is recognised, whichever state it was in.
    h.dm("alice", "fresh");
    h.wait_text("dm-alice", |t| t == "reply to: fresh");
    let sent_after: Vec<String> = h.adapter.sent().into_iter().map(|s| s.text).collect();
    assert_eq!(sent_after.len(), 4, "{sent_after:?}");
    let texts: Vec<&str> = sent.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(texts.iter().filter(|t| **t == "reply to: b2").count(), 1);
    assert_eq!(texts.iter().filter(|t| **t == "reply to: a1").count(), 1);
    assert_eq!(texts.iter().filter(|t| **t == RESTART_NOTICE).count(), 1);
    let store = h.store.lock().unwrap();
    // Each message is in exactly one transcript, once.
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for session in store.list_sessions(100).unwrap() {
        for e in store.load_transcript(&session.id).unwrap() {
            if let Message::User { content, .. } = e.message {
                *seen.entry(content).or_default() += 1;
            }
        }
    }
    for text in ["b1", "b2", "a1", "fresh"] {
        assert_eq!(seen.get(text), Some(&1), "{text}: {seen:?}");
    }
    drop(store);
    drop(h);
    drop(dir);
}

const TOOL_CHILD_ENV: &str = "HERMES_GATEWAY_TEST_TOOL_CHILD";

/// First call: asks for the `note` tool. Later calls: stream nothing and
/// wait until interrupted (a provider that hangs after a tool acted).
struct ToolThenHang {
    calls: AtomicUsize,
}

impl Model for ToolThenHang {
    fn complete(
        &self,
        _request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(Completion {
                tool_calls: vec![
                    ToolCall::new("c1", "note", "{\"text\":\"first\"}"),
                    ToolCall::new("c2", "note", "{\"text\":\"second\"}"),
                ],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            });
        }
        println!("\nGATEWAY-TOOL-CHILD-READY");
        while sink.on_progress() == Flow::Continue {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Completion::default())
    }
}

/// A tool with a side effect outside the transcript (a line in a file), as
/// a terminal or file tool has.
struct NoteTool {
    spec: ToolSpec,
    file: std::path::PathBuf,
}

impl Tool for NoteTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        writeln!(f, "{arguments}").map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(format!("noted {arguments}"))
    }
}

struct ToolFactory {
    home: std::path::PathBuf,
}

impl AgentFactory for ToolFactory {
    fn default_model(&self) -> String {
        "tool-model".into()
    }

    fn signature(&self, model: &str) -> String {
        model.to_owned()
    }

    fn system_prompt(&self, _source: &SessionSource) -> Result<String, FactoryError> {
        Ok("You take notes.".into())
    }

    fn build(
        &self,
        _session_id: &str,
        _model: &str,
        system_prompt: &str,
    ) -> Result<Agent, FactoryError> {
        let mut tools = ToolRegistry::new();
        tools.register(Box::new(NoteTool {
            spec: ToolSpec::new(
                "note",
                "Writes a note.",
                serde_json::json!({"type": "object"}),
            ),
            file: self.home.join("notes.txt"),
        }));
        Ok(Agent::new(
            Arc::new(ToolThenHang {
                calls: AtomicUsize::new(0),
            }),
            Arc::new(tools),
            system_prompt,
        ))
    }
}

/// The child half of the mid-turn kill test: a turn whose tools acted and
/// whose next model call hangs; READY is printed inside that call.
fn tool_child(home: &Path) -> ! {
    let _lock = InstanceLock::acquire(home).unwrap();
    let store = Store::open(&home.join("state.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let adapter = TestAdapter::new("test");
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: Arc::new(ToolFactory {
            home: home.to_path_buf(),
        }),
        store: Arc::new(Mutex::new(store)),
        clock: Arc::new(SystemClock),
        config: base_config(),
    });
    rt.block_on(runner.start()).unwrap();
    adapter.say(ChatType::Dm, "dm-alice", "alice", "take two notes");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn kill_mid_turn_keeps_the_tool_calls_and_results_already_made() {
    if let Some(home) = std::env::var_os(TOOL_CHILD_ENV) {
        tool_child(Path::new(&home));
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let mut child = spawn_child_until(
        "runner::crash::kill_mid_turn_keeps_the_tool_calls_and_results_already_made",
        TOOL_CHILD_ENV,
        &home,
        "GATEWAY-TOOL-CHILD-READY",
    );
    child.kill().unwrap(); // SIGKILL, in the middle of the turn
    child.wait().unwrap();

    // Both notes were written (the side effects happened)...
    let notes = std::fs::read_to_string(home.join("notes.txt")).unwrap();
    assert_eq!(notes.lines().count(), 2, "{notes}");
    // ...and the transcript records them: the call and both results, stored
    // together, although the turn never ended.
    let store = Store::open(&home.join("state.db")).unwrap();
    let session = store
        .active_session_for_key(&dm_key("alice"))
        .unwrap()
        .unwrap();
    let transcript: Vec<Message> = store
        .load_transcript(&session.id)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(transcript.len(), 4, "{transcript:#?}");
    assert_eq!(transcript[0], Message::user("take two notes"));
    match &transcript[1] {
        Message::Assistant { tool_calls, .. } => {
            let ids: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["c1", "c2"]);
        }
        other => panic!("expected the tool-calling assistant message, got {other:?}"),
    }
    assert_eq!(
        transcript[2],
        Message::tool("c1", "noted {\"text\":\"first\"}")
    );
    assert_eq!(
        transcript[3],
        Message::tool("c2", "noted {\"text\":\"second\"}")
    );
    drop(dir);
}
