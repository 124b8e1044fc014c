//! Steer mode and `/steer` (SPEC Y5), `/resume`, `/reasoning` and
//! `/personality` (Y5) through the running gateway: Telegram fake, the
//! production agent factory, the real SQLite store, the loopback provider.

use std::sync::Arc;
use std::time::Duration;

use hermes_core::Message;
use hermes_tests::Reply;
use serde_json::{Value, json};

use super::{dm, sent, settle, until};
use crate::telegram_gateway::{Setup, USER, gateway};

/// Accepted messages not yet in a transcript (the durable inbox's rows).
fn inbox_rows(gw: &crate::telegram_gateway::Gateway) -> usize {
    let store = hermes_runtime::store::Store::open(&gw.settings.state_db()).unwrap();
    store
        .kv_scan(hermes_gateway::inbox::INBOX_KV_PREFIX)
        .unwrap()
        .len()
}

/// The messages of a chat request, as (role, content) pairs.
fn roles(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn steer_setup(config_toml: &str) -> Setup {
    Setup {
        config_toml: config_toml.to_owned(),
        responder: Arc::new(|request| {
            let messages = request["messages"].as_array().unwrap();
            let last = messages.last().unwrap();
            let asked_tools = messages.iter().any(|m| m["role"] == "tool");
            match (last["role"].as_str(), asked_tools) {
                // The first call: slow, then a tool call (the user writes
                // meanwhile).
                (Some("user"), false) if last["content"] == "check the plan" => {
                    std::thread::sleep(Duration::from_millis(1500));
                    Reply::tool(
                        "call_1",
                        "todo",
                        r#"{"todos":[{"id":"1","content":"check the plan","status":"in_progress"}]}"#,
                    )
                }
                (Some("user"), _) => Reply::text(format!(
                    "noted: {}",
                    last["content"].as_str().unwrap_or_default()
                )),
                _ => Reply::text("the plan is checked"),
            }
        }),
        ..Setup::default()
    }
}

async fn steer_reaches_the_next_call(config_toml: &str, second: &str, steered: &str) {
    let gw = gateway(steer_setup(config_toml)).await;
    dm(&gw, 1, USER, "check the plan");
    until("the first model call", || gw.provider.requests().len() == 1).await;
    dm(&gw, 2, USER, second);
    let replies = sent(&gw, 2).await;
    assert!(
        replies[0].contains("Passed to the current reply"),
        "{replies:?}"
    );
    assert_eq!(replies[1], format!("noted: {steered}"), "{replies:?}");
    settle().await;
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 2, "the steered text is not answered twice");
    // The second call sees the tool's result, then the steered message.
    let seen = roles(&requests[1]);
    let tail: Vec<&str> = seen.iter().rev().take(3).map(|(r, _)| r.as_str()).collect();
    assert_eq!(tail, ["user", "tool", "assistant"], "{seen:?}");
    assert_eq!(seen.last().unwrap().1, steered);
    // Stored in that order, and nothing left in the inbox.
    let stored: Vec<Message> = gw.transcript().into_iter().map(|e| e.message).collect();
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert!(matches!(&stored[1], Message::Assistant { tool_calls, .. } if tool_calls.len() == 1));
    assert!(matches!(&stored[2], Message::Tool { .. }));
    assert_eq!(stored[3], Message::user(steered));
    assert_eq!(
        inbox_rows(&gw),
        0,
        "the steered message left the inbox as it was stored"
    );
    assert_eq!(sent(&gw, 2).await.len(), 2);
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_steer_mode_a_message_sent_during_a_tool_reaches_the_next_model_call() {
    steer_reaches_the_next_call(
        "[gateway]\nbusy_mode = \"steer\"\n",
        "and mind the budget",
        "and mind the budget",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_steer_steers_in_interrupt_mode_too() {
    steer_reaches_the_next_call("", "/steer mind the budget", "mind the budget").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_text_too_late_for_the_turn_is_answered_after_it() {
    let gw = gateway(Setup {
        config_toml: "[gateway]\nbusy_mode = \"steer\"\n".into(),
        responder: Arc::new(|request| {
            let last = request["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            if last["content"] == "a slow question" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            Reply::text(format!(
                "done: {}",
                last["content"].as_str().unwrap_or_default()
            ))
        }),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, USER, "a slow question");
    until("the first model call", || gw.provider.requests().len() == 1).await;
    // Arrives during the turn's only (and last) call: not taken by it.
    dm(&gw, 2, USER, "one more thing");
    let replies = sent(&gw, 3).await;
    assert!(
        replies[0].contains("Passed to the current reply"),
        "{replies:?}"
    );
    assert_eq!(replies[1], "done: a slow question");
    assert_eq!(replies[2], "done: one more thing");
    let stored: Vec<Message> = gw.transcript().into_iter().map(|e| e.message).collect();
    assert_eq!(stored.len(), 4, "{stored:?}");
    assert_eq!(stored[2], Message::user("one more thing"));
    assert_eq!(inbox_rows(&gw), 0);
    assert_eq!(gw.provider.requests().len(), 2);
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_sets_the_effort_and_shows_the_reasoning() {
    let gw = gateway(Setup {
        responder: Arc::new(|_| {
            Reply::text("42").with(json!({"reasoning_content": "six times seven"}))
        }),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, USER, "what is six times seven?");
    assert_eq!(sent(&gw, 1).await[0], "42");
    assert!(gw.provider.requests()[0].get("reasoning_effort").is_none());
    dm(&gw, 2, USER, "/reasoning high");
    assert!(sent(&gw, 2).await[1].contains("set to high"));
    dm(&gw, 3, USER, "/reasoning show");
    assert!(sent(&gw, 3).await[2].contains("shown"));
    dm(&gw, 4, USER, "/reasoning lots");
    assert!(sent(&gw, 4).await[3].contains("Unknown reasoning setting"));
    dm(&gw, 5, USER, "and again?");
    let shown = sent(&gw, 5).await[4].clone();
    assert_eq!(shown, "💭 Reasoning:\nsix times seven\n\n42");
    assert_eq!(gw.provider.requests()[1]["reasoning_effort"], "high");
    dm(&gw, 6, USER, "/reasoning");
    let status = sent(&gw, 6).await[5].clone();
    assert!(
        status.contains("effort: high") && status.contains("shown: yes"),
        "{status}"
    );
    dm(&gw, 7, USER, "/reasoning off");
    sent(&gw, 7).await;
    dm(&gw, 8, USER, "/reasoning default");
    sent(&gw, 8).await;
    dm(&gw, 9, USER, "once more");
    assert_eq!(sent(&gw, 9).await[8], "42");
    assert!(gw.provider.requests()[2].get("reasoning_effort").is_none());
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn personality_overlays_the_system_prompt_from_the_home_folder() {
    let gw = gateway(Setup::default()).await;
    let dir = gw.home.path().join("personalities");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pirate.md"), "Talk like a pirate.").unwrap();
    let system = |n: usize| {
        gw.provider.requests()[n]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    dm(&gw, 1, USER, "hello");
    sent(&gw, 1).await;
    let plain = system(0);
    dm(&gw, 2, USER, "/personality");
    let listed = sent(&gw, 2).await[1].clone();
    assert!(
        listed.contains("pirate") && listed.contains("concise"),
        "{listed}"
    );
    dm(&gw, 3, USER, "/personality pirat");
    assert!(sent(&gw, 3).await[2].contains("Did you mean pirate?"));
    dm(&gw, 4, USER, "/personality pirate");
    assert!(sent(&gw, 4).await[3].contains("set to pirate"));
    dm(&gw, 5, USER, "hello again");
    sent(&gw, 5).await;
    assert_eq!(
        system(1),
        format!("{plain}\n\n# Personality\nTalk like a pirate.")
    );
    // It survives /new; `none` removes it.
    dm(&gw, 6, USER, "/new");
    sent(&gw, 6).await;
    dm(&gw, 7, USER, "fresh start");
    sent(&gw, 7).await;
    assert!(system(2).ends_with("Talk like a pirate."));
    dm(&gw, 8, USER, "/personality none");
    sent(&gw, 8).await;
    dm(&gw, 9, USER, "plain again");
    sent(&gw, 9).await;
    // The session after /new states its own start (to the minute) in its
    // prompt, so it is compared with its own prompt of before `none`, not
    // with the first session's.
    let after_none = system(3);
    assert_eq!(
        system(2),
        format!("{after_none}\n\n# Personality\nTalk like a pirate.")
    );
    assert!(!after_none.contains("# Personality"), "{after_none}");
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_switches_back_to_an_earlier_conversation_of_this_chat_only() {
    let gw = gateway(Setup {
        config_toml: "[gateway]\nallow_all_users = true\n".into(),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, USER, "about the garden");
    sent(&gw, 1).await;
    dm(&gw, 2, USER, "/title Garden");
    sent(&gw, 2).await;
    let garden = gw.store_session_id();
    dm(&gw, 3, USER, "/new");
    sent(&gw, 3).await;
    dm(&gw, 4, USER, "about the car");
    sent(&gw, 4).await;
    dm(&gw, 5, USER, "/resume");
    let listed = sent(&gw, 5).await[4].clone();
    assert!(
        listed.contains(&garden) && listed.contains("Garden"),
        "{listed}"
    );
    // Another user cannot resume it, by id or title: not even told it exists.
    const OTHER: i64 = 8;
    dm(&gw, 6, OTHER, &format!("/resume {garden}"));
    let refused = sent(&gw, 6).await[5].clone();
    assert!(refused.starts_with("No conversation"), "{refused}");
    dm(&gw, 7, OTHER, "/resume Garden");
    assert!(sent(&gw, 7).await[6].starts_with("No conversation"));
    // Its owner can, by title.
    dm(&gw, 8, USER, "/resume garden");
    let resumed = sent(&gw, 8).await[7].clone();
    assert!(
        resumed.starts_with(&format!("Resumed {garden}")),
        "{resumed}"
    );
    dm(&gw, 9, USER, "and the roses?");
    sent(&gw, 9).await;
    let requests = gw.provider.requests();
    let history = requests.last().unwrap()["messages"].to_string();
    assert!(history.contains("about the garden"), "{history}");
    assert!(!history.contains("about the car"), "{history}");
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_drops_steered_text_which_the_next_turn_still_records() {
    let gw = gateway(steer_setup("[gateway]\nbusy_mode = \"steer\"\n")).await;
    dm(&gw, 1, USER, "check the plan");
    until("the first model call", || gw.provider.requests().len() == 1).await;
    dm(&gw, 2, USER, "and mind the budget");
    dm(&gw, 3, USER, "/stop");
    let replies = sent(&gw, 2).await;
    assert!(
        replies.iter().any(|r| r.contains("Stopping")),
        "{replies:?}"
    );
    settle().await;
    // Stopped at its next check point: no call carried the dropped text.
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    dm(&gw, 4, USER, "a new question");
    until("the next turn's call", || gw.provider.requests().len() == 2).await;
    let seen = roles(&gw.provider.requests()[1]);
    let users: Vec<&str> = seen
        .iter()
        .filter(|(r, _)| r == "user")
        .map(|(_, c)| c.as_str())
        .collect();
    // Accepted, so kept: transcribed ahead of the new message, not answered
    // on its own.
    assert_eq!(
        users,
        ["check the plan", "and mind the budget", "a new question"],
        "{seen:?}"
    );
    settle().await;
    assert_eq!(gw.provider.requests().len(), 2);
    assert_eq!(inbox_rows(&gw), 0);
    gw.assert_clean();
}
