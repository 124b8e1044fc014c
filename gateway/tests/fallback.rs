//! The gateway with the production agent factory on a fallback chain (SPEC
//! X2, G4): a turn the fallback answered ends with one notice naming the
//! model that answered, the session's cached agent is dropped, and the next
//! turn runs on the primary again; `/usage` and `/status` report tokens,
//! the cache share and the cost. Providers are the project's loopback
//! [`FakeProvider`]s; the store is a real SQLite file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::TestAdapter;
use hermes_runtime::config::{self, Environment, Overrides};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn a_fallback_is_told_once_the_cached_agent_dropped_and_the_next_turn_is_on_the_primary() {
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                       "prompt_tokens_details": {"cached_tokens": 800}});
    let primary = FakeProvider::start(vec![
        Reply::Status(401, "Incorrect API key provided".into()),
        Reply::text("The primary again.").with_usage(usage.clone()),
    ])
    .unwrap();
    let fallback =
        FakeProvider::start(vec![Reply::text("The fallback answered.").with_usage(
            json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}),
        )])
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[provider]\nbase_url = \"{}\"\nmodel = \"primary-model\"\n\
             price = {{ input = 1.0, output = 2.0, cache_read = 0.1 }}\n\
             [[provider.fallback]]\nbase_url = \"{}\"\nmodel = \"fallback-model\"\n\
             [agent]\ntoolsets = [\"todo\"]\n",
            primary.base_url(),
            fallback.base_url()
        ),
    )
    .unwrap();
    let env = Environment::from_pairs([("HERMES_HOME", home.path().display().to_string())]);
    let settings = config::load(
        &Overrides {
            workdir: Some(home.path().to_owned()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    let factory = Arc::new(RuntimeAgentFactory::new(&settings, None).unwrap());
    let store = Store::open(&settings.state_db())
        .unwrap()
        .with_clock(Arc::new(SystemClock));
    let store = Arc::new(Mutex::new(store));
    let adapter = TestAdapter::new("test");
    let mut gateway = GatewayConfig::default();
    gateway.allow.everywhere = ["alice".to_owned()].into_iter().collect();
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory,
        store: store.clone(),
        clock: Arc::new(SystemClock),
        config: gateway,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(runner.start()).unwrap();
    let key = "agent:main:test:dm:chat1";
    let replies = |n: usize| {
        adapter
            .wait_until(WAIT, |sent| sent.len() >= n)
            .unwrap_or_else(|sent| panic!("waited for {n} replies: {sent:#?}"))
            .into_iter()
            .map(|s| s.text)
            .collect::<Vec<_>>()
    };

    adapter.say(ChatType::Dm, "chat1", "alice", "hello");
    let texts = replies(1);
    assert!(texts[0].starts_with("The fallback answered."), "{texts:?}");
    assert_eq!(
        texts[0].matches("(Answered by fallback-model").count(),
        1,
        "told once: {texts:?}"
    );
    assert!(
        texts[0].contains("primary-model was unavailable"),
        "{texts:?}"
    );
    assert!(texts[0].contains("authentication failed"), "{texts:?}");
    assert!(
        !runner.is_cached(key),
        "the agent that fell back is dropped (G4)"
    );
    assert_eq!(runner.cache_stats().invalidated, 1);

    adapter.say(ChatType::Dm, "chat1", "alice", "again");
    let texts = replies(2);
    assert_eq!(texts[1], "The primary again.", "no notice: {texts:?}");
    assert!(runner.is_cached(key));
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(fallback.requests().len(), 1);

    adapter.say(ChatType::Dm, "chat1", "alice", "/usage");
    let texts = replies(3);
    let report = &texts[2];
    // fallback: 12 + 7; primary: 1000 + 50.
    assert!(report.contains("1012 prompt + 57 completion"), "{report}");
    assert!(
        report.contains("79 % of prompt tokens read from the cache"),
        "{report}"
    );
    assert!(report.contains("primary-model: 1 calls"), "{report}");
    assert!(report.contains("fallback-model: 1 calls"), "{report}");
    // Only the primary has a price: 200 × 1 + 800 × 0.1 + 50 × 2 per million.
    assert!(report.contains("cost: at least $0.0004"), "{report}");

    adapter.say(ChatType::Dm, "chat1", "alice", "/status");
    let texts = replies(4);
    assert!(texts[3].contains("cache: 79 %"), "{}", texts[3]);
    assert!(primary.violations().is_empty() && fallback.violations().is_empty());
    rt.block_on(runner.shutdown());
}
