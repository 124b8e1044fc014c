//! The chat commands of SPEC Y5 through the running gateway: `/title`,
//! `/sessions`, `/retry`, `/queue`, `/help` and the suggestion for an
//! unknown command.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hermes_gateway::command::NAMES;
use hermes_tests::Reply;
use serde_json::Value;

use super::{dm, sent};
use crate::telegram_gateway::{Setup, USER, gateway};

/// The last user message of a chat request.
fn last_user(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn title_sessions_help_and_suggestions() {
    let gw = gateway(Setup::default()).await;
    dm(&gw, 1, USER, "/title");
    assert!(sent(&gw, 1).await[0].contains("No conversation yet"));
    dm(&gw, 2, USER, "plan my trip");
    sent(&gw, 2).await;
    dm(&gw, 3, USER, "/title Trip to Lisbon");
    assert_eq!(sent(&gw, 3).await[2], "Title set: Trip to Lisbon");
    dm(&gw, 4, USER, "/title");
    assert_eq!(sent(&gw, 4).await[3], "Title: Trip to Lisbon");
    dm(&gw, 5, USER, "/sessions");
    let listed = sent(&gw, 5).await[4].clone();
    assert!(
        listed.contains("Trip to Lisbon · 2 messages (current)"),
        "{listed}"
    );
    assert!(listed.contains(&gw.store_session_id()), "{listed}");
    dm(&gw, 6, USER, "/stauts");
    assert!(sent(&gw, 6).await[5].contains("Did you mean /status?"));
    dm(&gw, 7, USER, "/help");
    let help = sent(&gw, 7).await[6].clone();
    for name in NAMES {
        assert!(help.contains(&format!("/{name}")), "/{name} not in {help}");
    }
    assert_eq!(
        gw.provider.requests().len(),
        1,
        "commands never reach the model"
    );
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_asks_again_without_the_old_answer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let gw = gateway(Setup {
        responder: Arc::new(move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Reply::text(format!("answer number {n}"))
        }),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, USER, "what is two plus two?");
    assert_eq!(sent(&gw, 1).await[0], "answer number 1");
    dm(&gw, 2, USER, "/retry");
    assert_eq!(sent(&gw, 2).await[1], "answer number 2");
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(last_user(&requests[1]), "what is two plus two?");
    let history = requests[1]["messages"].to_string();
    assert!(!history.contains("answer number 1"), "{history}");
    assert_eq!(history.matches("two plus two").count(), 1, "{history}");
    // The stored conversation is one exchange, not two.
    assert_eq!(gw.transcript().len(), 2);
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_waits_for_the_running_turn_instead_of_interrupting_it() {
    let gw = gateway(Setup {
        responder: Arc::new(|request| {
            let asked = last_user(request);
            if asked.contains("slow") {
                std::thread::sleep(Duration::from_millis(1500));
            }
            Reply::text(format!("done: {asked}"))
        }),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, USER, "a slow question");
    super::until("the slow turn to start", || {
        gw.provider.requests().len() == 1
    })
    .await;
    dm(&gw, 2, USER, "/queue and a follow-up");
    // The queued notice, then both answers, in order.
    let replies = sent(&gw, 3).await;
    assert!(replies[0].contains("queued"), "{replies:?}");
    let answers: Vec<&String> = replies.iter().filter(|r| r.starts_with("done:")).collect();
    assert_eq!(
        answers,
        ["done: a slow question", "done: and a follow-up"],
        "{replies:?}"
    );
    assert!(
        !replies.iter().any(|r| r.contains("Interrupting")),
        "{replies:?}"
    );
    gw.assert_clean();
}
