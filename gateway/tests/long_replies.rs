//! A reply longer than `max_reply_messages` platform messages is not sent as
//! hundreds of messages: its beginning takes at most N - 1 messages and the
//! rest goes as a file, or — where the platform takes no files — the reply
//! is cut with a visible notice. Through the runner, the in-process test
//! adapter (which splits like a platform) and a real SQLite store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::Message;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::overflow::{REPLY_FILE_NAME, cut_notice, file_note, with_note};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{
    ManualClock, Pace, ScriptedModel, Sent, TestAdapter, TestAgentFactory,
};
use hermes_runtime::store::Store;

const WAIT: Duration = Duration::from_secs(30);

struct Setup {
    rt: tokio::runtime::Runtime,
    adapter: Arc<TestAdapter>,
    store: Arc<Mutex<Store>>,
    runner: GatewayRunner,
    _dir: tempfile::TempDir,
}

fn setup(files: bool, max_reply_messages: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(Mutex::new(
        Store::open(&dir.path().join("state.db"))
            .unwrap()
            .with_clock(clock.clone()),
    ));
    let adapter = TestAdapter::new("test");
    adapter.set_max_message_len(200);
    adapter.set_files(files);
    let mut config = GatewayConfig::default();
    config.allow.allow_all = true;
    config.max_reply_messages = max_reply_messages;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(ScriptedModel::new(Pace::Instant)),
        store: store.clone(),
        clock,
        config,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(runner.start()).unwrap();
    Setup {
        rt,
        adapter,
        store,
        runner,
        _dir: dir,
    }
}

/// The user's text, chosen so that the scripted reply (`reply to: …`) takes
/// about 250 messages of 200 characters.
fn long_text() -> String {
    (0..1000)
        .map(|i| format!("Line {i:04} of a very long answer.\n"))
        .collect()
}

fn the_reply(s: &Setup) -> String {
    let store = s.store.lock().unwrap();
    let session = store
        .active_session_for_key("agent:main:test:dm:chat")
        .unwrap()
        .unwrap();
    let transcript = store.load_transcript(&session.id).unwrap();
    match &transcript.last().unwrap().message {
        Message::Assistant {
            content: Some(c), ..
        } => c.clone(),
        other => panic!("expected the reply, got {other:?}"),
    }
}

fn wait_for(s: &Setup, done: impl FnMut(&[Sent]) -> bool) -> Vec<Sent> {
    s.adapter
        .wait_until(WAIT, done)
        .unwrap_or_else(|sent| panic!("timed out; sent {} messages", sent.len()))
}

/// Everything sent once the session's worker is done (nothing more can come).
fn idle_then_sent(s: &Setup) -> Vec<Sent> {
    let deadline = std::time::Instant::now() + WAIT;
    while s.runner.busy_sessions() > 0 {
        assert!(std::time::Instant::now() < deadline, "the turn never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.adapter.sent()
}

#[test]
fn a_reply_longer_than_ten_messages_sends_the_rest_as_a_file() {
    let s = setup(true, 10);
    s.adapter.say(ChatType::Dm, "chat", "u", &long_text());
    wait_for(&s, |sent| sent.iter().any(|m| m.file.is_some()));
    let sent = idle_then_sent(&s);
    assert_eq!(sent.len(), 10, "9 messages and 1 file, not 250 messages");
    let (messages, file) = sent.split_at(9);
    assert!(messages.iter().all(|m| m.file.is_none()));
    assert!(messages.iter().all(|m| m.text.chars().count() <= 200));
    let file = file[0].file.as_ref().unwrap();
    assert_eq!(file.file_name, REPLY_FILE_NAME);

    // Nothing is lost: the messages hold the reply's beginning and a note,
    // the file holds the rest.
    let shown: String = messages.iter().map(|m| m.text.as_str()).collect();
    let rest = String::from_utf8(file.content.clone()).unwrap();
    let reply = the_reply(&s);
    assert!(
        reply.ends_with(rest.as_str()),
        "the file is the reply's end"
    );
    let head = &reply[..reply.len() - rest.len()];
    assert!(
        !head.is_empty() && shown.starts_with(head),
        "the messages are its beginning"
    );
    assert_eq!(shown[head.len()..].trim_start(), file_note(10));
    // Replies go to the user's message; the first piece says so.
    assert!(messages[0].reply_to.is_some());
    drop(s.rt);
}

#[test]
fn a_reply_too_long_where_files_are_not_supported_is_cut_with_a_notice() {
    let s = setup(false, 10);
    s.adapter.say(ChatType::Dm, "chat", "u", &long_text());
    let sent = wait_for(&s, |sent| {
        sent.iter().any(|m| m.text.contains("were not sent"))
    });
    assert_eq!(idle_then_sent(&s).len(), sent.len());
    assert_eq!(sent.len(), 10, "at most 10 messages");
    let shown: String = sent.iter().map(|m| m.text.as_str()).collect();
    let reply = the_reply(&s);
    // The messages are the reply's beginning, then the notice, which names
    // the size of what was left out exactly.
    let at = shown.rfind("✂️").expect("the notice ends the last message");
    let head = shown[..at].trim_end_matches('\n');
    let head = if reply.starts_with(&format!("{head}\n")) {
        format!("{head}\n")
    } else {
        head.to_owned()
    };
    assert!(reply.starts_with(&head), "the messages are its beginning");
    let left_out = reply.chars().count() - head.chars().count();
    assert!(left_out > 0);
    assert_eq!(&shown[at..], cut_notice(10, left_out));
    drop(s.rt);
}

#[test]
fn the_limit_is_configurable_and_short_replies_are_untouched() {
    let s = setup(true, 3);
    s.adapter.say(ChatType::Dm, "chat", "u", "short question");
    wait_for(&s, |sent| !sent.is_empty());
    s.adapter.say(ChatType::Dm, "chat", "u", &long_text());
    let sent = wait_for(&s, |sent| sent.iter().any(|m| m.file.is_some()));
    assert_eq!(sent[0].text, "reply to: short question");
    assert_eq!(
        sent.len(),
        1 + 3,
        "the short reply, then 2 messages and the file"
    );
    assert_eq!(
        with_note("x", &file_note(3)),
        format!("x\n\n{}", file_note(3))
    );
    drop(s.rt);
}
