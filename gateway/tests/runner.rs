//! The gateway runner end to end, through the in-process test adapter, a
//! scripted model whose pace the test controls, and a real SQLite store in a
//! temp dir.
//!
//! Determinism: nothing here waits for a fixed time and hopes. Tests wait for
//! observable states (a reply sent, the model blocked in a call) with
//! generous timeouts, and where an ordering must hold they make it hold — for
//! example by holding the store lock so a turn cannot finish while messages
//! are injected.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
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
use hermes_gateway::config::{BusyMode, GatewayConfig};
use hermes_gateway::event::{ChatType, SessionSource};
use hermes_gateway::lock::InstanceLock;
use hermes_gateway::runner::{
    AgentFactory, FactoryError, GatewayRunner, INTERRUPT_NOTICE, QUEUE_NOTICE, RESTART_NOTICE,
    RunnerDeps, STOPPED_NOTICE, refusal_text,
};
use hermes_gateway::testing::{
    ManualClock, Pace, ScriptedModel, Sent, TestAdapter, TestAgentFactory, event,
};
use hermes_runtime::store::{SessionStatus, Store, SystemClock};

const WAIT: Duration = Duration::from_secs(30);
/// 2024-01-02 05:00 UTC.
const T0: u64 = 19_724 * 86_400_000 + 5 * 3_600_000;
const HOUR: u64 = 3_600_000;

struct Harness {
    rt: tokio::runtime::Runtime,
    _dir: Option<tempfile::TempDir>,
    adapter: Arc<TestAdapter>,
    model: Arc<ScriptedModel>,
    factory: Arc<TestAgentFactory>,
    store: Arc<Mutex<Store>>,
    clock: Arc<ManualClock>,
    runner: GatewayRunner,
}

fn base_config() -> GatewayConfig {
    let mut cfg = GatewayConfig::default();
    cfg.allow.everywhere = ["alice", "bob", "carol"]
        .into_iter()
        .map(String::from)
        .collect();
    cfg.utc_offset_minutes = Some(0);
    cfg
}

fn harness(pace: Pace, tweak: impl FnOnce(&mut GatewayConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        pace,
        tweak,
        &[],
    )
}

fn build(
    dir: Option<tempfile::TempDir>,
    store: Arc<Mutex<Store>>,
    clock: Arc<ManualClock>,
    pace: Pace,
    tweak: impl FnOnce(&mut GatewayConfig),
    extra: &[Arc<TestAdapter>],
) -> Harness {
    let mut config = base_config();
    tweak(&mut config);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let adapter = TestAdapter::new("test");
    let model = ScriptedModel::new(pace);
    let factory = TestAgentFactory::new(model.clone());
    let mut adapters: Vec<Arc<dyn hermes_gateway::adapter::PlatformAdapter>> =
        vec![adapter.clone()];
    adapters.extend(extra.iter().map(|a| a.clone() as _));
    let runner = GatewayRunner::new(RunnerDeps {
        adapters,
        factory: factory.clone(),
        store: store.clone(),
        clock: clock.clone(),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    Harness {
        rt,
        _dir: dir,
        adapter,
        model,
        factory,
        store,
        clock,
        runner,
    }
}

impl Harness {
    fn dm(&self, user: &str, text: &str) -> String {
        self.adapter
            .say(ChatType::Dm, &format!("dm-{user}"), user, text)
    }

    /// Waits until `chat` has received `n` messages; returns their texts.
    fn wait_texts(&self, chat: &str, n: usize) -> Vec<String> {
        let res = self.adapter.wait_until(WAIT, |sent| {
            sent.iter().filter(|s| s.chat_id == chat).count() >= n
        });
        match res {
            Ok(_) => self.adapter.texts_to(chat),
            Err(sent) => panic!("timed out waiting for {n} messages to {chat}; sent: {sent:#?}"),
        }
    }

    fn wait_text(&self, chat: &str, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let res = self.adapter.wait_until(WAIT, |sent: &[Sent]| {
            sent.iter().any(|s| s.chat_id == chat && pred(&s.text))
        });
        match res {
            Ok(_) => self.adapter.texts_to(chat),
            Err(sent) => panic!("timed out waiting for a message to {chat}; sent: {sent:#?}"),
        }
    }

    /// Sends `text` as a DM from `user`, waits for one more message to that
    /// chat and returns it.
    fn ask(&self, user: &str, text: &str) -> String {
        let chat = format!("dm-{user}");
        let before = self.adapter.texts_to(&chat).len();
        self.dm(user, text);
        self.wait_texts(&chat, before + 1).pop().unwrap()
    }

    fn wait_model_waiting(&self, calls: usize) {
        assert!(
            self.model
                .wait_until(WAIT, |c, waiting| c.len() >= calls && waiting >= 1),
            "model never reached call {calls}"
        );
    }

    /// The active transcript of `key` as (role, content) pairs.
    fn transcript(&self, key: &str) -> Vec<(String, String)> {
        let store = self.store.lock().unwrap();
        let Some(s) = store.active_session_for_key(key).unwrap() else {
            return Vec::new();
        };
        store
            .load_transcript(&s.id)
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    e.message.role().as_str().to_owned(),
                    e.message.content().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn shutdown(&self) -> hermes_gateway::runner::ShutdownReport {
        self.rt.block_on(self.runner.shutdown())
    }

    /// A new runner (new process, in effect) on the same store, after this
    /// one stopped; its adapter numbers messages after this one's.
    fn restarted(mut self, pace: Pace, tweak: impl FnOnce(&mut GatewayConfig)) -> Harness {
        let dir = self._dir.take();
        let store = self.store.clone();
        let clock = self.clock.clone();
        drop(self);
        let h = build(dir, store, clock, pace, tweak, &[]);
        h.adapter.set_next_id(1000);
        h
    }

    /// The messages still in the inbox: (text, to be answered).
    fn inbox(&self) -> Vec<(String, bool)> {
        self.store
            .lock()
            .unwrap()
            .kv_scan(hermes_gateway::inbox::INBOX_KV_PREFIX)
            .unwrap()
            .into_iter()
            .map(|(_, v)| {
                let p: hermes_gateway::inbox::Pending = serde_json::from_str(&v).unwrap();
                (p.text, p.answer)
            })
            .collect()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // A failed assertion must not leave a gated model call blocking the
        // runtime's shutdown (the failure would become a hang).
        self.model.release(1 << 40);
    }
}

fn dm_key(user: &str) -> String {
    format!("agent:main:test:dm:dm-{user}")
}

fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn two_users_in_one_group_get_separate_histories() {
    let h = harness(Pace::Instant, |_| {});
    h.adapter.say(ChatType::Group, "g1", "alice", "I am alice");
    h.wait_texts("g1", 1);
    h.adapter.say(ChatType::Group, "g1", "bob", "I am bob");
    h.wait_texts("g1", 2);
    h.adapter.say(ChatType::Group, "g1", "alice", "who am I?");
    h.wait_texts("g1", 3);

    let calls = h.model.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(user_texts(&calls[1]), vec!["I am bob"]);
    assert_eq!(user_texts(&calls[2]), vec!["I am alice", "who am I?"]);
    assert_eq!(
        h.transcript("agent:main:test:group:g1:alice"),
        pairs(&[
            ("user", "I am alice"),
            ("assistant", "reply to: I am alice"),
            ("user", "who am I?"),
            ("assistant", "reply to: who am I?"),
        ])
    );
    assert_eq!(h.transcript("agent:main:test:group:g1:bob").len(), 2);
}

#[test]
fn a_shared_group_has_one_history() {
    let h = harness(Pace::Instant, |c| c.group_sessions_per_user = false);
    h.adapter.say(ChatType::Group, "g1", "alice", "I am alice");
    h.wait_texts("g1", 1);
    h.adapter.say(ChatType::Group, "g1", "bob", "I am bob");
    h.wait_texts("g1", 2);
    assert_eq!(
        user_texts(&h.model.calls()[1]),
        vec!["I am alice", "I am bob"]
    );
    assert_eq!(h.transcript("agent:main:test:group:g1").len(), 4);
}

#[test]
fn a_new_message_interrupts_the_slow_turn_and_only_the_latest_waiting_one_runs() {
    let h = harness(Pace::Gated, |_| {});
    h.dm("alice", "one");
    h.wait_model_waiting(1);
    {
        // Holding the store keeps turn "one" from finishing (it must persist
        // before the worker moves on), so "two" and "three" are both waiting
        // before anything else can run.
        let _guard = h.store.lock().unwrap();
        h.dm("alice", "two");
        h.dm("alice", "three");
        h.adapter
            .wait_until(WAIT, |s| s.iter().any(|m| m.text == INTERRUPT_NOTICE))
            .unwrap();
    }
    h.wait_model_waiting(2);
    h.model.release(1);
    let texts = h.wait_text("dm-alice", |t| t == "reply to: three");

    // The partial reply came first, the notice once.
    let partial = texts
        .iter()
        .position(|t| t == "partial reply to: one")
        .unwrap();
    let last = texts.iter().position(|t| t == "reply to: three").unwrap();
    assert!(partial < last, "{texts:?}");
    assert_eq!(
        texts.iter().filter(|t| *t == INTERRUPT_NOTICE).count(),
        1,
        "{texts:?}"
    );

    // "two" was replaced: not answered on its own, but accepted, so it is
    // kept (E3) just before "three", which ran on the full, reloaded history.
    let calls = h.model.calls();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(user_texts(&calls[1]), vec!["one", "two", "three"]);
    assert_eq!(
        calls[1][1],
        Message::assistant("partial reply to: one"),
        "the interrupted turn's partial answer is in the history"
    );
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "one"),
            ("assistant", "partial reply to: one"),
            ("user", "two"),
            ("user", "three"),
            ("assistant", "reply to: three"),
        ])
    );
    let report = h.shutdown();
    assert!(report.all_turns_finished && report.marked_clean);
}

#[test]
fn an_interrupt_before_the_turn_starts_is_not_lost() {
    // One worker: bob's turn holds it, so alice's first turn is dispatched
    // but waits. Her second message interrupts that turn before its run
    // begins (and clears the agent's flag); the turn must still stop.
    let h = harness(Pace::Gated, |c| c.max_workers = 1);
    h.dm("bob", "b");
    h.wait_model_waiting(1);
    h.dm("alice", "a1");
    // Until the worker takes a1 it is merely buffered, and a2 would replace
    // it; wait until /status says a turn is registered for alice.
    let mut status_seen = 0;
    loop {
        h.dm("alice", "/status");
        status_seen += 1;
        let texts = h.wait_texts("dm-alice", status_seen);
        if texts.last().unwrap().contains("Running: yes") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    h.dm("alice", "a2");
    h.wait_text("dm-alice", |t| t == INTERRUPT_NOTICE);
    h.model.release(1);
    h.wait_model_waiting(2);
    h.model.release(1);
    h.wait_text("dm-alice", |t| t == "reply to: a2");
    let calls = h.model.calls();
    assert_eq!(calls.len(), 2, "a1 never reached the model");
    // a1 was accepted, so it is stored (E3) and part of a2's history.
    assert_eq!(user_texts(&calls[1]), vec!["a1", "a2"]);
}

#[test]
fn queue_mode_runs_every_message_in_order() {
    let h = harness(Pace::Gated, |c| c.busy_mode = BusyMode::Queue);
    h.dm("alice", "q1");
    h.wait_model_waiting(1);
    h.dm("alice", "q2");
    h.dm("alice", "q3");
    h.wait_text("dm-alice", |t| t == QUEUE_NOTICE);
    h.model.release(3);
    let texts = h.wait_text("dm-alice", |t| t == "reply to: q3");
    let replies: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("reply to:"))
        .collect();
    assert_eq!(replies, ["reply to: q1", "reply to: q2", "reply to: q3"]);
    assert_eq!(texts.iter().filter(|t| *t == QUEUE_NOTICE).count(), 1);
    let calls = h.model.calls();
    assert_eq!(user_texts(&calls[2]), vec!["q1", "q2", "q3"]);
    assert_eq!(h.transcript(&dm_key("alice")).len(), 6);
}

#[test]
fn different_sessions_run_in_parallel() {
    let h = harness(Pace::Gated, |c| c.max_workers = 2);
    h.dm("alice", "a");
    h.dm("bob", "b");
    // Both turns are inside the model at the same time.
    assert!(h.model.wait_until(WAIT, |_, waiting| waiting == 2));
    h.model.release(2);
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-bob", 1);
    assert_eq!(h.adapter.texts_to("dm-bob"), vec!["reply to: b"]);
}

#[test]
fn the_worker_bound_limits_concurrent_turns() {
    let h = harness(Pace::Gated, |c| c.max_workers = 1);
    h.dm("alice", "a");
    h.dm("bob", "b");
    h.wait_model_waiting(1);
    // Give a (wrongly) unbounded runner every chance to start the second turn.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(h.model.call_count(), 1);
    h.model.release(1);
    h.wait_model_waiting(2);
    h.model.release(1);
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-bob", 1);
}

#[test]
fn a_duplicate_message_id_is_ignored() {
    let h = harness(Pace::Instant, |_| {});
    let ev = event(
        "test",
        ChatType::Dm,
        "dm-alice",
        "alice",
        "same-id",
        "hello",
    );
    h.adapter.inject(ev.clone());
    h.wait_texts("dm-alice", 1);
    h.adapter.inject(ev);
    h.dm("alice", "next");
    // The same session's work is ordered: had the duplicate been accepted it
    // would have run before "next".
    let texts = h.wait_text("dm-alice", |t| t == "reply to: next");
    assert_eq!(texts, vec!["reply to: hello", "reply to: next"]);
    assert_eq!(h.model.call_count(), 2);
}

#[test]
fn dedup_same_message_id_in_two_dms_both_answered() {
    // Telegram numbers messages per chat: alice's #42 and bob's #42 are
    // different messages and both must be answered.
    let h = harness(Pace::Instant, |_| {});
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-alice",
        "alice",
        "42",
        "from alice",
    ));
    h.wait_texts("dm-alice", 1);
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-bob",
        "bob",
        "42",
        "from bob",
    ));
    assert_eq!(h.wait_texts("dm-bob", 1), vec!["reply to: from bob"]);
    assert_eq!(h.adapter.texts_to("dm-alice"), vec!["reply to: from alice"]);
    // A real redelivery inside one chat is still dropped.
    h.adapter.inject(event(
        "test",
        ChatType::Dm,
        "dm-bob",
        "bob",
        "42",
        "from bob",
    ));
    h.dm("bob", "next");
    let texts = h.wait_text("dm-bob", |t| t == "reply to: next");
    assert_eq!(texts, vec!["reply to: from bob", "reply to: next"]);
}

#[test]
fn the_same_id_on_another_platform_is_not_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    let other = TestAdapter::new("other");
    let h = build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        Pace::Instant,
        |_| {},
        std::slice::from_ref(&other),
    );
    h.adapter
        .inject(event("test", ChatType::Dm, "c1", "alice", "7", "on test"));
    other.inject(event("other", ChatType::Dm, "c1", "alice", "7", "on other"));
    h.wait_texts("c1", 1);
    other.wait_until(WAIT, |s| !s.is_empty()).unwrap();
    assert_eq!(other.texts_to("c1"), vec!["reply to: on other"]);
    assert_eq!(h.adapter.texts_to("c1"), vec!["reply to: on test"]);
}

#[test]
fn an_unknown_user_is_refused_without_a_model_call() {
    let other = TestAdapter::new("other");
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    let h = build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        Pace::Instant,
        |c| {
            c.allow
                .per_platform
                .insert("other".into(), HashSet::from(["dave".to_owned()]));
        },
        std::slice::from_ref(&other),
    );
    h.dm("mallory", "let me in");
    let texts = h.wait_texts("dm-mallory", 1);
    assert_eq!(texts, vec![refusal_text("mallory")]);
    h.dm("mallory", "please");
    // dave is allowed on "other" only.
    h.dm("dave", "hi from test");
    other.inject(event(
        "other",
        ChatType::Dm,
        "dm-dave",
        "dave",
        "x1",
        "hi from other",
    ));
    other.wait_until(WAIT, |s| !s.is_empty()).unwrap();
    h.dm("alice", "hi");
    h.wait_texts("dm-alice", 1);
    h.wait_texts("dm-dave", 1);

    assert_eq!(other.texts_to("dm-dave"), vec!["reply to: hi from other"]);
    assert_eq!(h.adapter.texts_to("dm-dave"), vec![refusal_text("dave")]);
    // One refusal per user in the window, no model call, nothing stored.
    assert_eq!(h.adapter.texts_to("dm-mallory").len(), 1);
    let seen: Vec<String> = h.model.calls().iter().flat_map(|c| user_texts(c)).collect();
    assert_eq!(seen, vec!["hi from other", "hi"]);
    assert!(h.transcript(&dm_key("mallory")).is_empty());
}

#[test]
fn every_command() {
    let h = harness(Pace::Instant, |_| {});
    let ask = |text: &str| h.ask("alice", text);

    assert!(ask("/help").contains("/model NAME"));
    assert!(ask("/help@hermes_bot").contains("/undo"));
    assert!(ask("/frobnicate").contains("Unknown command /frobnicate"));
    assert!(ask("/status").contains("No conversation yet"));
    assert_eq!(ask("/stop"), "Nothing is running.");
    assert_eq!(ask("/undo"), "Nothing to undo.");

    assert_eq!(
        ask("/usr/bin/x is a path"),
        "reply to: /usr/bin/x is a path"
    );
    assert_eq!(ask("second"), "reply to: second");
    let status = ask("/status");
    assert!(status.contains("Messages: 4"), "{status}");
    assert!(status.contains("Model: test-model"), "{status}");
    assert!(status.contains("Busy mode: interrupt"), "{status}");

    assert_eq!(ask("/undo"), "Removed the last exchange (2 messages).");
    assert_eq!(h.transcript(&dm_key("alice")).len(), 2);

    assert!(ask("/model@hermes_bot fancy-model").contains("Model set to fancy-model"));
    assert_eq!(
        ask("/model"),
        "Model: fancy-model. Switch with /model NAME."
    );
    assert_eq!(ask("third"), "reply to: third");
    assert_eq!(h.factory.built_models().last().unwrap(), "fancy-model");
    assert!(ask("/model two words").contains("one word"));

    let old_id = {
        let store = h.store.lock().unwrap();
        store
            .active_session_for_key(&dm_key("alice"))
            .unwrap()
            .unwrap()
            .id
    };
    assert_eq!(ask("/reset"), "Started a new conversation.");
    assert_eq!(ask("fresh"), "reply to: fresh");
    let calls = h.model.calls();
    assert_eq!(user_texts(calls.last().unwrap()), vec!["fresh"]);
    // The chosen model survives /new; the old session is ended, not deleted.
    assert_eq!(h.factory.built_models().last().unwrap(), "fancy-model");
    let store = h.store.lock().unwrap();
    let old = store.session(&old_id).unwrap().unwrap();
    assert_eq!(old.status, SessionStatus::Ended);
    assert_eq!(old.message_count, 4);
    drop(store);
    assert!(ask("/new").contains("new conversation"));
    // Commands never reached the model.
    let all: Vec<String> = h.model.calls().iter().flat_map(|c| user_texts(c)).collect();
    assert!(
        all.iter()
            .all(|t| !t.starts_with("/help") && !t.starts_with("/model")),
        "{all:?}"
    );
}

#[test]
fn commands_work_while_a_turn_runs() {
    let h = harness(Pace::Gated, |_| {});
    h.dm("alice", "long task");
    h.wait_model_waiting(1);
    h.dm("alice", "/status");
    let texts = h.wait_text("dm-alice", |t| t.contains("Running: yes"));
    assert_eq!(texts.len(), 1);
    h.dm("alice", "/stop");
    let texts = h.wait_text("dm-alice", |t| t == "partial reply to: long task");
    assert!(
        texts.contains(&"Stopping the current reply.".to_owned()),
        "{texts:?}"
    );
    assert_eq!(h.model.call_count(), 1);
    // /new during a turn: the turn stops, the next message starts fresh.
    h.dm("alice", "another long task");
    h.wait_model_waiting(2);
    h.dm("alice", "/new");
    h.wait_text("dm-alice", |t| t == "Started a new conversation.");
    h.dm("alice", "hello");
    h.wait_model_waiting(3);
    h.model.release(1);
    h.wait_text("dm-alice", |t| t == "reply to: hello");
    assert_eq!(user_texts(&h.model.calls()[2]), vec!["hello"]);
}

#[test]
fn sessions_expire_when_idle_and_at_the_daily_reset() {
    let h = harness(Pace::Instant, |_| {});
    let key = dm_key("alice");
    let ask = |text: &str| {
        h.dm("alice", text);
        h.wait_text("dm-alice", |t| t == format!("reply to: {text}"))
    };
    ask("m1"); // Jan 2 05:00
    h.clock.set(T0 + 2 * HOUR); // 07:00
    ask("m2");
    h.clock.set(T0 + 22 * HOUR + 59 * 60_000); // Jan 3 03:59: idle 20h59m, no 04:00 crossed
    ask("m3");
    assert_eq!(h.transcript(&key).len(), 6);

    h.clock.set(T0 + 23 * HOUR + 60_000); // Jan 3 04:01: crossed the daily reset
    let texts = ask("m4");
    assert!(
        texts.iter().any(|t| t.contains("Daily reset at 04:00")),
        "{texts:?}"
    );
    assert_eq!(
        h.transcript(&key),
        pairs(&[("user", "m4"), ("assistant", "reply to: m4")])
    );

    h.clock.set(T0 + 23 * HOUR + 25 * HOUR); // 25 h idle
    let texts = ask("m5");
    assert!(
        texts.iter().any(|t| t.contains("idle for more than 24 h")),
        "{texts:?}"
    );
    assert_eq!(h.transcript(&key).len(), 2);
    assert_eq!(user_texts(h.model.calls().last().unwrap()), vec!["m5"]);
}

#[test]
fn expiry_can_be_switched_off() {
    let h = harness(Pace::Instant, |c| {
        c.idle_reset = None;
        c.daily_reset_hour = None;
    });
    h.dm("alice", "m1");
    h.wait_texts("dm-alice", 1);
    h.clock.set(T0 + 100 * 24 * HOUR);
    h.dm("alice", "m2");
    h.wait_texts("dm-alice", 2);
    assert_eq!(
        user_texts(h.model.calls().last().unwrap()),
        vec!["m1", "m2"]
    );
}

#[test]
fn agents_are_cached_invalidated_and_evicted() {
    let h = harness(Pace::Instant, |c| {
        c.agent_cache_size = 2;
        c.agent_cache_idle = Duration::from_secs(60);
    });
    let ask = |user: &str, text: &str| h.ask(user, text);
    ask("alice", "1");
    ask("alice", "2");
    assert_eq!(h.factory.builds(), 1);
    assert_eq!(h.runner.cache_stats().hits, 1);
    assert!(h.runner.is_cached(&dm_key("alice")));

    // /model drops the entry; the session's stored system prompt is reused.
    ask("alice", "/model other");
    assert!(!h.runner.is_cached(&dm_key("alice")));
    ask("alice", "3");
    assert_eq!(h.factory.builds(), 2);
    assert_eq!(h.factory.prompts(), 1);
    // A changed signature (provider switched) means a new agent.
    h.factory.set_provider("other-provider");
    ask("alice", "4");
    assert_eq!(h.factory.builds(), 3);
    // /new: new session, new agent, new prompt.
    ask("alice", "/new");
    ask("alice", "5");
    assert_eq!(h.factory.builds(), 4);
    assert_eq!(h.factory.prompts(), 2);

    // LRU: capacity 2 (the clock moves so "least recently" is well defined).
    h.clock.set(T0 + 1000);
    ask("bob", "b");
    h.clock.set(T0 + 2000);
    ask("carol", "c");
    assert_eq!(h.runner.cached_agents(), 2);
    assert!(!h.runner.is_cached(&dm_key("alice")));
    assert!(h.runner.is_cached(&dm_key("carol")));
    assert_eq!(h.runner.cache_stats().evicted_lru, 1);
    h.clock.set(T0 + 3000);
    ask("alice", "6");
    assert_eq!(h.factory.builds(), 7);
    assert!(!h.runner.is_cached(&dm_key("bob")));

    // Idle expiry: carol and alice were last used more than 60 s ago.
    h.clock.set(T0 + 64_000);
    ask("bob", "b2");
    assert_eq!(h.runner.cache_stats().evicted_idle, 2);
    assert_eq!(h.runner.cached_agents(), 1);
    assert!(!h.runner.is_cached(&dm_key("alice")));
}

#[test]
fn a_failing_agent_is_reported_and_other_sessions_are_served() {
    let h = harness(Pace::Instant, |_| {});
    h.dm("alice", "/model broken-model");
    h.wait_texts("dm-alice", 1);
    h.dm("alice", "are you there?");
    let texts = h.wait_texts("dm-alice", 2);
    assert!(
        texts[1].contains("unavailable") && texts[1].contains("message is saved"),
        "{texts:?}"
    );
    // E3: the message is stored even though no agent answered.
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[("user", "are you there?")])
    );
    h.dm("bob", "hi");
    assert_eq!(h.wait_texts("dm-bob", 1), vec!["reply to: hi"]);
}

#[test]
fn graceful_stop_interrupts_persists_and_disconnects() {
    let h = harness(Pace::Gated, |c| c.busy_mode = BusyMode::Queue);
    h.dm("alice", "working");
    h.wait_model_waiting(1);
    h.dm("alice", "waiting");
    let report = h.shutdown();
    assert!(report.all_turns_finished, "{report:?}");
    assert!(report.marked_clean, "{report:?}");
    assert!(h.adapter.is_disconnected());
    // The partial answer is sent, saying that the stop cut it short.
    assert!(
        h.adapter
            .texts_to("dm-alice")
            .contains(&format!("partial reply to: working\n\n{STOPPED_NOTICE}")),
        "{:?}",
        h.adapter.texts_to("dm-alice")
    );
    // The waiting message was not run; it is kept, durable, for the next
    // start (E3, X5).
    assert_eq!(h.model.call_count(), 1);
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "working"),
            ("assistant", "partial reply to: working"),
        ])
    );
    assert_eq!(h.inbox(), [("waiting".to_owned(), true)]);
    // A clean stop leaves no interrupted turn.
    assert!(
        h.store
            .lock()
            .unwrap()
            .kv_scan(hermes_gateway::inbox::TURN_KV_PREFIX)
            .unwrap()
            .is_empty()
    );
    // The next start answers it, with no notice.
    let h = h.restarted(Pace::Instant, |c| c.busy_mode = BusyMode::Queue);
    assert_eq!(h.wait_texts("dm-alice", 1), ["reply to: waiting"]);
    assert!(h.inbox().is_empty());
}

#[test]
fn messages_arriving_during_shutdown_are_kept_and_answered_at_the_next_start() {
    let h = harness(Pace::Gated, |_| {});
    h.dm("alice", "working");
    h.wait_model_waiting(1);
    let guard = h.store.lock().unwrap();
    let runner = h.runner.clone();
    let stop = h.rt.spawn(async move { runner.shutdown().await });
    // The interrupted turn now waits for the store we hold, so the worker
    // is still draining: these arrive during the stop.
    assert!(h.model.wait_until(WAIT, |_, waiting| waiting == 0));
    h.dm("alice", "late one");
    h.dm("alice", "late two");
    drop(guard);
    let report = h.rt.block_on(stop).unwrap();
    assert!(
        report.all_turns_finished && report.marked_clean,
        "{report:?}"
    );
    assert_eq!(h.model.call_count(), 1);
    // Nothing replaced, nothing lost, nothing run: both wait in the inbox.
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "working"),
            ("assistant", "partial reply to: working"),
        ])
    );
    assert_eq!(
        h.inbox(),
        [("late one".to_owned(), true), ("late two".to_owned(), true)]
    );
    // After the stop the runner itself refuses events (the adapter is
    // disconnected too, so deliver straight to the handler).
    h.runner.handle_event(event(
        "test",
        ChatType::Dm,
        "dm-alice",
        "alice",
        "late-3",
        "too late",
    ));
    assert_eq!(h.inbox().len(), 2, "not accepted after the stop");
    // The next start answers them, in order: they were kept in queue order
    // while stopping, so each is answered.
    let h = h.restarted(Pace::Instant, |_| {});
    let texts = h.wait_texts("dm-alice", 2);
    assert_eq!(texts, ["reply to: late one", "reply to: late two"]);
    assert_eq!(
        h.transcript(&dm_key("alice")),
        pairs(&[
            ("user", "working"),
            ("assistant", "partial reply to: working"),
            ("user", "late one"),
            ("assistant", "reply to: late one"),
            ("user", "late two"),
            ("assistant", "reply to: late two"),
        ])
    );
}

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
            "a_turn_killed_midway_gets_one_restart_notice_and_is_not_resumed",
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
        "a_message_accepted_but_not_started_is_answered_after_a_kill",
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
        "a_redelivered_update_after_a_kill_is_not_transcribed_twice",
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
        "kill_mid_turn_keeps_the_tool_calls_and_results_already_made",
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

#[test]
fn queue_mode_while_stopping_ignores_max_queued() {
    let h = harness(Pace::Gated, |c| {
        c.busy_mode = BusyMode::Queue;
        c.max_queued = 1;
    });
    h.dm("alice", "working");
    h.wait_model_waiting(1);
    let guard = h.store.lock().unwrap();
    let runner = h.runner.clone();
    let stop = h.rt.spawn(async move { runner.shutdown().await });
    // The interrupted turn waits for the store we hold: the worker is still
    // draining, so these arrive during the stop — more than max_queued.
    assert!(h.model.wait_until(WAIT, |_, waiting| waiting == 0));
    h.dm("alice", "late one");
    h.dm("alice", "late two");
    h.dm("alice", "late three");
    drop(guard);
    let report = h.rt.block_on(stop).unwrap();
    assert!(report.all_turns_finished, "{report:?}");
    assert!(
        !h.adapter
            .texts_to("dm-alice")
            .iter()
            .any(|t| t.contains("Too many messages")),
        "{:?}",
        h.adapter.texts_to("dm-alice")
    );
    // All three are kept (none refused) for the next start.
    assert_eq!(
        h.inbox(),
        [
            ("late one".to_owned(), true),
            ("late two".to_owned(), true),
            ("late three".to_owned(), true)
        ]
    );
}
