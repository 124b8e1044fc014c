//! Two runners in one process sharing a PostgreSQL database (SPEC X8):
//! one bot lease between them, a session whose turn runs on the other
//! gateway interrupted there by a `NOTIFY` (not waited out), and a bot
//! handed over at once by a graceful stop. Leases are long here, so what
//! happens does because a gateway was told, never because a lease lapsed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::Message;
use hermes_gateway::config::{BusyMode, GatewayConfig};
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway::testing::{Pace, ScriptedModel, TestAdapter, TestAgentFactory};
use hermes_runtime::store::{LeaseGrant, Store, SystemClock};

const WAIT: Duration = Duration::from_secs(30);
/// Long enough that no lease lapses while its holder lives, even on a
/// loaded machine: what happens here happens because a gateway was told.
const TTL: Duration = Duration::from_secs(10);

struct Gateway {
    runner: GatewayRunner,
    adapter: Arc<TestAdapter>,
    model: Arc<ScriptedModel>,
}

impl Drop for Gateway {
    /// A failed assertion must not leave a gated model call blocking the
    /// runtime's shutdown (and so the test) for ever.
    fn drop(&mut self) {
        self.model.release(1_000);
    }
}

fn gateway(rt: &tokio::runtime::Runtime, url: &str, pace: Pace, ttl: Duration) -> Gateway {
    let config = GatewayConfig {
        lease_ttl: ttl,
        ..GatewayConfig::default()
    };
    gateway_with(rt, url, pace, config)
}

fn gateway_with(
    rt: &tokio::runtime::Runtime,
    url: &str,
    pace: Pace,
    mut config: GatewayConfig,
) -> Gateway {
    config.allow.allow_all = true;
    let adapter = TestAdapter::new("test");
    let model = ScriptedModel::new(pace);
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(model.clone()),
        store: Arc::new(Mutex::new(Store::open_url(url).unwrap())),
        clock: Arc::new(SystemClock),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    Gateway {
        runner,
        adapter,
        model,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_turn_running_on_another_gateway_is_interrupted_there_by_a_notification() {
    trace();
    let url = hermes_tests::postgres::fresh_database();
    let rt = runtime();
    let one = gateway(&rt, &url, Pace::Gated, TTL);
    let two = gateway(&rt, &url, Pace::Gated, TTL);
    // The two adapters stand for one bot: its message ids are unique
    // across them (the same id on both would be a redelivery).
    two.adapter.set_next_id(1000);
    assert!(one.runner.serves("test"));
    assert!(!two.runner.serves("test"), "one bot, one gateway");

    // A long turn on gateway one (its model answers only when
    // interrupted); then the bot moves to gateway two. Gateway one's turn
    // goes on: its session's lease is still its own, renewed.
    move_the_bot_mid_turn(&url, &one, &two);
    assert_eq!(one.model.waiting(), 1, "the running turn was not touched");
    assert!(one.adapter.texts_to("dm-alice").is_empty());

    // A message for that session reaches gateway two. The session's lease
    // is gateway one's and would never lapse (it is renewed; its model
    // would wait for ever): only being asked ends that turn. Gateway one
    // sends its partial answer and releases; two runs the new turn on the
    // whole history.
    two.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "new question");
    assert!(
        two.model.wait_until(WAIT, |_, waiting| waiting == 1),
        "the turn on gateway one was not interrupted"
    );
    assert_eq!(
        one.adapter.texts_to("dm-alice"),
        ["partial reply to: long question"],
        "gateway one ended its turn as an interrupted one, still holding the session"
    );
    two.model.release(1);
    two.adapter
        .wait_until(WAIT, |sent| {
            sent.iter().any(|s| s.text == "reply to: new question")
        })
        .unwrap();
    let seen = two.model.calls().last().cloned().unwrap();
    let users: Vec<&str> = seen
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["long question", "new question"]);

    let store = Store::open_url(&url).unwrap();
    let session = store
        .active_session_for_key("agent:main:test:dm:dm-alice")
        .unwrap()
        .unwrap();
    let texts: Vec<String> = store
        .load_transcript(&session.id)
        .unwrap()
        .iter()
        .filter_map(|e| e.message.content().map(str::to_owned))
        .collect();
    assert_eq!(
        texts,
        [
            "long question",
            "partial reply to: long question",
            "new question",
            "reply to: new question"
        ]
    );
    rt.block_on(async {
        two.runner.shutdown().await;
        one.runner.shutdown().await;
    });
}

/// Gateway one runs a gated turn of `dm-alice`, then loses the bot to
/// gateway two (an intruder takes the lease and lets it go; one cannot
/// reach the platform any more). Returns once two serves the bot.
fn move_the_bot_mid_turn(url: &str, one: &Gateway, two: &Gateway) {
    one.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "long question");
    assert!(one.model.wait_until(WAIT, |_, waiting| waiting == 1));
    one.adapter.set_refuse_connect(true);
    let mut db = Store::open_url(url).unwrap();
    let LeaseGrant::Granted { fence, .. } = db
        .lease_acquire(
            "bot:test:default",
            "intruder",
            Duration::from_secs(600),
            None,
            true,
        )
        .unwrap()
    else {
        panic!("take-over refused");
    };
    wait_for("gateway one to stop serving the bot", || {
        !one.runner.serves("test")
    });
    assert!(db.lease_release(&fence, None).unwrap());
    wait_for("gateway two to take the bot", || {
        two.runner.serves("test") && two.adapter.is_connected()
    });
}

/// In queue mode a message for a session busy on another gateway waits
/// for that turn to finish, as on one gateway: nobody is interrupted.
#[test]
fn in_queue_mode_a_turn_on_another_gateway_is_waited_for_not_interrupted() {
    trace();
    let url = hermes_tests::postgres::fresh_database();
    let rt = runtime();
    let config = GatewayConfig {
        lease_ttl: TTL,
        busy_mode: BusyMode::Queue,
        ..GatewayConfig::default()
    };
    let one = gateway_with(&rt, &url, Pace::Gated, config.clone());
    let two = gateway_with(&rt, &url, Pace::Instant, config);
    two.adapter.set_next_id(1000);
    move_the_bot_mid_turn(&url, &one, &two);

    two.adapter
        .say(ChatType::Dm, "dm-alice", "alice", "new question");
    // Two waits on the session's lease; one's turn is left alone. Nothing
    // to await for "nothing happens": give it a fair chance to go wrong.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(one.model.waiting(), 1, "the running turn was interrupted");
    assert_eq!(two.model.call_count(), 0);

    one.model.release(1);
    two.adapter
        .wait_until(WAIT, |sent| {
            sent.iter().any(|s| s.text == "reply to: new question")
        })
        .unwrap();
    assert_eq!(
        one.adapter.texts_to("dm-alice"),
        ["reply to: long question"],
        "gateway one finished its turn in full"
    );
    let seen = two.model.calls().last().cloned().unwrap();
    let users = seen
        .iter()
        .filter(|m| matches!(m, Message::User { .. }))
        .count();
    assert_eq!(users, 2, "the new turn saw the whole history");
    rt.block_on(async {
        two.runner.shutdown().await;
        one.runner.shutdown().await;
    });
}

#[test]
fn a_gracefully_stopped_gateway_hands_its_bot_over_at_once() {
    trace();
    let url = hermes_tests::postgres::fresh_database();
    let rt = runtime();
    // A lease that would take a minute to lapse: a hand-over well within
    // it proves the release was heard, not waited out.
    let ttl = Duration::from_secs(60);
    let one = gateway(&rt, &url, Pace::Instant, ttl);
    let two = gateway(&rt, &url, Pace::Instant, ttl);
    // The two adapters stand for one bot: its message ids are unique
    // across them (the same id on both would be a redelivery).
    two.adapter.set_next_id(1000);
    assert!(one.runner.serves("test") && !two.runner.serves("test"));
    one.adapter.say(ChatType::Dm, "dm-bob", "bob", "hello");
    one.adapter
        .wait_until(WAIT, |sent| {
            sent.iter().any(|s| s.text == "reply to: hello")
        })
        .unwrap();
    let stopped = Instant::now();
    rt.block_on(one.runner.shutdown());
    wait_for("gateway two to take the bot", || {
        two.runner.serves("test") && two.adapter.is_connected()
    });
    assert!(
        stopped.elapsed() < ttl / 2,
        "handed over after {:?}",
        stopped.elapsed()
    );
    two.adapter
        .say(ChatType::Dm, "dm-bob", "bob", "still there?");
    two.adapter
        .wait_until(WAIT, |sent| {
            sent.iter().any(|s| s.text == "reply to: still there?")
        })
        .unwrap();
    assert_eq!(two.model.call_count(), 1);
    assert_eq!(one.model.call_count(), 1);
    rt.block_on(two.runner.shutdown());
}
