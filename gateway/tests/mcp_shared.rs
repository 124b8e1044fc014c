//! MCP in the gateway: the real agent factory starts the configured server
//! (`@modelcontextprotocol/server-everything` from `tests/emulators/mcp`)
//! once for the process, and every chat's agent calls the same server —
//! its state is shared, as README says. Two chats, one in-process adapter,
//! a scripted loopback provider.
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::TestAdapter;
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply};

const WAIT: Duration = Duration::from_secs(60);

fn everything() -> PathBuf {
    hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("mcp"));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/emulators/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        path.is_file(),
        "the MCP test servers are not installed: run `npm ci --prefix tests/emulators/mcp`"
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chat_uses_the_one_server_of_the_process() {
    hermes_tests::require!(Npm("mcp"));
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[mcp.servers.everything]\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
            everything().display()
        ),
    )
    .unwrap();
    let provider = FakeProvider::start(vec![
        Reply::tool("a1", "mcp_everything_toggle-simulated-logging", "{}"),
        Reply::text("A: toggled."),
        Reply::tool("b1", "mcp_everything_toggle-simulated-logging", "{}"),
        Reply::text("B: toggled."),
    ])
    .unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", "fake-model".to_owned()),
        ("GATEWAY_ALLOW_ALL_USERS", "true".to_owned()),
        // Only the server's tools: the default toolsets' specs would push
        // the prompt past the default 8k window's compaction threshold.
        ("HERMES_TOOLSETS", "mcp".to_owned()),
        ("PATH", std::env::var("PATH").unwrap_or_default()),
    ]);
    let overrides = Overrides {
        workdir: Some(home.path().to_owned()),
        ..Overrides::default()
    };
    let settings = load(&overrides, &env).unwrap();
    let bridge = Arc::new(AsyncBridge::from_handle(tokio::runtime::Handle::current()));
    let factory = tokio::task::spawn_blocking(move || {
        RuntimeAgentFactory::new(&settings, Some(bridge)).map(|f| (f, settings))
    })
    .await
    .unwrap();
    let (factory, settings) = factory.unwrap();
    let adapter = TestAdapter::new("test");
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: Arc::new(factory),
        store: Arc::new(Mutex::new(Store::open(&settings.state_db()).unwrap())),
        clock: Arc::new(SystemClock),
        config: GatewayConfig::from_settings(&settings, hermes_gateway::platform::platforms())
            .unwrap(),
    });
    runner.start().await.unwrap();

    adapter.say(ChatType::Dm, "chat-a", "alice", "toggle it");
    let a = adapter.clone();
    tokio::task::spawn_blocking(move || {
        a.wait_until(WAIT, |s| s.iter().any(|m| m.chat_id == "chat-a"))
    })
    .await
    .unwrap()
    .expect("chat A was answered");
    adapter.say(ChatType::Dm, "chat-b", "bob", "toggle it too");
    let a = adapter.clone();
    tokio::task::spawn_blocking(move || {
        a.wait_until(WAIT, |s| s.iter().any(|m| m.chat_id == "chat-b"))
    })
    .await
    .unwrap()
    .expect("chat B was answered");
    assert_eq!(adapter.texts_to("chat-a"), ["A: toggled."]);
    assert_eq!(adapter.texts_to("chat-b"), ["B: toggled."]);

    let requests = provider.requests();
    let result = |i: usize| {
        requests[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // Chat B's call found the state chat A's call left: one server.
    assert!(result(1).starts_with("Started simulated"), "{}", result(1));
    assert!(result(3).starts_with("Stopped simulated"), "{}", result(3));
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    runner.shutdown().await;
}
