//! What a chat user meets when things go wrong (issue 31), through the
//! whole gateway on Telegram: the adapter against the Bot API fake, the
//! production agent factory over the real store, the loopback provider.
//! - a provider error reaches the chat as a sentence; its detail (the
//!   provider's address, settings to change) only the log;
//! - a turn the provider never answered is taken back out of the session;
//! - after `/approve`, the answer is a new message (Telegram notifies it),
//!   not an edit of the preview above the question;
//! - a voice note that cannot be transcribed does not interrupt the running
//!   answer.
// Its own test binary, not a module of `all.rs`: it installs the process's
// global tracing subscriber and asserts on what it captured, and other
// modules (cluster, matrix, email, failover, conformance) install their own,
// so in one process the first wins and this log stays empty.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod openai_schema;
mod per_user_memory;
mod spending_caps;
mod telegram_gateway;
mod telegram_support;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hermes_core::Message;
use hermes_gateway::media::NO_TRANSCRIPTION_NOTICE;
use hermes_telegram::format::markdown_to_html;
use hermes_tests::Reply;
use serde_json::{Value, json};
use telegram_gateway::{OGG, Setup, WAIT, gateway};

/// Everything this test binary logs (the tests run in one process).
fn log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let _ = tracing_subscriber::fmt()
            .with_env_filter("hermes_gateway=info,hermes_runner=info")
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .try_init();
        buf
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged() -> String {
    String::from_utf8_lossy(&log().lock().unwrap()).into_owned()
}

/// Issue 31, items 4 and 5: the provider refuses the first call. The chat
/// gets a sentence without the provider's address or any setting; the log
/// has the detail; the unanswered message is not left in the session, so
/// the next turn does not start with two user messages in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_is_a_sentence_in_the_chat_and_the_turn_is_taken_back() {
    log();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let gw = gateway(Setup {
        responder: Arc::new(move |_| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                Reply::Status(
                    404,
                    "The model `gpt-4o` does not exist or you do not have access to it.".into(),
                )
            } else {
                Reply::text("Here now.")
            }
        }),
        ..Setup::default()
    })
    .await;
    gw.send(1, json!({"text": "first question"}));
    let said = gw.replies(1).await.remove(0);
    assert!(said.starts_with("Sorry"), "{said}");
    let base = gw.provider.base_url();
    let host = base
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    for operator_detail in [
        host, "base-url", "base_url", "HERMES_", "timeout", "404", "config",
    ] {
        assert!(
            !said.contains(operator_detail),
            "{operator_detail} told to the chat: {said}"
        );
    }
    let log = logged();
    assert!(
        log.lines()
            .any(|l| l.contains("turn failed") && l.contains(host)),
        "the operator's log has the detail: {log}"
    );
    assert!(
        gw.transcript().is_empty(),
        "the unanswered turn stays in the session: {:?}",
        gw.transcript()
    );

    gw.send(2, json!({"text": "second question"}));
    let replies = gw.replies(2).await;
    assert_eq!(replies[1], "Here now.");
    let requests = gw.provider.requests();
    let users: Vec<&Value> = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0]["content"], "second question");
    let roles: Vec<bool> = gw
        .transcript()
        .iter()
        .map(|e| matches!(e.message, Message::User { .. }))
        .collect();
    assert_eq!(roles, [true, false], "one exchange is stored");
    gw.assert_clean();
    gw.runner.shutdown().await;
}

/// Issue 31, item 7: a streamed turn asks for approval; after `/approve`
/// the answer arrives as a new message below the question — an edit of the
/// preview above it would not notify the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_approve_the_answer_is_a_new_message() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let gw = gateway(Setup {
        stream: true,
        toolsets: "terminal",
        config_toml: "[agent]\napproval_timeout = 60\nsandbox = \"off\"\n".into(),
        responder: Arc::new(move |_| match counted.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::tool(
                "c1",
                "terminal",
                r#"{"command":"rm -rf build && echo removed"}"#,
            ),
            _ => Reply::text("Deleted build."),
        }),
        ..Setup::default()
    })
    .await;
    std::fs::create_dir_all(gw.work.path().join("build")).unwrap();
    gw.send(1, json!({"text": "clean up please"}));
    // The question, and the preview ("working: terminal…") above it.
    let deadline = Instant::now() + WAIT;
    let question_id = loop {
        let sent = gw.fake.requests("sendMessage");
        if let Some(i) = sent.iter().position(|r| {
            r.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("Approval needed"))
        }) {
            break i;
        }
        assert!(Instant::now() < deadline, "no question: {sent:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Long enough for a preview to have been shown (Telegram: every 1.5 s).
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    gw.send(2, json!({"text": "/approve"}));
    let deadline = Instant::now() + WAIT;
    loop {
        let sent = gw.fake.requests("sendMessage");
        let answer = sent
            .iter()
            .skip(question_id + 1)
            .any(|r| r.body["text"].as_str() == Some(markdown_to_html("Deleted build.").as_str()));
        if answer {
            break;
        }
        let edited: Vec<String> = gw
            .fake
            .requests("editMessageText")
            .iter()
            .map(|r| r.body["text"].as_str().unwrap_or("").to_owned())
            .collect();
        assert!(
            !edited.iter().any(|t| t.contains("Deleted build.")),
            "the answer was edited into an older message: {edited:?}"
        );
        assert!(
            Instant::now() < deadline,
            "no answer after the question: {sent:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !gw.work.path().join("build").exists(),
        "approved, so it ran"
    );
    gw.runner.shutdown().await;
}

/// Issue 31, item 8: a voice note arrives while an answer is being written,
/// and no transcription is configured: the answer is not interrupted; the
/// voice note then gets its one-line notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_that_cannot_be_transcribed_interrupts_nothing() {
    let gw = gateway(Setup {
        responder: Arc::new(|_| Reply::SlowText {
            pieces: vec!["one, ".into(), "two, ".into(), "three.".into()],
            delay: Duration::from_millis(500),
        }),
        ..Setup::default()
    })
    .await;
    gw.fake.add_file("vo1", "voice/file_1.oga", OGG.to_vec());
    gw.send(1, json!({"text": "count to three"}));
    let deadline = Instant::now() + WAIT;
    while gw.provider.requests().is_empty() {
        assert!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gw.send(
        2,
        json!({"voice": {"file_id": "vo1", "file_unique_id": "v", "duration": 2,
                          "mime_type": "audio/ogg", "file_size": OGG.len()}}),
    );
    let replies = gw.replies(2).await;
    assert_eq!(replies[0], "one, two, three.", "{replies:?}");
    assert_eq!(replies[1], markdown_to_html(NO_TRANSCRIPTION_NOTICE));
    assert_eq!(
        gw.provider.requests().len(),
        1,
        "the voice note calls no model"
    );
    gw.runner.shutdown().await;
}
