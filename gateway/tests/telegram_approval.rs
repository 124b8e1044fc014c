//! Approval of dangerous commands from a chat, end to end: the Telegram
//! adapter against the third-party `telegram-test-api` emulator, the real
//! runner and agent factory (provider client, sandboxed terminal, approval
//! hub), and a scripted loopback provider asking to run `rm -rf`. The user
//! answers `/deny`, `/approve`, or nothing (the timeout denies).
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_emulator_support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use hermes_gateway::adapter::PlatformAdapter;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};
use telegram_emulator_support::Emulator;

const TOKEN: &str = "500:approvals";
const USER: (i64, &str) = (501, "Ana");
const DM: (i64, &str) = (501, "private");

struct Gateway {
    runner: GatewayRunner,
    work: tempfile::TempDir,
    _home: tempfile::TempDir,
}

async fn gateway(emu: &Emulator, provider: &FakeProvider, config_toml: &str) -> Gateway {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // Streamed replies (SPEC X6, tested in progress.rs) would add a status
    // message per tool call: these tests read the chat as whole messages.
    let config_toml = format!("[gateway]\nstream_replies = false\n\n{config_toml}");
    std::fs::write(home.path().join("config.toml"), config_toml).unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", "fake-model".to_owned()),
        ("TELEGRAM_ALLOWED_USERS", USER.0.to_string()),
    ]);
    let overrides = Overrides {
        workdir: Some(work.path().to_owned()),
        ..Overrides::default()
    };
    let settings = load(&overrides, &env).unwrap();
    let bridge = Arc::new(AsyncBridge::from_handle(tokio::runtime::Handle::current()));
    let factory = Arc::new(RuntimeAgentFactory::new(&settings, Some(bridge)).unwrap());
    let store = Store::open(&settings.state_db()).unwrap();
    let adapter: Arc<dyn PlatformAdapter> = Arc::new(emu.adapter(TOKEN));
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter],
        factory,
        store: Arc::new(Mutex::new(store)),
        clock: Arc::new(SystemClock),
        config: GatewayConfig::from_settings(&settings, hermes_gateway::platform::platforms())
            .unwrap(),
    });
    runner.start().await.unwrap();
    Gateway {
        runner,
        work,
        _home: home,
    }
}

async fn say(emu: &Emulator, text: &str) {
    emu.user_says(TOKEN, USER, DM, text, json!({})).await;
}

async fn command(emu: &Emulator, text: &str) {
    let len = text.split_whitespace().next().unwrap_or("").len();
    emu.user_says(
        TOKEN,
        USER,
        DM,
        text,
        json!({"entities": [{"type": "bot_command", "offset": 0, "length": len}]}),
    )
    .await;
}

/// What the bot sent, as a user reads it (the emulator keeps the HTML the
/// adapter sends; Telegram would render it).
async fn bot_texts(emu: &Emulator, n: usize) -> Vec<String> {
    emu.bot_messages(TOKEN, DM.0, n)
        .await
        .iter()
        .map(|m| {
            m["text"]
                .as_str()
                .unwrap_or_default()
                .replace("<pre>", "")
                .replace("</pre>", "")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&")
        })
        .collect()
}

fn tool_results(provider: &FakeProvider) -> Vec<String> {
    let requests = provider.requests();
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m: &Value| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn dir(work: &Path, name: &str) -> std::path::PathBuf {
    let d = work.join(name);
    std::fs::create_dir_all(d.join("inside")).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_then_approve_from_the_chat() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", r#"{"command":"rm -rf build"}"#),
        Reply::text("Kept build."),
        Reply::tool(
            "c2",
            "terminal",
            r#"{"command":"rm -rf build && echo removed"}"#,
        ),
        Reply::text("Deleted build."),
    ])
    .unwrap();
    // A generous timeout, only so that a failing test does not hang for 5 min.
    let gw = gateway(&emu, &provider, "[agent]\napproval_timeout = 60\n").await;
    let build = dir(gw.work.path(), "build");

    say(&emu, "clean up please").await;
    let asked = bot_texts(&emu, 1).await;
    assert!(asked[0].contains("Approval needed"), "{asked:?}");
    assert!(
        asked[0].contains("I want to run\n\nrm -rf build\n"),
        "{asked:?}"
    );
    assert!(
        asked[0].contains("/approve") && asked[0].contains("/deny"),
        "{asked:?}"
    );
    command(&emu, "/deny").await;
    let mut after = bot_texts(&emu, 2).await;
    after.sort();
    assert_eq!(after, ["Denied; the command will not run.", "Kept build."]);
    assert!(build.is_dir(), "a denied command does not run");
    let results = tool_results(&provider);
    assert!(
        results[0].contains("did not approve") && results[0].contains("/deny"),
        "{results:?}"
    );

    say(&emu, "no really, delete it").await;
    let asked = bot_texts(&emu, 1).await;
    assert!(
        asked[0].contains("rm -rf build && echo removed"),
        "{asked:?}"
    );
    command(&emu, "/approve").await;
    let mut after = bot_texts(&emu, 2).await;
    after.sort();
    assert_eq!(after, ["Approved; running it.", "Deleted build."]);
    assert!(!build.exists());
    let results = tool_results(&provider);
    assert!(results.last().unwrap().contains("removed"), "{results:?}");

    command(&emu, "/approve").await;
    assert_eq!(
        bot_texts(&emu, 1).await,
        ["Nothing is waiting for your approval."]
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_in_time_denies_and_always_covers_the_conversation() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", r#"{"command":"rm -rf old"}"#),
        Reply::text("Left old alone."),
        Reply::tool("c2", "terminal", r#"{"command":"rm -rf old"}"#),
        Reply::tool("c3", "terminal", r#"{"command":"rm -rf older"}"#),
        Reply::text("Both removed."),
    ])
    .unwrap();
    let gw = gateway(&emu, &provider, "[agent]\napproval_timeout = 2\n").await;
    let old = dir(gw.work.path(), "old");
    let older = dir(gw.work.path(), "older");

    say(&emu, "remove old").await;
    let texts = bot_texts(&emu, 3).await;
    assert!(
        texts[0].contains("No answer within 2 s means no"),
        "{texts:?}"
    );
    assert_eq!(
        texts[1],
        "⌛ No answer within 2 s: the command was not run."
    );
    assert_eq!(texts[2], "Left old alone.");
    assert!(old.is_dir());
    assert!(tool_results(&provider)[0].contains("no answer within 2 s"));

    say(&emu, "try again").await;
    let asked = bot_texts(&emu, 1).await;
    assert!(asked[0].contains("rm -rf old"), "{asked:?}");
    command(&emu, "/approve always").await;
    // The second delete of the turn runs unasked.
    let mut after = bot_texts(&emu, 2).await;
    after.sort();
    assert_eq!(
        after,
        [
            "Approved; commands of this kind run unasked for the rest of this conversation.",
            "Both removed."
        ]
    );
    assert!(!old.exists() && !older.exists());
    gw.runner.shutdown().await;
}
