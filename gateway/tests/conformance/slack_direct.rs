//! Slack's own promises beyond the kit (issue 41 §2), against real
//! gateways and the fake Slack: redelivered envelopes and doubled
//! mentions answered once, `disconnect` and cut sockets losing nothing,
//! files fetched only with the bot token, typing as a reaction, refused
//! tokens stopping the gateway with the reason in its status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use crate::conformance_kit::gateway::{Gateway, serve_if_child};
use crate::slack_support::{BOT_USER, Behaviour, BotMessage, FakeSlack, dm_of};

const USER: &str = "U0000101";
const CHANNEL: &str = "C0GROUP01";

/// Answers "echo: " and the last user message.
fn respond(request: &Value) -> Reply {
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let token = last
        .split(|c: char| c.is_whitespace() || c == '"')
        .find(|w| w.starts_with('[') && w.ends_with(']'))
        .unwrap_or("(none)");
    Reply::text(format!("echo {token}"))
}

struct Setup {
    _rt: tokio::runtime::Runtime,
    fake: FakeSlack,
    provider: FakeProvider,
    home: tempfile::TempDir,
}

fn setup(behaviour: Behaviour) -> Setup {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(FakeSlack::start(behaviour));
    let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
    Setup {
        _rt: rt,
        fake,
        provider,
        home: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    fn spawn(&self, test: &str, extra: &[(&'static str, String)]) -> Gateway {
        let mut env = self.fake.env();
        env.push(("SLACK_ALLOWED_USERS", USER.to_owned()));
        env.extend(extra.iter().cloned());
        let mark = self.fake.connections();
        let gateway = Gateway::spawn(
            test,
            &env,
            self.home.path(),
            self.home.path(),
            &self.provider.base_url(),
        );
        if extra.iter().all(|(k, _)| *k != "SLACK_BOT_TOKEN") {
            self.fake
                .wait_for("a socket", Duration::from_secs(60), |f| {
                    f.connections() > mark
                });
        }
        gateway
    }

    fn answers(&self, token: &str) -> Vec<BotMessage> {
        let echo = format!("echo {token}");
        self.fake
            .posted()
            .into_iter()
            .filter(|m| m.text == echo)
            .collect()
    }

    fn await_answer(&self, token: &str) -> BotMessage {
        self.fake.wait_for(
            &format!("the answer to {token}"),
            Duration::from_secs(60),
            |_| !self.answers(token).is_empty(),
        );
        self.answers(token).remove(0)
    }
}

#[test]
fn redelivered_envelopes_and_doubled_mentions_are_answered_once() {
    serve_if_child();
    let s = setup(Behaviour {
        lose_acks: 2,
        ..Behaviour::default()
    });
    let mut gateway = s.spawn(
        "slack_direct::redelivered_envelopes_and_doubled_mentions_are_answered_once",
        &[],
    );
    let dm = s.fake.dm(USER, "[r1] hello");
    // A mention comes as `message` and as `app_mention`, both envelopes.
    let mention = s
        .fake
        .channel_message(CHANNEL, USER, "[r2] hi all", None, true);
    let in_thread = s
        .fake
        .channel_message(CHANNEL, USER, "[r3] and here", Some(&mention), true);
    let a1 = s.await_answer("[r1]");
    let a2 = s.await_answer("[r2]");
    let a3 = s.await_answer("[r3]");
    // Slack sent the envelopes whose acks were lost again, marked so.
    s.fake.wait_for(
        "every envelope acknowledged",
        Duration::from_secs(30),
        |f| f.unacknowledged() == 0,
    );
    let retried = s
        .fake
        .envelopes()
        .iter()
        .filter(|(_, e)| e["retry_attempt"].as_u64() > Some(0))
        .count();
    assert!(retried >= 2, "no envelope was sent again");
    std::thread::sleep(Duration::from_secs(2));
    for token in ["[r1]", "[r2]", "[r3]"] {
        assert_eq!(
            s.answers(token).len(),
            1,
            "{token} was not answered exactly once"
        );
    }
    // Each answer is in the thread of its message, in its chat.
    assert_eq!(
        (a1.channel.as_str(), a1.thread_ts.as_deref()),
        (dm_of(USER).as_str(), Some(dm.as_str()))
    );
    assert_eq!(
        (a2.channel.as_str(), a2.thread_ts.as_deref()),
        (CHANNEL, Some(mention.as_str()))
    );
    assert_eq!(a3.thread_ts.as_deref(), Some(mention.as_str()));
    let _ = in_thread;
    // Typing was an 👀 reaction on the DM being answered.
    assert!(
        s.fake
            .reactions()
            .iter()
            .any(|(c, ts, name)| *c == dm_of(USER) && *ts == dm && name == "eyes")
    );
    // Nothing the bot posted pinged anyone or came from a user token.
    assert!(
        s.fake
            .calls("chat.postMessage")
            .iter()
            .all(|c| c.token == "xoxb-")
    );
    assert!(gateway.terminate().success());
}

#[test]
fn disconnect_and_cut_sockets_lose_nothing_and_files_need_the_bot_token() {
    serve_if_child();
    let s = setup(Behaviour::default());
    let mut gateway = s.spawn(
        "slack_direct::disconnect_and_cut_sockets_lose_nothing_and_files_need_the_bot_token",
        &[],
    );
    // Bad input first: a frame that is no JSON, an envelope of no known
    // type, an event with no user, one with no text: each is logged and
    // skipped, the socket stays up, and the next message is answered.
    let sockets = s.fake.connections();
    s.fake.send_raw("{not json");
    s.fake.send_raw(r#"{"type": "events_api", "envelope_id": "bad-1", "payload": {"event": {"type": "message", "channel": "D1", "text": "x", "ts": "1.1"}}}"#);
    s.fake.send_raw(r#"{"type": "events_api", "envelope_id": "bad-2", "payload": {"event": {"type": "message", "channel": "D0000101", "channel_type": "im", "user": "U0000101", "text": "   ", "ts": "1.2"}}}"#);
    s.fake
        .send_raw(r#"{"type": "something_new", "envelope_id": "bad-3"}"#);
    s.fake.dm(USER, "[d1] first");
    s.await_answer("[d1]");
    assert_eq!(s.fake.connections(), sockets, "bad input cost the socket");
    assert_eq!(s.fake.posted().len(), 1, "bad input was answered");
    let before = s.fake.connections();
    // Slack recycles the link: the old socket stays a moment, then closes.
    s.fake.disconnect("refresh_requested");
    s.fake.dm(USER, "[d2] during the refresh");
    s.fake.dm(USER, "[d3] right after");
    s.await_answer("[d2]");
    s.await_answer("[d3]");
    s.fake.disconnect("warning");
    s.fake.drop_sockets();
    s.fake.dm(USER, "[d4] after a cut");
    s.fake.dm_file(
        USER,
        "[d5] read this",
        "notes.txt",
        "text/plain",
        b"some notes".to_vec(),
    );
    s.await_answer("[d4]");
    s.await_answer("[d5]");
    assert!(
        s.fake.connections() > before,
        "no new socket after disconnect"
    );
    std::thread::sleep(Duration::from_secs(2));
    for token in ["[d1]", "[d2]", "[d3]", "[d4]", "[d5]"] {
        assert_eq!(
            s.answers(token).len(),
            1,
            "{token} was not answered exactly once"
        );
    }
    let downloads = s.fake.downloads();
    assert!(
        !downloads.is_empty() && downloads.iter().all(|(_, with_token)| *with_token),
        "{downloads:?}"
    );
    assert!(gateway.terminate().success());
}

#[test]
fn refused_tokens_stop_the_gateway_with_the_reason_in_its_status() {
    serve_if_child();
    let s = setup(Behaviour::default());
    // A wrong bot token: the gateway does not start, and says which.
    let mut wrong = s.spawn(
        "slack_direct::refused_tokens_stop_the_gateway_with_the_reason_in_its_status",
        &[("SLACK_BOT_TOKEN", "xoxb-9-9-not-the-token".to_owned())],
    );
    let status = wrong
        .wait_exit(Duration::from_secs(60))
        .expect("a gateway with a wrong token kept running");
    assert!(!status.success());
    assert!(
        s.fake
            .calls("auth.test")
            .iter()
            .any(|c| c.error.as_deref() == Some("invalid_auth"))
    );
    // Revoked while serving: the next Web API call is refused, the gateway
    // stops, and its status says why.
    let mut gateway = s.spawn(
        "slack_direct::refused_tokens_stop_the_gateway_with_the_reason_in_its_status",
        &[],
    );
    s.fake.dm(USER, "[v1] before");
    s.await_answer("[v1]");
    s.fake.revoke_bot_token();
    s.fake.dm(USER, "[v2] after the token was revoked");
    let started = Instant::now();
    let status = gateway
        .wait_exit(Duration::from_secs(60))
        .expect("the gateway kept running with a revoked token");
    assert!(!status.success(), "exit {status:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let status = hermes_gateway::ops::status::read(s.home.path(), true);
    let text = format!("{status:?}");
    assert!(
        text.contains("token_revoked") && text.contains("SLACK_BOT_TOKEN"),
        "{text}"
    );
    assert!(
        !text.contains("fakebotsecret"),
        "the token leaked into the status"
    );
    let _ = BOT_USER;
}

#[test]
fn slash_commands_reach_the_runner_and_sethome_names_the_channel() {
    serve_if_child();
    let s = setup(Behaviour::default());
    let mut gateway = s.spawn(
        "slack_direct::slash_commands_reach_the_runner_and_sethome_names_the_channel",
        &[],
    );
    let asked = s.provider.requests().len();
    s.fake.slash_command(USER, "C0HOME002", "/sethome", "");
    s.fake
        .wait_for("the /sethome answer", Duration::from_secs(60), |f| {
            f.posted()
                .iter()
                .any(|m| m.channel == "C0HOME002" && m.text.contains("home channel"))
        });
    let answer = s
        .fake
        .posted()
        .into_iter()
        .find(|m| m.channel == "C0HOME002")
        .unwrap();
    assert_eq!(
        answer.thread_ts, None,
        "a command has no thread to answer in"
    );
    assert_eq!(
        s.provider.requests().len(),
        asked,
        "a command reached the model"
    );
    assert!(gateway.terminate().success());
}

/// `hermes gateway run --check` for Slack: `auth.test` with the bot token
/// and `apps.connections.open` with the app token, each refusal naming
/// its token and none printing it.
#[test]
fn the_check_asks_both_tokens_and_names_the_one_refused() {
    serve_if_child();
    let s = setup(Behaviour::default());
    let config = |bot: &str, app: &str| {
        let mut c = hermes_slack::SlackConfig::new(bot, app);
        c.api_url = s.fake.api_url();
        c
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let good = rt.block_on(hermes_slack::check_bot(&config(
        crate::slack_support::BOT_TOKEN,
        crate::slack_support::APP_TOKEN,
    )));
    assert!(
        good.as_deref().is_ok_and(|b| b.contains(BOT_USER)),
        "{good:?}"
    );
    let wrong_app = rt.block_on(hermes_slack::check_bot(&config(
        crate::slack_support::BOT_TOKEN,
        "xapp-1-A0FAKEAPP-9-wrong",
    )));
    assert!(
        wrong_app
            .as_ref()
            .is_err_and(|e| e.contains("SLACK_APP_TOKEN") && !e.contains("wrong")),
        "{wrong_app:?}"
    );
    // A bot token where the app token belongs: Slack's not_allowed_token_type.
    let swapped = rt.block_on(hermes_slack::check_bot(&config(
        crate::slack_support::BOT_TOKEN,
        crate::slack_support::BOT_TOKEN,
    )));
    assert!(
        swapped
            .as_ref()
            .is_err_and(|e| e.contains("not_allowed_token_type")),
        "{swapped:?}"
    );
    s.fake.revoke_bot_token();
    let revoked = rt.block_on(hermes_slack::check_bot(&config(
        crate::slack_support::BOT_TOKEN,
        crate::slack_support::APP_TOKEN,
    )));
    assert!(
        revoked
            .as_ref()
            .is_err_and(|e| e.contains("SLACK_BOT_TOKEN")
                && e.contains("token_revoked")
                && !e.contains("fakebotsecret")),
        "{revoked:?}"
    );
}

/// A link Slack accepts and cuts at once is retried with a growing wait,
/// not in a storm (the adapter on its own, against the fake).
#[test]
fn a_link_cut_right_after_hello_is_not_retried_in_a_storm() {
    use hermes_gateway::adapter::PlatformAdapter;
    serve_if_child();
    let s = setup(Behaviour::default());
    let mut config = hermes_slack::SlackConfig::new(
        crate::slack_support::BOT_TOKEN,
        crate::slack_support::APP_TOKEN,
    );
    config.api_url = s.fake.api_url();
    config.reconnect_base = Duration::from_millis(500);
    let adapter = hermes_slack::SlackAdapter::new(config);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(adapter.connect(Arc::new(|_| {}))).unwrap();
    let before = s.fake.connections();
    s.fake.cut_after_hello(true);
    s.fake.drop_sockets();
    std::thread::sleep(Duration::from_secs(4));
    let tries = s.fake.connections() - before;
    // 0 + 0.5 + 1 + 2 s of waiting: about four sockets, never hundreds.
    assert!((2..=6).contains(&tries), "{tries} sockets in 4 s");
    s.fake.cut_after_hello(false);
    rt.block_on(adapter.disconnect());
}
