//! The Telegram adapter against a scripted Bot API fake on 127.0.0.1: the
//! behaviours the npm emulator cannot show (offset acknowledgement and
//! persistence, long-poll holds, 429/400/5xx/401/409 answers).
//!
//! The fake (`telegram_support`) speaks the Bot API's HTTP as the real one
//! does; see its module docs.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::adapter::{AdapterError, EventHandler, OutgoingFile, PlatformAdapter};
use hermes_gateway::event::{ChatType, MessageEvent};
use hermes_gateway_testing::{collector, recv_within};
use hermes_telegram::{
    MemoryOffsets, OffsetStore, RetryPolicy, StoreOffsets, TelegramAdapter, TelegramConfig,
};
use serde_json::{Value, json};
use telegram_support::{Fake, TOKEN};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(20);

fn dm(update_id: i64, message_id: i64, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": message_id, "date": 0, "text": text,
        "from": {"id": 7, "is_bot": false, "first_name": "Ann"},
        "chat": {"id": 7, "type": "private"}}})
}

fn config(fake: &Fake) -> TelegramConfig {
    let mut c = TelegramConfig::new(TOKEN);
    c.api_url = fake.base.clone();
    c.poll_timeout_s = 2;
    c.empty_poll_pause = Duration::from_millis(200);
    c.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(400),
        max_retry_after: Duration::from_secs(10),
    };
    c
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, WAIT)
        .await
        .expect("no event in time (or the handler was dropped)")
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn offsets_acknowledge_batches_and_duplicates_are_dropped() {
    let fake = Fake::start(true).await;
    fake.push_update(dm(1, 11, "one"));
    fake.push_update(dm(2, 12, "two"));
    let offsets = Arc::new(MemoryOffsets::new());
    let adapter = TelegramAdapter::new(config(&fake), offsets.clone()).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    assert_eq!(adapter.bot().unwrap().username.as_deref(), Some("fake_bot"));

    let a = next_event(&mut rx).await;
    let b = next_event(&mut rx).await;
    assert_eq!((a.message_id.as_str(), a.text.as_str()), ("11", "one"));
    assert_eq!((b.message_id.as_str(), b.text.as_str()), ("12", "two"));
    assert_eq!(a.source.chat_type, ChatType::Dm);
    assert_eq!(
        (a.source.chat_id.as_str(), a.source.user_id.as_str()),
        ("7", "7")
    );

    // The platform delivers message 12 again under a new update id (G7),
    // then a new message.
    fake.push_update(dm(3, 12, "two"));
    fake.push_update(dm(4, 14, "four"));
    let c = next_event(&mut rx).await;
    assert_eq!(c.message_id, "14", "the repeat of 12 must be dropped");
    eventually("offset 5 saved", || offsets.load() == Some(5)).await;

    // The first poll had no offset; each later one acknowledged what came before.
    let polls = fake.requests("getUpdates");
    assert!(polls[0].body.get("offset").is_none());
    assert_eq!(polls[0].body["timeout"], 2);
    let offsets_sent: Vec<i64> = polls
        .iter()
        .filter_map(|r| r.body["offset"].as_i64())
        .collect();
    assert!(offsets_sent.contains(&3), "{offsets_sent:?}");
    assert!(
        offsets_sent.windows(2).all(|w| w[0] <= w[1]),
        "offset never goes back: {offsets_sent:?}"
    );
    adapter.disconnect().await;
    assert!(rx.try_recv().is_err(), "nothing else was delivered");
}

#[tokio::test]
async fn unacknowledged_updates_are_redelivered_after_a_restart_and_handled_ones_are_not() {
    let fake = Fake::start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gateway.sqlite");
    let store = || {
        let s = hermes_runtime::store::Store::open(&db).unwrap();
        Arc::new(StoreOffsets::new(Arc::new(Mutex::new(s))))
    };

    for i in 1..=3 {
        fake.push_update(dm(i, 100 + i, &format!("m{i}")));
    }
    let first = TelegramAdapter::new(config(&fake), store()).unwrap();
    let (handler, mut rx) = collector();
    first.connect(handler).await.unwrap();
    let got: Vec<String> = [
        next_event(&mut rx).await,
        next_event(&mut rx).await,
        next_event(&mut rx).await,
    ]
    .into_iter()
    .map(|e| e.text)
    .collect();
    assert_eq!(got, ["m1", "m2", "m3"]);
    let saved = store();
    eventually("offset 4 persisted", || saved.load() == Some(4)).await;
    drop(saved);
    first.disconnect().await;

    // While the gateway is down, two more arrive. The fake still holds 1..=3
    // only if the offset was never sent; the restarted adapter must start at 4
    // from the SQLite store, not from scratch.
    fake.replace_pending((1..=5).map(|i| dm(i, 100 + i, &format!("m{i}"))).collect());
    let polls_before = fake.requests("getUpdates").len();
    let second = TelegramAdapter::new(config(&fake), store()).unwrap();
    let (handler, mut rx) = collector();
    second.connect(handler).await.unwrap();
    let got: Vec<String> = [next_event(&mut rx).await, next_event(&mut rx).await]
        .into_iter()
        .map(|e| e.text)
        .collect();
    assert_eq!(got, ["m4", "m5"], "no repeats, nothing lost");
    assert_eq!(fake.requests("getUpdates")[polls_before].body["offset"], 4);
    let saved = store();
    eventually("offset 6 persisted", || saved.load() == Some(6)).await;
    second.disconnect().await;
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn long_poll_is_held_and_a_message_during_the_hold_arrives() {
    let fake = Fake::start(true).await;
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    eventually("a poll is being held", || {
        !fake.requests("getUpdates").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.push_update(dm(1, 1, "during the hold"));
    assert_eq!(next_event(&mut rx).await.text, "during the hold");

    // Held polls (2 s each) that end empty are not errors and not hammered:
    // over ~5 s at most a handful of requests (a loaded machine only makes fewer).
    let start = fake.requests("getUpdates").len();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let polls = fake.requests("getUpdates");
    assert!(
        polls.len() - start <= 5,
        "{} polls in 5 s with a 2 s hold",
        polls.len() - start
    );
    assert!(polls.iter().all(|r| r.body["timeout"] == 2));
    assert!(adapter.fatal_error().is_none());
    adapter.disconnect().await;
}

#[tokio::test]
async fn disconnect_during_a_long_poll_hangs_up_at_once() {
    // The poll is a blocking exchange on the blocking pool: dropping its
    // future must make it give up (within a tick), not hold a thread and a
    // connection until the 30 s hold ends.
    let fake = Fake::start(true).await;
    let mut c = config(&fake);
    c.poll_timeout_s = 30;
    let adapter = TelegramAdapter::new(c, Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap();
    eventually("a poll is being held", || {
        !fake.requests("getUpdates").is_empty()
    })
    .await;
    let started = Instant::now();
    adapter.disconnect().await;
    eventually("the held poll's connection is closed", || {
        fake.abandoned() == 1
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn empty_polls_that_return_at_once_are_paced() {
    let fake = Fake::start(false).await;
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = fake.requests("getUpdates").len();
    // 200 ms pause → about 10; without pacing it would be thousands.
    assert!((1..=14).contains(&n), "{n} polls in 2 s");
    fake.push_update(dm(1, 1, "still delivered"));
    assert_eq!(next_event(&mut rx).await.text, "still delivered");
    adapter.disconnect().await;
}

#[tokio::test]
async fn rate_limit_429_waits_retry_after_then_sends() {
    let fake = Fake::start(true).await;
    fake.script(
        "sendMessage",
        429,
        json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1",
               "parameters": {"retry_after": 1}}),
    );
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    adapter.send("7", "hello", None).await.unwrap();
    let sends = fake.requests("sendMessage");
    assert_eq!(sends.len(), 2);
    assert!(
        sends[1].at.duration_since(sends[0].at) >= Duration::from_secs(1),
        "retry_after honoured"
    );
    assert_eq!(sends[0].body, sends[1].body, "the same message is resent");
}

#[tokio::test]
async fn a_file_goes_as_send_document_multipart_and_5xx_is_retried() {
    let fake = Fake::start(true).await;
    fake.script(
        "sendDocument",
        502,
        json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
    );
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    assert!(adapter.can_send_files());
    let content = "# The rest\n\nüñíçødé ✓ and \"quotes\" and\r\nCRLF\n".repeat(50);
    let file = OutgoingFile {
        file_name: "reply.md".into(),
        content: content.clone().into_bytes(),
        caption: "The rest of the reply above.".into(),
        media_type: "text/markdown; charset=utf-8".into(),
        ..OutgoingFile::default()
    };
    adapter.send_file("7", &file, Some("12")).await.unwrap();
    let sends = fake.requests("sendDocument");
    assert_eq!(sends.len(), 2, "the 502 was retried");
    let body = &sends[1].body;
    assert_eq!(body["chat_id"], "7");
    assert_eq!(body["caption"], "The rest of the reply above.");
    assert_eq!(body["document"]["filename"], "reply.md");
    assert_eq!(body["document"]["content"].as_str().unwrap(), content);
    assert!(
        body["document"]["content_type"]
            .as_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    let reply: Value = serde_json::from_str(body["reply_parameters"].as_str().unwrap()).unwrap();
    assert_eq!(reply["message_id"], 12);
    assert!(fake.requests("sendMessage").is_empty());

    let err = adapter
        .send_file("not-a-chat", &file, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a Telegram chat id"), "{err}");
}

#[tokio::test]
async fn formatting_refused_with_400_is_resent_as_plain_text() {
    let fake = Fake::start(true).await;
    fake.script(
        "sendMessage",
        400,
        json!({"ok": false, "error_code": 400,
               "description": "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 3"}),
    );
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let text = "**bold** a<b & `code`";
    adapter.send("7", text, Some("55")).await.unwrap();
    let sends = fake.requests("sendMessage");
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[0].body["parse_mode"], "HTML");
    assert_eq!(
        sends[0].body["text"],
        "<b>bold</b> a&lt;b &amp; <code>code</code>"
    );
    assert!(sends[1].body.get("parse_mode").is_none());
    assert_eq!(sends[1].body["text"], text, "the same chunk, as plain text");
    assert_eq!(sends[1].body["reply_parameters"]["message_id"], 55);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let fake = Fake::start(true).await;
    let err5 = json!({"ok": false, "error_code": 502, "description": "Bad Gateway"});
    fake.script("sendMessage", 502, err5.clone());
    fake.script("sendMessage", 502, err5.clone());
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    adapter.send("7", "third time lucky", None).await.unwrap();
    assert_eq!(fake.requests("sendMessage").len(), 3);

    for _ in 0..3 {
        fake.script("sendMessage", 500, err5.clone());
    }
    let err = adapter.send("7", "never", None).await.unwrap_err();
    assert!(matches!(err, AdapterError::Rejected { .. }), "{err:?}");
    assert_eq!(fake.requests("sendMessage").len(), 6, "bounded: 3 attempts");

    // Nothing listens here: a network error, retried, then reported without the token.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let mut c = config(&fake);
    c.api_url = format!("http://{addr}");
    let offline = TelegramAdapter::new(c, Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, _rx) = collector();
    let err = offline.connect(handler).await.unwrap_err();
    assert!(matches!(err, AdapterError::Network { .. }), "{err:?}");
    assert!(!err.to_string().contains("SECRET"), "token leaked: {err}");
}

#[tokio::test]
async fn rejected_token_stops_the_adapter_with_a_clear_error() {
    // Wrong token: Telegram answers 404 for an unknown bot path.
    let fake = Fake::start(true).await;
    let mut c = config(&fake);
    c.token = "999:WRONG".into();
    let adapter = TelegramAdapter::new(c, Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, _rx) = collector();
    let err = adapter.connect(handler).await.unwrap_err();
    assert!(matches!(err, AdapterError::Auth { .. }), "{err:?}");
    assert!(
        err.to_string().contains("TELEGRAM_BOT_TOKEN was rejected"),
        "{err}"
    );
    assert!(!err.to_string().contains("WRONG"));

    // Token revoked while running: 401 on getUpdates stops polling.
    fake.script(
        "getUpdates",
        401,
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
    );
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap();
    let err = tokio::time::timeout(WAIT, adapter.wait_stopped())
        .await
        .unwrap()
        .expect("a fatal error");
    assert!(matches!(*err, AdapterError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("Unauthorized"));
    let polls = fake.requests("getUpdates").len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        fake.requests("getUpdates").len(),
        polls,
        "no polling after a 401"
    );
    assert!(adapter.fatal_error().is_some());
    adapter.disconnect().await;
    assert!(adapter.fatal_error().is_some(), "the reason stays visible");
}

/// Another poller of the same token (Telegram's 409) is waited out: the
/// adapter keeps polling and delivers once the conflict is over (issue 31:
/// it used to stop polling for good while the process looked healthy).
#[tokio::test]
async fn conflict_409_is_waited_out_and_polling_goes_on() {
    let fake = Fake::start(true).await;
    let conflict = json!({"ok": false, "error_code": 409,
        "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"});
    fake.script("getUpdates", 409, conflict.clone());
    fake.script("getUpdates", 409, conflict);
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    fake.push_update(dm(1, 10, "after the conflict"));
    let event = next_event(&mut rx).await;
    assert_eq!(event.text, "after the conflict");
    assert!(
        adapter.fatal_error().is_none(),
        "{:?}",
        adapter.fatal_error()
    );
    assert!(fake.requests("getUpdates").len() >= 3);
    adapter.disconnect().await;
}

#[tokio::test]
async fn long_replies_in_a_forum_topic_stay_in_the_topic() {
    let fake = Fake::start(true).await;
    fake.push_update(json!({"update_id": 1, "message": {
        "message_id": 31, "message_thread_id": 30, "is_topic_message": true, "date": 0,
        "text": "@fake_bot tell me everything",
        "from": {"id": 8, "is_bot": false, "first_name": "Bo"},
        "chat": {"id": -1001, "type": "supergroup", "is_forum": true}}}));
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.source.chat_type, ChatType::Group);
    assert_eq!(ev.source.thread_id.as_deref(), Some("30"));

    adapter.typing(&ev.source.chat_id).await;
    assert_eq!(fake.requests("sendChatAction")[0].body["action"], "typing");

    // 2 UTF-16 units per emoji: 3000 of them need two messages.
    let text = format!("{}\n\n{}", "😀".repeat(1500), "😀".repeat(1500));
    adapter
        .send(&ev.source.chat_id, &text, Some(&ev.message_id))
        .await
        .unwrap();
    let sends = fake.requests("sendMessage");
    assert_eq!(sends.len(), 2);
    for s in &sends {
        assert_eq!(s.body["message_thread_id"], 30);
        assert!(s.body["text"].as_str().unwrap().encode_utf16().count() <= 4096);
    }
    assert_eq!(sends[0].body["reply_parameters"]["message_id"], 31);
    assert!(
        sends[1].body.get("reply_parameters").is_none(),
        "only the first piece quotes"
    );
    let joined: String = sends
        .iter()
        .map(|s| s.body["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);
    adapter.disconnect().await;
}

#[test]
fn from_env_is_enabled_by_the_token_and_validates_settings() {
    let env_of = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let store: Arc<dyn OffsetStore> = Arc::new(MemoryOffsets::new());
    assert!(TelegramAdapter::from_env(&env_of(&[]), store.clone()).is_none());
    assert!(
        TelegramAdapter::from_env(&env_of(&[("TELEGRAM_BOT_TOKEN", " ")]), store.clone()).is_none()
    );
    let a = TelegramAdapter::from_env(
        &env_of(&[
            ("TELEGRAM_BOT_TOKEN", "1:abc"),
            ("TELEGRAM_API_URL", "http://127.0.0.1:9"),
        ]),
        store.clone(),
    )
    .unwrap()
    .unwrap();
    assert!(
        !format!("{a:?}").contains("1:abc"),
        "Debug must not show the token"
    );
    let bad = TelegramAdapter::from_env(
        &env_of(&[
            ("TELEGRAM_BOT_TOKEN", "1:abc"),
            ("TELEGRAM_API_URL", "ftp://x"),
        ]),
        store.clone(),
    )
    .unwrap();
    assert!(bad.unwrap_err().to_string().contains("TELEGRAM_API_URL"));
    let bad = TelegramAdapter::from_env(
        &env_of(&[
            ("TELEGRAM_BOT_TOKEN", "1:abc"),
            ("TELEGRAM_GROUP_POLICY", "sometimes"),
        ]),
        store,
    )
    .unwrap();
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("TELEGRAM_GROUP_POLICY")
    );
}

#[tokio::test]
async fn a_panicking_handler_ends_polling_visibly() {
    let fake = Fake::start(true).await;
    fake.push_update(dm(1, 1, "boom"));
    let adapter = TelegramAdapter::new(config(&fake), Arc::new(MemoryOffsets::new())).unwrap();
    let handler: EventHandler = Arc::new(|_| panic!("handler bug"));
    adapter.connect(handler).await.unwrap();
    let err = tokio::time::timeout(WAIT, adapter.wait_stopped())
        .await
        .unwrap()
        .expect("a fatal error");
    assert!(
        err.to_string().contains("poll loop ended abnormally"),
        "{err}"
    );
}

/// Whether the current thread is inside an async execution context (a
/// runtime worker running a task). `Handle::block_on` refuses exactly there,
/// and is allowed on a blocking-pool thread.
fn on_async_worker() -> bool {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.block_on(async {}))).is_err()
}

/// Records, for every load and save, whether it ran on an async worker.
#[derive(Default)]
struct ProbeOffsets {
    inner: MemoryOffsets,
    on_worker: Mutex<Vec<(&'static str, bool)>>,
}

impl OffsetStore for ProbeOffsets {
    fn load(&self) -> Option<i64> {
        self.on_worker
            .lock()
            .unwrap()
            .push(("load", on_async_worker()));
        self.inner.load()
    }

    fn save(&self, offset: i64) {
        self.on_worker
            .lock()
            .unwrap()
            .push(("save", on_async_worker()));
        self.inner.save(offset);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn offset_store_io_never_runs_on_a_runtime_worker() {
    let fake = Fake::start(true).await;
    fake.push_update(dm(1, 11, "one"));
    let offsets = Arc::new(ProbeOffsets::default());
    let adapter = TelegramAdapter::new(config(&fake), offsets.clone()).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    assert_eq!(next_event(&mut rx).await.text, "one");
    eventually("offset 2 saved", || offsets.inner.load() == Some(2)).await;
    adapter.disconnect().await;
    let calls = offsets.on_worker.lock().unwrap().clone();
    assert!(calls.contains(&("load", false)), "{calls:?}");
    assert!(calls.contains(&("save", false)), "{calls:?}");
    assert!(
        calls.iter().all(|(_, on_worker)| !on_worker),
        "the offset store blocked a runtime worker: {calls:?}"
    );
}

#[tokio::test]
async fn update_id_at_i64_max_does_not_overflow() {
    let fake = Fake::start(true).await;
    fake.push_update(dm(i64::MAX, 11, "last"));
    let offsets = Arc::new(MemoryOffsets::new());
    let adapter = TelegramAdapter::new(config(&fake), offsets.clone()).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    assert_eq!(next_event(&mut rx).await.text, "last");
    eventually("offset saved", || offsets.load() == Some(i64::MAX)).await;
    // Polling goes on: a later poll carries the saturated offset, and the
    // adapter is still connected (a panic would have ended the loop).
    eventually("a poll with the saturated offset", || {
        fake.requests("getUpdates")
            .iter()
            .any(|r| r.body["offset"].as_i64() == Some(i64::MAX))
    })
    .await;
    adapter
        .send("7", "still here", None)
        .await
        .expect("the adapter still works");
    adapter.disconnect().await;
}

#[tokio::test]
async fn a_huge_retry_after_on_get_updates_does_not_stop_polling_for_good() {
    // Found by reading the poll loop: its 429 wait was the server's number
    // uncapped, so `retry_after: u64::MAX` stopped polling for good.
    let fake = Fake::start(true).await;
    fake.script(
        "getUpdates",
        429,
        json!({"ok": false, "error_code": 429, "description": "Too Many Requests",
               "parameters": {"retry_after": u64::MAX}}),
    );
    fake.push_update(dm(1, 11, "after the wait"));
    let mut config = config(&fake);
    config.retry.max_retry_after = Duration::from_millis(300);
    let adapter = TelegramAdapter::new(config, Arc::new(MemoryOffsets::new())).unwrap();
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    assert_eq!(next_event(&mut rx).await.text, "after the wait");
    let polls = fake.requests("getUpdates");
    assert!(polls.len() >= 2, "{polls:?}");
    assert!(
        polls[1].at.duration_since(polls[0].at) >= Duration::from_millis(300),
        "the capped wait is still honoured"
    );
    adapter.disconnect().await;
}
