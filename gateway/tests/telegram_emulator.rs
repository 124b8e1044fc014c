//! The Telegram adapter against the third-party `telegram-test-api` emulator
//! (npm), started per test as a child process on 127.0.0.1.
//!
//! The emulator speaks the Bot API to the adapter and a small client API to
//! the test: `POST /sendMessage` injects a user's message, `POST /getUpdates`
//! (`{token, chatId}`) returns what the bot sent to that chat. Its limits:
//! it ignores `timeout` and `offset` (it marks updates read itself), accepts
//! any token, has no `sendChatAction`, and its bot is always
//! `@TestNameBot` (id 666).
//!
//! Setup: `npm ci --prefix tests/emulators/telegram` (CI does this first).
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_core::context::summary::SUMMARIZER_PROMPT;
use hermes_gateway::adapter::PlatformAdapter;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::{ChatType, MessageEvent};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{collector, recv_within};
use hermes_runtime::config::{Environment, Overrides};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{Advertise, FakeProvider, Overflow, Reply, Responder, Window};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::telegram_emulator_support;

use telegram_emulator_support::{EMULATOR_BOT_ID, Emulator, WAIT};

async fn next_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, WAIT)
        .await
        .expect("no event in time (or the handler was dropped)")
}

#[tokio::test]
async fn dm_round_trip() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let token = "100:dm-round-trip";
    let adapter = emu.adapter(token);
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    assert_eq!(adapter.bot().unwrap().id, EMULATOR_BOT_ID);

    emu.user_says(
        token,
        (101, "Ann"),
        (101, "private"),
        "hello bot",
        json!({}),
    )
    .await;
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.text, "hello bot");
    assert_eq!(ev.source.platform, "telegram");
    assert_eq!(ev.source.chat_type, ChatType::Dm);
    assert_eq!(
        (ev.source.chat_id.as_str(), ev.source.user_id.as_str()),
        ("101", "101")
    );
    assert_eq!(ev.source.user_name.as_deref(), Some("ann"));

    // The emulator has no sendChatAction: typing must not fail or hang.
    adapter.typing(&ev.source.chat_id).await;
    adapter
        .send(
            &ev.source.chat_id,
            "**echo**: hello bot",
            Some(&ev.message_id),
        )
        .await
        .unwrap();
    let sent = emu.bot_messages(token, 101, 1).await;
    assert_eq!(sent[0]["text"], "<b>echo</b>: hello bot");
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert_eq!(
        sent[0]["reply_parameters"]["message_id"].to_string(),
        ev.message_id
    );

    // The emulator ignores offsets; the adapter must still not redeliver.
    emu.user_says(token, (101, "Ann"), (101, "private"), "second", json!({}))
        .await;
    assert_eq!(next_event(&mut rx).await.text, "second");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(rx.try_recv().is_err(), "no repeats");
    adapter.disconnect().await;
}

#[tokio::test]
async fn group_with_two_users_answers_only_when_addressed() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let token = "200:group";
    let adapter = emu.adapter(token);
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    let group = (-200, "group");

    // Small talk between members is not for the bot.
    emu.user_says(
        token,
        (201, "Ann"),
        group,
        "anyone up for lunch?",
        json!({}),
    )
    .await;
    emu.user_says(token, (202, "Bob"), group, "sure", json!({}))
        .await;
    emu.user_says(
        token,
        (202, "Bob"),
        group,
        "@TestNameBot where is a good place?",
        json!({}),
    )
    .await;
    let ev = next_event(&mut rx).await;
    assert_eq!(
        ev.text, "@TestNameBot where is a good place?",
        "the unaddressed lines were skipped"
    );
    assert_eq!(ev.source.chat_type, ChatType::Group);
    assert_eq!(
        (ev.source.chat_id.as_str(), ev.source.user_id.as_str()),
        ("-200", "202")
    );

    adapter
        .send("-200", "Try the noodle bar.", Some(&ev.message_id))
        .await
        .unwrap();
    let sent = emu.bot_messages(token, -200, 1).await;
    assert_eq!(sent[0]["text"], "Try the noodle bar.");

    // Ann replies to the bot's message: that addresses the bot too.
    let reply_to = json!({"reply_to_message": {
        "message_id": 1, "date": 0, "text": "Try the noodle bar.",
        "from": {"id": EMULATOR_BOT_ID, "is_bot": true, "first_name": "Test First name"},
        "chat": {"id": -200, "type": "group"}}});
    emu.user_says(
        token,
        (201, "Ann"),
        group,
        "is it open on Sundays?",
        reply_to,
    )
    .await;
    emu.user_says(token, (201, "Ann"), group, "thanks Bob", json!({}))
        .await;
    emu.user_says(
        token,
        (202, "Bob"),
        group,
        "hey @testnamebot, thanks!",
        json!({}),
    )
    .await;
    // The reply carries what it answers, as a quote (SPEC Y5).
    let ev = next_event(&mut rx).await;
    assert_eq!(
        (ev.text.as_str(), ev.source.user_id.as_str()),
        ("> Try the noodle bar.\n\nis it open on Sundays?", "201")
    );
    let ev = next_event(&mut rx).await;
    assert_eq!(
        (ev.text.as_str(), ev.source.user_id.as_str()),
        ("hey @testnamebot, thanks!", "202")
    );
    adapter.disconnect().await;
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn commands_reach_the_gateway_in_one_spelling() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let token = "300:commands";
    let adapter = emu.adapter(token);
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    let entities =
        |len: usize| json!({"entities": [{"type": "bot_command", "offset": 0, "length": len}]});

    emu.user_says(
        token,
        (301, "Cy"),
        (-300, "supergroup"),
        "/status@OtherBot",
        entities(16),
    )
    .await;
    emu.user_says(
        token,
        (301, "Cy"),
        (-300, "supergroup"),
        "/model@TestNameBot gpt-x",
        entities(18),
    )
    .await;
    emu.user_says(token, (301, "Cy"), (301, "private"), "/new", entities(4))
        .await;
    let ev = next_event(&mut rx).await;
    assert_eq!(
        ev.text, "/model gpt-x",
        "a command for another bot is skipped; ours loses its @suffix"
    );
    assert_eq!(ev.source.chat_type, ChatType::Group);
    let ev = next_event(&mut rx).await;
    assert_eq!(
        (ev.text.as_str(), ev.source.chat_type),
        ("/new", ChatType::Dm)
    );

    adapter
        .send("301", "Started a new conversation.", Some(&ev.message_id))
        .await
        .unwrap();
    let sent = emu.bot_messages(token, 301, 1).await;
    assert_eq!(sent[0]["text"], "Started a new conversation.");
    adapter.disconnect().await;
}

#[tokio::test]
async fn long_reply_arrives_as_several_messages_that_join_back() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let token = "400:long";
    let adapter = emu.adapter(token);
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    emu.user_says(
        token,
        (401, "Di"),
        (401, "private"),
        "tell me a long story",
        json!({}),
    )
    .await;
    let ev = next_event(&mut rx).await;

    // ~11 000 UTF-16 units in paragraphs, with astral characters (2 units each).
    let text: String = (0..60)
        .map(|i| {
            format!(
                "Paragraph {i}: once upon a time 🐉 there was a dragon who counted sheep, {}.\n\n",
                "and more sheep".repeat(8)
            )
        })
        .collect();
    let units = text.encode_utf16().count();
    assert!(units > 2 * 4096, "{units}");
    adapter
        .send("401", &text, Some(&ev.message_id))
        .await
        .unwrap();

    // At least ceil(units / 4096) pieces; collect until the whole length is in.
    let mut sent = emu.bot_messages(token, 401, units.div_ceil(4096)).await;
    let deadline = Instant::now() + WAIT;
    while sent
        .iter()
        .map(|m| m["text"].as_str().unwrap().len())
        .sum::<usize>()
        < text.len()
    {
        assert!(Instant::now() < deadline, "the reply did not arrive whole");
        sent.extend(emu.bot_messages(token, 401, 1).await);
    }
    let pieces: Vec<&str> = sent.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert!(pieces.len() >= 3, "{} pieces", pieces.len());
    for p in &pieces {
        assert!(
            p.encode_utf16().count() <= 4096,
            "piece of {} units",
            p.encode_utf16().count()
        );
    }
    assert_eq!(
        pieces.concat(),
        text,
        "the pieces join back to the whole reply"
    );
    assert_eq!(
        sent[0]["reply_parameters"]["message_id"].to_string(),
        ev.message_id
    );
    adapter.disconnect().await;
}

/// `/compress` end to end: a user on Telegram (the emulator) talks to the
/// gateway runner with the production agent factory, whose provider (the
/// loopback fake) has a 6000-token window it advertises in `/models`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compress_through_telegram_replies_with_sizes_and_the_next_turn_uses_the_summary() {
    hermes_tests::require!(Npm("telegram"));
    let emu = Emulator::start();
    let token = "500:compress";
    let responder: Responder = std::sync::Arc::new(|request: &Value| {
        let system = request["messages"][0]["content"].as_str().unwrap_or("");
        if system == SUMMARIZER_PROMPT {
            return Reply::text("Goal: the user counts turns; all answered.");
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
        Reply::text(format!("answer {n}"))
    });
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: 6_000,
            overflow: Overflow::OpenAi,
            advertise: Advertise::ModelsContextLength,
        }),
        Some(responder),
    )
    .unwrap();
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
    let factory = RuntimeAgentFactory::new(&settings, None).unwrap();
    let store = Store::open(&settings.state_db()).unwrap();
    let mut config = GatewayConfig::default();
    config.allow.everywhere.insert("501".to_owned());
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(emu.adapter(token))],
        factory: Arc::new(factory),
        store: Arc::new(std::sync::Mutex::new(store)),
        clock: Arc::new(SystemClock),
        config,
    });
    runner.start().await.unwrap();

    for n in 1..=4 {
        let text = format!(
            "turn {n}: {}",
            "a long message about the garden ".repeat(12)
        );
        emu.user_says(token, (501, "Eve"), (501, "private"), &text, json!({}))
            .await;
        let reply = emu.bot_messages(token, 501, 1).await;
        assert_eq!(reply[0]["text"], format!("answer {n}"));
    }
    emu.user_says(
        token,
        (501, "Eve"),
        (501, "private"),
        "/compress the garden",
        json!({}),
    )
    .await;
    let reply = emu.bot_messages(token, 501, 1).await;
    let text = reply[0]["text"].as_str().unwrap().to_owned();
    assert!(text.starts_with("Compressed the conversation: "), "{text}");
    assert!(text.contains("tokens of 6000"), "{text}");
    let sizes: Vec<u64> = text
        .split('~')
        .skip(1)
        .filter_map(|p| p.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        sizes.len() == 2 && sizes[1] < sizes[0],
        "before → after: {text}"
    );
    let summary_request = provider
        .requests()
        .into_iter()
        .rev()
        .find(|r| r["messages"][0]["content"] == SUMMARIZER_PROMPT)
        .unwrap();
    assert!(summary_request.to_string().contains("focus on: the garden"));

    emu.user_says(token, (501, "Eve"), (501, "private"), "/status", json!({}))
        .await;
    let status = emu.bot_messages(token, 501, 1).await;
    let status = status[0]["text"].as_str().unwrap().to_owned();
    assert!(
        status.contains("context: ") && status.contains(" / 6000 tokens ("),
        "{status}"
    );
    assert!(status.contains("provider metadata"), "{status}");
    // Issue 38: the fixed part of every request against the window.
    assert!(
        status.contains("Fixed prompt: ~") && status.contains(" % of the window"),
        "{status}"
    );

    // The next turn starts from the compacted view.
    emu.user_says(
        token,
        (501, "Eve"),
        (501, "private"),
        "turn 5: and now?",
        json!({}),
    )
    .await;
    assert_eq!(emu.bot_messages(token, 501, 1).await[0]["text"], "answer 5");
    let last = provider.requests().pop().unwrap();
    assert!(last.to_string().contains("[Context summary]"), "{last}");
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    runner.shutdown().await;
}
