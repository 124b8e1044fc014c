//! Progress while a turn runs, through the whole gateway on Telegram (SPEC
//! X6): the typing indicator refreshed, replies shown as they are written
//! (`sendMessage`, then `editMessageText` of that message, `deleteMessage`
//! when it outgrows one message), one replaced status line for tools —
//! against the Bot API fake, with the loopback `FakeProvider` streaming
//! slowly. Every recorded chat request is checked against the published
//! OpenAI request schema.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_gateway;
use crate::telegram_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_telegram::format::markdown_to_html;
use hermes_tests::Reply;
use serde_json::json;
use telegram_gateway::{Setup, USER, WAIT, gateway};
use telegram_support::Fake;

/// The texts of the bot's previews and edits, in order.
fn shown_in_order(fake: &Fake) -> Vec<(String, Instant, bool)> {
    let mut all: Vec<(String, Instant, bool)> = fake
        .requests("sendMessage")
        .into_iter()
        .chain(fake.requests("editMessageText"))
        .map(|r| {
            (
                r.body["text"].as_str().unwrap_or("").to_owned(),
                r.at,
                r.body.get("parse_mode").is_some(),
            )
        })
        .collect();
    all.sort_by_key(|(_, at, _)| *at);
    all
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_edits_one_message_in_order_and_ends_whole_and_formatted() {
    let pieces: Vec<String> = [
        "**Counting**:",
        " one",
        ", two",
        ", three",
        ", four",
        ", five",
        ", six",
        ", seven.",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let final_text = pieces.concat();
    let slow = pieces.clone();
    let gw = gateway(Setup {
        stream: true,
        responder: Arc::new(move |_| Reply::SlowText {
            pieces: slow.clone(),
            delay: Duration::from_millis(700),
        }),
        ..Setup::default()
    })
    .await;
    gw.send(101, json!({"text": "count to seven"}));
    let html = markdown_to_html(&final_text);
    wait_for("the final edit", || {
        gw.fake
            .requests("editMessageText")
            .iter()
            .any(|r| r.body["text"] == html.as_str())
    })
    .await;
    let sent = gw.fake.requests("sendMessage");
    assert_eq!(sent.len(), 1, "one message: {sent:?}");
    assert_eq!(sent[0].body["reply_parameters"]["message_id"], 101);
    let id = 1001; // the fake's first message id
    assert!(
        gw.fake
            .requests("editMessageText")
            .iter()
            .all(|r| r.body["message_id"] == id)
    );
    let shown = shown_in_order(&gw.fake);
    assert!(shown.len() >= 3, "a preview and edits: {shown:?}");
    // Previews grow in order: each is the start of the next and of the reply.
    let previews: Vec<&str> = shown[..shown.len() - 1]
        .iter()
        .map(|(t, _, _)| t.as_str())
        .collect();
    for w in previews.windows(2) {
        assert!(w[1].starts_with(w[0]), "out of order: {w:?}");
    }
    for p in &previews {
        assert!(
            final_text.starts_with(p),
            "{p:?} is not a start of the reply"
        );
    }
    // No faster than the adapter's interval (Telegram's per-chat limit).
    for w in shown.windows(2) {
        assert!(
            w[1].1.duration_since(w[0].1) >= Duration::from_millis(1400) || w[1].2,
            "edits too close: {shown:?}"
        );
    }
    let (last, _, formatted) = shown.last().unwrap();
    assert!(*formatted, "the final edit is formatted");
    assert_eq!(*last, html);
    // The fake logs a request when it arrives and applies it just after:
    // on a loaded machine the test can look in between (a cold CI did).
    wait_for("the final edit to take effect", || {
        gw.fake.shown(id).as_ref() == Some(&html)
    })
    .await;
    // Typing was refreshed during the ~6 s turn.
    assert!(
        gw.fake.requests("sendChatAction").len() >= 2,
        "{:?}",
        gw.fake.requests("sendChatAction")
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_activity_is_one_status_line_replaced_not_appended() {
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let gw = gateway(Setup {
        stream: true,
        toolsets: "terminal",
        responder: Arc::new(move |_| {
            match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => Reply::tool("call_1", "terminal", r#"{"command": "sleep 2"}"#),
                1 => Reply::tool("call_2", "terminal", r#"{"command": "sleep 2"}"#),
                _ => Reply::SlowText {
                    pieces: vec!["Slept".into(), " twice.".into()],
                    delay: Duration::from_millis(1600),
                },
            }
        }),
        ..Setup::default()
    })
    .await;
    gw.send(111, json!({"text": "sleep a bit"}));
    wait_for("the final edit", || {
        gw.fake
            .requests("editMessageText")
            .iter()
            .any(|r| r.body["text"] == "Slept twice.")
    })
    .await;
    let shown = shown_in_order(&gw.fake);
    assert!(
        shown
            .iter()
            .any(|(t, _, _)| t.contains("⚙️ working: terminal…")),
        "the tool showed as a status line: {shown:?}"
    );
    for (t, _, _) in &shown {
        assert!(
            t.matches("⚙️").count() <= 1,
            "one status line at a time: {t:?}"
        );
    }
    assert_eq!(shown.last().unwrap().0, "Slept twice.", "{shown:?}");
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_too_long_for_one_message_is_sent_split_as_before() {
    let pieces: Vec<String> = (0..6)
        .map(|i| format!("Paragraph {i}: {}\n\n", "lorem ipsum dolor ".repeat(60)))
        .collect();
    let whole = pieces.concat();
    assert!(whole.encode_utf16().count() > 4096);
    let slow = pieces.clone();
    let gw = gateway(Setup {
        stream: true,
        responder: Arc::new(move |_| Reply::SlowText {
            pieces: slow.clone(),
            delay: Duration::from_millis(600),
        }),
        ..Setup::default()
    })
    .await;
    gw.send(121, json!({"text": "write a lot"}));
    wait_for("the preview deleted and the reply sent", || {
        !gw.fake.requests("deleteMessage").is_empty() && gw.fake.requests("sendMessage").len() >= 3
    })
    .await;
    let deleted = gw.fake.requests("deleteMessage");
    assert_eq!(deleted[0].body["message_id"], 1001, "the preview goes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = gw.fake.requests("sendMessage");
    let after: Vec<&str> = sent
        .iter()
        .filter(|r| r.at > deleted[0].at)
        .map(|r| r.body["text"].as_str().unwrap())
        .collect();
    assert!(after.len() >= 2, "{after:?}");
    let joined: String = after.concat();
    let plain: String = whole.split_whitespace().collect();
    let got: String = joined.split_whitespace().collect();
    assert_eq!(got, plain, "the split messages hold the whole reply");
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_streaming_off_the_reply_is_sent_once_whole() {
    let gw = gateway(Setup {
        stream: false,
        responder: Arc::new(|_| Reply::SlowText {
            pieces: vec!["slow".into(), " answer".into()],
            delay: Duration::from_millis(1600),
        }),
        ..Setup::default()
    })
    .await;
    gw.send(131, json!({"text": "hi"}));
    assert_eq!(gw.replies(1).await[0], "slow answer");
    assert!(gw.fake.requests("editMessageText").is_empty());
    gw.assert_clean();
    gw.runner.shutdown().await;
}

/// A long turn keeps the typing indicator up: `sendChatAction` is sent
/// again about every 4 s (Telegram shows it for ~5 s), not once, and not in
/// a burst; it stops with the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_is_refreshed_every_four_seconds_during_a_long_turn() {
    let gw = gateway(Setup {
        responder: Arc::new(|_| Reply::SlowText {
            pieces: vec!["a".into(), " slow".into(), " answer".into()],
            delay: Duration::from_millis(3500),
        }),
        ..Setup::default()
    })
    .await;
    gw.send(141, json!({"text": "think hard"}));
    assert_eq!(gw.replies(1).await[0], "a slow answer");
    let replied = gw.fake.requests("sendMessage")[0].at;
    let typing = gw.fake.requests("sendChatAction");
    assert!(typing.len() >= 3, "a ~10 s turn: {typing:?}");
    for t in &typing {
        assert_eq!(t.body["action"], "typing");
        assert_eq!(t.body["chat_id"], USER);
        assert!(t.at < replied, "typing after the reply: {typing:?}");
    }
    for w in typing.windows(2) {
        assert!(
            w[1].at.duration_since(w[0].at) >= Duration::from_millis(3500),
            "refreshed too often: {typing:?}"
        );
    }
    // Nothing more once the reply is out.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(gw.fake.requests("sendChatAction").len(), typing.len());
    gw.assert_clean();
    gw.runner.shutdown().await;
}
