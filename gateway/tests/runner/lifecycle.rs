//! Sessions and agents over time: idle and daily expiry, the agent cache
//! (invalidation, eviction, a failing factory), and a graceful stop (what
//! it interrupts, keeps and answers at the next start).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::Clock;
use hermes_gateway::config::BusyMode;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps, STOPPED_NOTICE};
use hermes_gateway_testing::{Pace, ScriptedModel, TestAdapter, TestAgentFactory, event};
use hermes_runtime::store::{Store, SystemClock};

use super::support::{HOUR, T0, WAIT, base_config, dm_key, harness, pairs, user_texts};

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

/// Issue 44 / SPEC X8: two bots of one platform share a database. A
/// message bot B accepted and never started (its gateway died) waits for
/// bot B: bot A's gateway starting on the same store neither answers it
/// nor drops it; bot B's answers it when it starts.
#[test]
fn a_bot_takes_over_only_its_own_left_over_messages() {
    use hermes_gateway::inbox::{Pending, kv_key};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let now = SystemClock.now_ms();
    let left = Pending {
        id: 1,
        key: dm_key("bob"),
        platform: "test".into(),
        chat_id: "dm-bob".into(),
        dm: true,
        user_id: "bob".into(),
        text: "for bot b".into(),
        at_ms: now,
        message_id: "m-b1".into(),
        answer: true,
        db_key: String::new(),
        media: Vec::new(),
        bot: "bot-b".into(),
    };
    let row = kv_key("test", "dead-gateway", 1);
    Store::open(&db)
        .unwrap()
        .kv_set(&row, &serde_json::to_string(&left).unwrap())
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = |bot: &str| {
        let adapter = TestAdapter::new("test");
        adapter.set_bot_id(bot);
        let runner = GatewayRunner::new(RunnerDeps {
            adapters: vec![adapter.clone()],
            factory: TestAgentFactory::new(ScriptedModel::new(Pace::Instant)),
            store: Arc::new(Mutex::new(Store::open(&db).unwrap())),
            clock: Arc::new(SystemClock),
            config: base_config(),
        });
        rt.block_on(runner.start()).unwrap();
        (runner, adapter)
    };
    // Bot A: left-overs are answered before new messages, so once Alice
    // has her answer, bob's message would have been answered too.
    let (runner, adapter) = start("bot-a");
    adapter.say(ChatType::Dm, "dm-alice", "alice", "hi");
    let sent = adapter
        .wait_until(WAIT, |sent| sent.iter().any(|s| s.chat_id == "dm-alice"))
        .unwrap();
    assert!(sent.iter().all(|s| s.chat_id != "dm-bob"), "{sent:?}");
    rt.block_on(runner.shutdown());
    assert!(
        Store::open(&db).unwrap().kv_get(&row).unwrap().is_some(),
        "bot B's message is still waiting"
    );
    // Bot B takes it over.
    let (runner, adapter) = start("bot-b");
    adapter
        .wait_until(WAIT, |sent| {
            sent.iter()
                .any(|s| s.chat_id == "dm-bob" && s.text == "reply to: for bot b")
        })
        .unwrap();
    rt.block_on(runner.shutdown());
}
