//! `session_search` in the gateway (SPEC Y6), end to end: the production
//! agent factory, the loopback provider and the in-process adapter. A
//! user's old session with a marker word is found; another user's session
//! with the same marker is not — the scope comes from the session the tool
//! serves, and the model's arguments cannot widen it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::{LedgerEntry, Message};
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::TestAdapter;
use hermes_runtime::config::{Environment, Overrides};
use hermes_runtime::store::{NewSession, SessionStatus, Store, SystemClock};
use hermes_tests::{FakeProvider, Reply, Responder};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// An ended session of `user`'s DM on the test platform, mentioning the
/// marker.
fn old_session(store: &mut Store, user: &str, text: &str) -> String {
    let chat = format!("dm-{user}");
    let key = format!("agent:main:test:dm:{chat}");
    let id = store
        .create_session(&NewSession {
            session_key: Some(&key),
            platform: Some("test"),
            chat_id: Some(&chat),
            user_id: Some(user),
            ..NewSession::default()
        })
        .unwrap()
        .id;
    store
        .append_messages(
            &id,
            &[
                LedgerEntry::new(Message::user(text)),
                LedgerEntry::new(Message::assistant("Noted.")),
            ],
        )
        .unwrap();
    store.set_status(&id, SessionStatus::Ended).unwrap();
    id
}

#[test]
fn an_old_session_is_found_and_another_users_is_not() {
    // The model searches for the marker, then repeats what the tool
    // returned.
    let responder: Responder = Arc::new(|request: &Value| {
        let last = request["messages"].as_array().unwrap().last().unwrap();
        if last["role"] == "tool" {
            Reply::text(format!("TOOL SAID: {}", last["content"].as_str().unwrap()))
        } else {
            Reply::tool(
                "c1",
                "session_search",
                r#"{"query": "zebra42x", "limit": 10}"#,
            )
        }
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", "fake-model".to_owned()),
        ("HERMES_TOOLSETS", "session_search".to_owned()),
    ]);
    let settings = hermes_runtime::config::load(
        &Overrides {
            workdir: Some(home.path().to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    let store = Arc::new(Mutex::new(Store::open(&settings.state_db()).unwrap()));
    let (alice_old, bob_old) = {
        let mut s = store.lock().unwrap();
        (
            old_session(&mut s, "alice", "my locker code is zebra42x, alice's"),
            old_session(&mut s, "bob", "bob keeps zebra42x in his notes"),
        )
    };
    let factory = Arc::new(RuntimeAgentFactory::new(&settings, None).unwrap());
    factory.offer_session_search(store.clone());
    let adapter = TestAdapter::new("test");
    let mut config = GatewayConfig::default();
    config.allow.everywhere.insert("alice".to_owned());
    config.allow.everywhere.insert("bob".to_owned());
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory,
        store: store.clone(),
        clock: Arc::new(SystemClock),
        config,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(runner.start()).unwrap();

    adapter.say(
        ChatType::Dm,
        "dm-alice",
        "alice",
        "what was my locker code?",
    );
    let sent = adapter
        .wait_until(WAIT, |s| !s.is_empty())
        .unwrap_or_else(|s| panic!("alice unanswered: {s:#?}"));
    let alice_reply = sent[0].text.clone();
    adapter.say(ChatType::Dm, "dm-bob", "bob", "where is zebra42x?");
    let sent = adapter
        .wait_until(WAIT, |s| s.len() >= 2)
        .unwrap_or_else(|s| panic!("bob unanswered: {s:#?}"));
    let bob_reply = sent[1].text.clone();
    rt.block_on(runner.shutdown());

    assert!(
        alice_reply.starts_with("TOOL SAID: 1 earlier session"),
        "{alice_reply}"
    );
    assert!(alice_reply.contains(&alice_old), "{alice_reply}");
    assert!(alice_reply.contains("[zebra42x]"), "{alice_reply}");
    assert!(!alice_reply.contains(&bob_old), "{alice_reply}");
    assert!(!alice_reply.contains("bob"), "{alice_reply}");

    assert!(bob_reply.contains(&bob_old), "{bob_reply}");
    assert!(!bob_reply.contains(&alice_old), "{bob_reply}");
    assert!(!bob_reply.contains("locker"), "{bob_reply}");
    // Bob's current message says zebra42x too: the asking session is left out.
    assert!(
        bob_reply.starts_with("TOOL SAID: 1 earlier session"),
        "{bob_reply}"
    );

    let requests = provider.requests();
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "session_search"),
        "offered: {}",
        requests[0]["tools"]
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}
