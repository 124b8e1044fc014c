//! Spending caps through the whole gateway on Telegram (issue 44): the Bot
//! API fake, the production agent factory over the real store, the loopback
//! provider (which counts the requests it receives). Each answer reports
//! 600 prompt + 100 completion tokens; the day's cap is 1,000 tokens.
//! - a user over the cap gets one line saying when it resets, and no model
//!   call is made for them; another user is served;
//! - a turn that crosses the cap mid-way finishes the call under way (its
//!   tool runs) and makes no further call;
//! - `/usage` shows a user their own accounts.

use std::sync::Arc;

use hermes_runtime::spending::account_key;
use hermes_runtime::store::Store;
use hermes_tests::{Reply, Responder};
use serde_json::{Value, json};

use crate::telegram_gateway::{Setup, gateway};

const ALICE: i64 = 21;
const BOB: i64 = 22;

/// 700 tokens an answer; `tool:` asks for the todo tool first.
fn costly() -> Responder {
    let usage = json!({"prompt_tokens": 600, "completion_tokens": 100, "total_tokens": 700});
    Arc::new(move |request: &Value| {
        let last = request["messages"].as_array().unwrap().last().unwrap();
        let text = last["content"].as_str().unwrap_or("");
        let reply = if last["role"] == "user" && text.starts_with("tool:") {
            Reply::tool(
                "t1",
                "todo",
                r#"{"todos":[{"id":"1","content":"x","status":"pending"}]}"#,
            )
        } else {
            Reply::text("Here you are.")
        };
        reply.with_usage(usage.clone())
    })
}

fn requests_for(requests: &[Value], user: i64) -> usize {
    requests
        .iter()
        .filter(|r| {
            r["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains(&format!("(user id {user};"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_the_days_cap_is_refused_without_a_model_call_and_another_is_served() {
    let gw = gateway(Setup {
        config_toml: "[limits]\nuser_day_tokens = 1000\ntimezone = \"UTC\"\n".to_owned(),
        more_users: vec![ALICE, BOB],
        responder: costly(),
        ..Setup::default()
    })
    .await;
    // 700 tokens: under the cap. 1,400: over it (the call that crossed it
    // was answered in full).
    gw.send_as(ALICE, ALICE, 1, "hi");
    gw.replies(1).await;
    gw.send_as(ALICE, ALICE, 2, "more");
    gw.replies(2).await;
    assert_eq!(requests_for(&gw.provider.requests(), ALICE), 2);
    gw.send_as(ALICE, ALICE, 3, "and more");
    let replies = gw.replies(3).await;
    assert!(
        replies[2].starts_with("Sorry — your daily usage limit (1000 tokens) has been reached")
            && replies[2].contains("at 00:00 (UTC)"),
        "{}",
        replies[2]
    );
    assert_eq!(
        requests_for(&gw.provider.requests(), ALICE),
        2,
        "no model call for a refused turn"
    );
    // Bob is served.
    gw.send_as(BOB, BOB, 4, "hello");
    let replies = gw.replies(4).await;
    assert_eq!(replies[3], "Here you are.");
    // Bob's turn crosses the cap mid-way: 700 + 700 (tool call) = 1,400.
    // The call under way finishes, its tool runs, no further call is made.
    gw.send_as(BOB, BOB, 5, "tool: plan it");
    let replies = gw.replies(5).await;
    assert!(
        replies[4].contains("your daily usage limit"),
        "{}",
        replies[4]
    );
    assert_eq!(requests_for(&gw.provider.requests(), BOB), 2);
    // `/usage`: one's own accounts only.
    gw.send_as(ALICE, ALICE, 6, "/usage");
    let replies = gw.replies(6).await;
    assert!(
        replies[5].starts_with("Your usage:\nToday: 1400 tokens of 1000"),
        "{}",
        replies[5]
    );
    gw.runner.shutdown().await;
    gw.assert_clean();

    // The accounts, as stored with the messages.
    let store = Store::open(&gw.settings.state_db()).unwrap();
    let day = gw
        .settings
        .spending_limits()
        .unwrap()
        .periods(now_ms())
        .day_key();
    let tokens = |who: &str| store.kv_get(&account_key("tok", &day, who)).unwrap();
    assert_eq!(
        tokens(&format!("telegram:{ALICE}")).as_deref(),
        Some("1400")
    );
    assert_eq!(tokens(&format!("telegram:{BOB}")).as_deref(), Some("1400"));
    assert_eq!(tokens("bot").as_deref(), Some("2800"));
    // The refused turn left no user message behind.
    let alice: Vec<_> = store
        .list_sessions(10)
        .unwrap()
        .into_iter()
        .filter(|s| s.user_id.as_deref() == Some(&ALICE.to_string()))
        .collect();
    let transcript = store.load_transcript(&alice[0].id).unwrap();
    assert_eq!(transcript.len(), 4, "{transcript:#?}");
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}
