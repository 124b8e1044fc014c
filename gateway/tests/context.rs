//! The context window in the gateway (SPEC X1): the production agent
//! factory against the loopback provider enforcing a small window, through
//! the in-process adapter. Every turn is answered, each turn starts from the
//! stored compacted view, and every original stays in the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::context::summary::SUMMARIZER_PROMPT;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::TestAdapter;
use hermes_runtime::config::{Environment, Overrides};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply, Responder, Window};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn twenty_turns_through_a_small_window_in_the_gateway() {
    let responder: Responder = Arc::new(|request: &Value| {
        if request["messages"][0]["content"] == SUMMARIZER_PROMPT {
            return Reply::text("Goal: the user counts turns; every one was answered.");
        }
        let last = request["messages"].as_array().unwrap().last().unwrap();
        // The last `turn N` (a summary may stand before it).
        let text = last["content"].as_str().unwrap_or("");
        let n: String = text
            .rfind("turn ")
            .map(|at| {
                text[at + 5..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect()
            })
            .unwrap_or_else(|| "?".into());
        Reply::text(format!("answer {n}: {}", "noted ".repeat(60)))
    });
    // Not advertised: the gateway starts from the default window and the
    // provider's errors teach it the real one.
    let provider =
        FakeProvider::start_with(vec![], Some(Window::openai(5_000)), Some(responder)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", "fake-model".to_owned()),
        ("HERMES_TOOLSETS", "todo".to_owned()),
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
    let adapter = TestAdapter::new("test");
    let mut config = GatewayConfig::default();
    config.allow.everywhere.insert("alice".to_owned());
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: Arc::new(RuntimeAgentFactory::new(&settings, None).unwrap()),
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

    for n in 1..=20 {
        let text = format!(
            "turn {n}: marker{n}x {}",
            "a detail to keep in mind ".repeat(30)
        );
        adapter.say(ChatType::Dm, "dm-alice", "alice", &text);
        let sent = adapter
            .wait_until(WAIT, |s| s.len() >= n)
            .unwrap_or_else(|s| panic!("turn {n} unanswered: {s:#?}"));
        assert!(
            sent[n - 1].text.starts_with(&format!("answer {n}:")),
            "turn {n}: {}",
            sent[n - 1].text
        );
    }
    rt.block_on(runner.shutdown());

    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert!(
        !provider.refused().is_empty(),
        "the real window was learned from an error"
    );
    let requests = provider.requests();
    let system: Vec<&Value> = requests
        .iter()
        .filter(|r| r["messages"][0]["content"] != SUMMARIZER_PROMPT)
        .map(|r| &r["messages"][0]["content"])
        .collect();
    assert!(
        system.iter().all(|s| *s == system[0]),
        "the system prompt never changes"
    );

    let store = store.lock().unwrap();
    let session = store
        .active_session_for_key("agent:main:test:dm:dm-alice")
        .unwrap()
        .unwrap();
    let originals = store.load_transcript(&session.id).unwrap();
    assert_eq!(originals.len(), 40, "every message is stored");
    assert!(store.compactions(&session.id).unwrap().len() >= 2);
    assert!(store.load_view(&session.id).unwrap().len() < 20);
    assert_eq!(store.search("marker2x", 5).unwrap().len(), 1);
}
