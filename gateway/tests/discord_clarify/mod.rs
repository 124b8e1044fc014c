//! `clarify` through the whole gateway on Discord (issue 46): the Discord
//! adapter against the fake (`discord_support`, whose buttons and
//! interactions follow Discord's documentation), the production agent
//! factory over the real store, the loopback `FakeProvider` as the model.
//! The question goes out as buttons; a press (INTERACTION_CREATE) answers
//! it and disables them; a question answered in words or timed out has
//! its buttons disabled by an edit; another user's press and a press on a
//! question that no longer waits (replaced, asked before a restart) get a
//! note only the presser sees.

use std::sync::Arc;
use std::time::Duration;

use hermes_discord::DiscordAdapter;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_runtime::config::{Environment, Overrides, Settings};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply, Responder};
use serde_json::{Value, json};

use super::{ALICE, BOB, CHANNEL};
use crate::discord_support::{Behaviour, FakeDiscord, Posted};

const QUESTION: &str = r#"{"question":"Which colour?","choices":["red","blue"]}"#;

/// Asks the question when told "ask me"; repeats a tool result back.
fn asker() -> Responder {
    Arc::new(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        if last["role"] == "tool" {
            return Reply::text(format!("Noted: {}", last["content"].as_str().unwrap()));
        }
        if last["content"]
            .as_str()
            .is_some_and(|t| t.contains("ask me"))
        {
            return Reply::tool("c1", "clarify", QUESTION);
        }
        Reply::text("I read your message.")
    })
}

struct Gateway {
    fake: FakeDiscord,
    provider: FakeProvider,
    runner: GatewayRunner,
    _home: tempfile::TempDir,
    _work: tempfile::TempDir,
    _settings: Settings,
}

async fn gateway(config_toml: &str) -> Gateway {
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let provider = FakeProvider::start_with(vec![], None, Some(asker())).unwrap();
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), config_toml).unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", "gpt-4o".to_owned()),
        ("HERMES_TOOLSETS", "todo,clarify".to_owned()),
    ]);
    let settings = hermes_runtime::config::load(
        &Overrides {
            workdir: Some(work.path().to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    let factory = RuntimeAgentFactory::new(&settings, None).unwrap();
    let store = Arc::new(std::sync::Mutex::new(
        Store::open(&settings.state_db()).unwrap(),
    ));
    let mut config =
        GatewayConfig::from_settings(&settings, hermes_gateway::platform::platforms()).unwrap();
    config.allow.everywhere.insert(ALICE.to_owned());
    config.allow.everywhere.insert(BOB.to_owned());
    let adapter = DiscordAdapter::new(super::config(&fake));
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter)],
        factory: Arc::new(factory),
        store,
        clock: Arc::new(SystemClock),
        config,
    });
    runner.start().await.unwrap();
    Gateway {
        fake,
        provider,
        runner,
        _home: home,
        _work: work,
        _settings: settings,
    }
}

/// Waits for the `n`-th question (1-based) and returns it.
async fn question(fake: &FakeDiscord, n: usize) -> Posted {
    let asked = |f: &FakeDiscord| {
        f.posted()
            .into_iter()
            .filter(|p| p.content.contains("Which colour?"))
            .collect::<Vec<_>>()
    };
    fake.wait_for("the question", |f| asked(f).len() >= n).await;
    asked(fake).swap_remove(n - 1)
}

/// The `custom_id` of button `n` (1-based) of a posted message.
fn button(p: &Posted, n: usize) -> String {
    p.body["components"][0]["components"][n - 1]["custom_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The `clarify` tool results the model was given, in order.
fn tool_results(provider: &FakeProvider) -> Vec<Value> {
    let mut seen: Vec<Value> = Vec::new();
    for r in provider.requests() {
        for m in r["messages"].as_array().unwrap() {
            if m["role"] == "tool" {
                let v: Value = serde_json::from_str(m["content"].as_str().unwrap())
                    .unwrap_or_else(|_| json!(m["content"]));
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
        }
    }
    seen
}

async fn replies_starting(fake: &FakeDiscord, prefix: &str, n: usize) -> Vec<String> {
    fake.wait_for(&format!("{n} replies starting {prefix:?}"), |f| {
        f.posted()
            .iter()
            .filter(|p| p.content.starts_with(prefix))
            .count()
            >= n
    })
    .await;
    fake.posted()
        .into_iter()
        .map(|p| p.content)
        .filter(|c| c.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_press_answers_the_question_and_disables_its_buttons() {
    hermes_tests::require!(Npm("discord-spec"));
    let gw = gateway("").await;
    let fake = &gw.fake;
    let asked_in = fake.dm(ALICE, "ask me");
    let q = question(fake, 1).await;
    assert_eq!(q.channel, fake.dm_channel(ALICE));
    assert_eq!(q.reply_to.as_deref(), Some(asked_in.as_str()));
    let row = &q.body["components"][0];
    assert_eq!(row["type"], 1);
    let labels: Vec<&str> = row["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["red", "blue"]);
    let id = fake.press(&q.id, ALICE, &button(&q, 2)).unwrap();
    let response = fake.wait_response(&id).await;
    assert_eq!(response["type"], 7, "{response}");
    replies_starting(fake, "Noted:", 1).await;
    let results = tool_results(&gw.provider);
    assert_eq!(results[0]["user_response"], "blue", "{results:?}");
    assert_eq!(results[0]["choice_number"], 2);
    // The message now shows the pick and its buttons are disabled: the
    // client cannot press them again.
    let now = fake.message_now(&q.id).unwrap();
    assert!(
        now["content"].as_str().unwrap().ends_with("✅ blue"),
        "{now}"
    );
    assert_eq!(now["components"][0]["components"][0]["disabled"], true);
    assert!(fake.press(&q.id, ALICE, &button(&q, 1)).is_none());
    assert_eq!(gw.provider.requests().len(), 2, "one turn, two model calls");
    assert!(fake.ephemeral_notes().is_empty());
    super::assert_bodies_match_discord_schema(fake);
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_press_is_refused_with_a_note_only_they_see() {
    hermes_tests::require!(Npm("discord-spec"));
    let gw = gateway("").await;
    let fake = &gw.fake;
    fake.guild_message(CHANNEL, ALICE, "ask me", true);
    let q = question(fake, 1).await;
    assert_eq!(q.channel, CHANNEL);
    let bobs = fake.press(&q.id, BOB, &button(&q, 1)).unwrap();
    let response = fake.wait_response(&bobs).await;
    assert_eq!(response["type"], 4, "{response}");
    assert_eq!(response["data"]["flags"], 64, "ephemeral");
    let notes = fake.ephemeral_notes();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].0, BOB);
    assert!(notes[0].1.contains(&format!("<@{ALICE}>")), "{notes:?}");
    // Bob's press answered nothing: the buttons are live, the turn waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(gw.provider.requests().len(), 1);
    assert!(tool_results(&gw.provider).is_empty());
    let alices = fake.press(&q.id, ALICE, &button(&q, 1)).unwrap();
    assert_eq!(fake.wait_response(&alices).await["type"], 7);
    replies_starting(fake, "Noted:", 1).await;
    assert_eq!(tool_results(&gw.provider)[0]["user_response"], "red");
    super::assert_bodies_match_discord_schema(fake);
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_on_a_question_that_no_longer_waits_gets_a_note_not_a_turn() {
    hermes_tests::require!(Npm("discord-spec"));
    let gw = gateway("[agent]\nclarify_timeout = 1\n").await;
    let fake = &gw.fake;
    fake.dm(ALICE, "ask me");
    let first = question(fake, 1).await;
    // Nobody answers: the turn carries on without it.
    let noted = replies_starting(fake, "Noted:", 1).await;
    assert!(noted[0].contains("no answer within 1 s"), "{noted:?}");
    // The timed-out question's buttons are disabled: none can be pressed.
    buttons_closed(fake, &first.id).await;
    assert!(fake.press(&first.id, ALICE, &button(&first, 1)).is_none());
    fake.dm(ALICE, "ask me");
    let second = question(fake, 2).await;
    // The older question's buttons stay disabled while a new one waits.
    assert!(fake.press(&first.id, ALICE, &button(&first, 2)).is_none());
    // The second question is still open and takes its answer.
    let pick = fake.press(&second.id, ALICE, &button(&second, 2)).unwrap();
    assert_eq!(fake.wait_response(&pick).await["type"], 7);
    replies_starting(fake, "Noted:", 2).await;
    let results = tool_results(&gw.provider);
    assert_eq!(
        results.last().unwrap()["user_response"],
        "blue",
        "{results:?}"
    );
    // Two turns, two model calls each: no stale press reached anyone, and
    // none was answered in the chat.
    assert_eq!(gw.provider.requests().len(), 4);
    assert!(
        !fake
            .posted()
            .iter()
            .any(|p| p.content.contains("no longer waiting")),
        "{:?}",
        fake.posted()
    );
    super::assert_bodies_match_discord_schema(fake);
    gw.runner.shutdown().await;
}

/// Waits until every button of message `id` is disabled and none is
/// shown as picked (the question closed without a press).
async fn buttons_closed(fake: &FakeDiscord, id: &str) {
    fake.wait_for("the question's buttons disabled", |f| {
        f.message_now(id).is_some_and(|m| {
            let row = &m["components"][0]["components"];
            row.as_array().is_some_and(|b| {
                !b.is_empty() && b.iter().all(|b| b["disabled"] == true && b["style"] == 2)
            })
        })
    })
    .await;
}

/// An answer in words closes the buttons too: they are disabled (an edit
/// of the question's message), so they cannot be pressed any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_words_closes_the_buttons() {
    hermes_tests::require!(Npm("discord-spec"));
    let gw = gateway("").await;
    let fake = &gw.fake;
    fake.dm(ALICE, "ask me");
    let q = question(fake, 1).await;
    assert!(
        fake.message_now(&q.id).unwrap()["components"][0]["components"][0]["disabled"].is_null(),
        "live before the answer"
    );
    fake.dm(ALICE, "green, actually");
    replies_starting(fake, "Noted:", 1).await;
    assert_eq!(
        tool_results(&gw.provider)[0]["user_response"],
        "green, actually"
    );
    buttons_closed(fake, &q.id).await;
    // The question's text is left as it was.
    assert_eq!(fake.message_now(&q.id).unwrap()["content"], q.content);
    assert!(fake.press(&q.id, ALICE, &button(&q, 1)).is_none());
    super::assert_bodies_match_discord_schema(fake);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.provider.requests().len(), 2);
    gw.runner.shutdown().await;
}

/// A question asked by an earlier process (a restart in between): its
/// buttons are still on the message, but nobody waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_on_a_question_from_before_a_restart_is_stale() {
    use hermes_gateway::adapter::PlatformAdapter;
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let before = DiscordAdapter::new(super::config(&fake));
    let (handler, _rx) = hermes_gateway_testing::collector();
    before.connect(handler).await.unwrap();
    let asked = fake.guild_message(CHANNEL, ALICE, "hi", true);
    let colour = hermes_runtime::tools::Question {
        text: "Which colour?".into(),
        choices: vec!["red".into(), "blue".into()],
    };
    before
        .ask(CHANNEL, &colour, Some(asked.as_str()))
        .await
        .unwrap();
    let q = question(&fake, 1).await;
    before.disconnect().await;
    let after = DiscordAdapter::new(super::config(&fake));
    let (handler, mut rx) = hermes_gateway_testing::collector();
    after.connect(handler).await.unwrap();
    let press = fake.press(&q.id, ALICE, &button(&q, 1)).unwrap();
    let response = fake.wait_response(&press).await;
    assert_eq!(response["data"]["flags"], 64, "{response}");
    assert_eq!(response["data"]["content"], hermes_discord::STALE_NOTE);
    assert!(
        hermes_gateway_testing::recv_within(&mut rx, Duration::from_millis(300))
            .await
            .is_none(),
        "no event for a stale press"
    );
    after.disconnect().await;
}
