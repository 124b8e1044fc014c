//! WeCom AI bot's own promise beyond the kit: pieces of a text held for the
//! fragment merge (600 ms) are durable before the next frame is read, so a
//! gateway killed -9 inside the window loses nothing — the next gateway
//! joins the pieces and answers them once. WeCom sends a callback once and
//! never again; before the pieces were stored this message was lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use crate::conformance_kit::gateway::{Gateway, serve_if_child};
use crate::wecom_support::{Behaviour, Chat, FakeWecom};

const USER: &str = "zhang";

/// Answers "echo: " and the last user message's text.
fn respond(request: &Value) -> Reply {
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    Reply::text(format!("echo: {last}"))
}

/// Every text the bot sent to `USER` (replies and proactive messages).
fn said_to_user(fake: &FakeWecom) -> Vec<String> {
    fake.received()
        .into_iter()
        .filter_map(|r| {
            let body = &r.frame["body"];
            let text = match r.cmd.as_str() {
                "aibot_respond_msg" => body["markdown"]["content"].as_str().or_else(|| {
                    (body["stream"]["finish"] == true)
                        .then(|| body["stream"]["content"].as_str())
                        .flatten()
                }),
                "aibot_send_msg" if body["chatid"] == USER => body["markdown"]["content"].as_str(),
                _ => None,
            };
            text.map(str::to_owned)
        })
        .collect()
}

fn wait_subscribed(fake: &FakeWecom, before: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fake.received_cmd("aibot_subscribe").len() == before {
        assert!(Instant::now() < deadline, "the gateway never subscribed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn pieces_held_for_the_merge_survive_a_kill_and_are_answered_once() {
    serve_if_child();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(FakeWecom::start(Behaviour::default()));
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    let home = tempfile::tempdir().unwrap();
    let defaults = Behaviour::default();
    let env = vec![
        ("WECOM_BOT_ID", defaults.bot_id),
        ("WECOM_SECRET", defaults.secret),
        ("WECOM_WS_URL", fake.url.clone()),
        ("WECOM_ALLOWED_USERS", USER.to_owned()),
    ];
    let test = "wecom_direct::pieces_held_for_the_merge_survive_a_kill_and_are_answered_once";
    let spawn = || Gateway::spawn(test, &env, home.path(), home.path(), &provider.base_url());

    let mut gateway = spawn();
    wait_subscribed(&fake, 0);
    let chat = Chat {
        user: USER,
        group: None,
    };
    fake.push_text("cb-1", "msg-1", chat, "first piece [alpha]");
    std::thread::sleep(Duration::from_millis(100));
    fake.push_text("cb-2", "msg-2", chat, "second piece [beta]");
    // Well inside the 600 ms the merge waits after the second piece.
    std::thread::sleep(Duration::from_millis(150));
    gateway.kill();
    assert!(
        provider.requests().is_empty(),
        "the kill came after the merge window: the test proves nothing"
    );

    let mut gateway = spawn();
    wait_subscribed(&fake, 1);
    let expected = "echo: first piece [alpha]\nsecond piece [beta]";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !said_to_user(&fake).iter().any(|t| t == expected) {
        assert!(
            Instant::now() < deadline,
            "the pieces held when the gateway was killed were never answered; it said {:?}",
            said_to_user(&fake)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Time for a second answer, were there one.
    std::thread::sleep(Duration::from_millis(1500));
    let status = gateway.terminate();
    assert!(status.success(), "{status:?}");
    // A third start finds nothing left to hand on.
    let mut gateway = spawn();
    wait_subscribed(&fake, 2);
    std::thread::sleep(Duration::from_millis(1000));
    let status = gateway.terminate();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        said_to_user(&fake),
        vec![expected.to_owned()],
        "answered once, as one message"
    );
    assert_eq!(provider.requests().len(), 1, "one model call");
}
