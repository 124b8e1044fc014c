//! The WeCom adapter against a loopback fake WeCom server (SPEC G8, G1, G7).
#![cfg(feature = "wecom")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::wecom_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_gateway::adapter::{AdapterError, OutgoingFile, PlatformAdapter};
use hermes_gateway::event::{ChatType, MessageEvent, MessageType};
use hermes_gateway_testing::{collector, recv_within};
use hermes_wecom::{WecomAdapter, WecomConfig, WecomState};
use tokio::sync::mpsc;
use wecom_support::{Behaviour, Chat, FakeWecom};

const SECRET: &str = "s3cr3t-value";

fn config(url: &str) -> WecomConfig {
    WecomConfig {
        ws_url: url.to_owned(),
        // Short merge windows keep the round-trip tests quick; the merge
        // timing itself has its own tests.
        fragment_wait: Duration::from_millis(50),
        fragment_max_wait: Duration::from_millis(200),
        ..WecomConfig::new("bot-1", SECRET)
    }
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, Duration::from_secs(20))
        .await
        .expect("no event within 20 s (or the handler was dropped)")
}

async fn connected(
    behaviour: Behaviour,
    cfg: impl FnOnce(WecomConfig) -> WecomConfig,
) -> (
    FakeWecom,
    WecomAdapter,
    mpsc::UnboundedReceiver<MessageEvent>,
) {
    let fake = FakeWecom::start(behaviour).await;
    let adapter = WecomAdapter::new(cfg(config(&fake.url)));
    let (handler, rx) = collector();
    adapter.connect(handler).await.unwrap();
    (fake, adapter, rx)
}

const DM: Chat<'static> = Chat {
    user: "alice",
    group: None,
};

#[tokio::test]
async fn subscribes_with_bot_id_and_secret() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| c).await;
    assert_eq!(adapter.state(), WecomState::Connected);
    let sub = fake.nth("aibot_subscribe", 0).await;
    assert_eq!(sub.frame["body"]["bot_id"], "bot-1");
    assert_eq!(sub.frame["body"]["secret"], SECRET);
    assert!(sub.req_id.starts_with("aibot_subscribe"), "{}", sub.req_id);
    assert_eq!(adapter.platform(), "wecom");
    assert_eq!(adapter.max_message_len(), 4000);
    adapter.disconnect().await;
    assert_eq!(adapter.state(), WecomState::Idle);
    fake.assert_clean();
}

#[tokio::test]
async fn refused_credentials_are_an_auth_error_naming_the_settings() {
    let fake = FakeWecom::start(Behaviour {
        secret: "the-right-one".into(),
        ..Behaviour::default()
    })
    .await;
    let adapter = WecomAdapter::new(WecomConfig {
        reconnect_base: Duration::from_millis(20),
        ..config(&fake.url)
    });
    let (handler, _rx) = collector();
    let err = adapter.connect(handler).await.unwrap_err();
    let AdapterError::Auth { platform, message } = &err else {
        panic!("expected Auth, got {err:?}")
    };
    assert_eq!(*platform, "wecom");
    assert!(
        message.contains("WECOM_BOT_ID") && message.contains("WECOM_SECRET"),
        "{message}"
    );
    assert!(message.contains("40058"), "{message}");
    assert!(
        !err.to_string().contains(SECRET),
        "the secret leaked: {err}"
    );
    assert!(matches!(adapter.state(), WecomState::AuthFailed(_)));
    assert!(matches!(
        adapter.stop_error(),
        Some(AdapterError::Auth { .. })
    ));
    // Not retried: bad credentials do not get better.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.connections(), 1);
    fake.assert_clean();
}

#[tokio::test]
async fn unreachable_server_is_a_network_error() {
    // Bind and drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let adapter = WecomAdapter::new(config(&format!("ws://127.0.0.1:{port}")));
    let (handler, _rx) = collector();
    let err = adapter.connect(handler).await.unwrap_err();
    assert!(matches!(err, AdapterError::Network { .. }), "{err:?}");
    assert!(matches!(adapter.state(), WecomState::Failed(_)));
    let err = adapter.send("alice", "hi", None).await.unwrap_err();
    assert!(matches!(err, AdapterError::NotConnected { .. }), "{err:?}");
}

#[tokio::test]
async fn heartbeat_pings_are_acked_and_keep_the_connection() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| WecomConfig {
        heartbeat_interval: Duration::from_millis(250),
        ..c
    })
    .await;
    let ping = fake.nth("ping", 2).await;
    assert!(ping.req_id.starts_with("ping"), "{}", ping.req_id);
    let ids: std::collections::HashSet<_> = fake
        .received_cmd("ping")
        .into_iter()
        .map(|p| p.req_id)
        .collect();
    assert_eq!(
        ids.len(),
        fake.received_cmd("ping").len(),
        "ping req_ids must be unique"
    );
    assert_eq!(fake.connections(), 1);
    assert_eq!(adapter.state(), WecomState::Connected);
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn dead_connection_is_detected_and_resubscribed_with_backoff() {
    let (fake, adapter, mut rx) = connected(
        Behaviour {
            mute_pings_on: Some(0),
            ..Behaviour::default()
        },
        |c| WecomConfig {
            heartbeat_interval: Duration::from_millis(150),
            reconnect_base: Duration::from_millis(100),
            ..c
        },
    )
    .await;
    // Two unanswered pings, then the third tick gives up on the socket.
    fake.wait_until("a second connection's subscribe", |r| {
        r.iter().any(|f| f.conn == 1 && f.cmd == "aibot_subscribe")
    })
    .await;
    let first_conn_pings = fake
        .received()
        .iter()
        .filter(|f| f.conn == 0 && f.cmd == "ping")
        .count();
    assert_eq!(
        first_conn_pings, 2,
        "gives up after exactly two missed acks"
    );
    // Backoff: the reconnect waited at least the base delay after the last ping.
    let last_ping = fake
        .received()
        .into_iter()
        .rfind(|f| f.conn == 0 && f.cmd == "ping")
        .unwrap();
    let resub = fake.received().into_iter().find(|f| f.conn == 1).unwrap();
    assert!(resub.at.duration_since(last_ping.at) >= Duration::from_millis(100));

    // Healthy again: messages flow over the new connection.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while adapter.state() != WecomState::Connected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            adapter.state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let conns = fake.connections();
    fake.push_text("cb-after", "m-after", DM, "still there?");
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.text, "still there?");
    adapter
        .send("alice", "yes", Some(&ev.message_id))
        .await
        .unwrap();
    let reply = fake.nth("aibot_respond_msg", 0).await;
    assert_eq!(reply.req_id, "cb-after");
    assert_eq!(reply.conn, conns - 1);
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn dm_round_trip_reuses_the_callback_req_id() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| c).await;
    fake.push_text("cb-req-1", "msg-1", DM, "hello bot");
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.message_id, "msg-1");
    assert_eq!(ev.text, "hello bot");
    assert_eq!(ev.message_type, MessageType::Text);
    assert_eq!(ev.source.platform, "wecom");
    assert_eq!(ev.source.chat_type, ChatType::Dm);
    assert_eq!(ev.source.chat_id, "alice");
    assert_eq!(ev.source.user_id, "alice");

    adapter
        .send(&ev.source.chat_id, "**hi** alice", Some(&ev.message_id))
        .await
        .unwrap();
    let reply = fake.nth("aibot_respond_msg", 0).await;
    assert_eq!(reply.req_id, "cb-req-1");
    assert_eq!(reply.frame["body"]["msgtype"], "markdown");
    assert_eq!(reply.frame["body"]["markdown"]["content"], "**hi** alice");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn group_round_trip_strips_the_mention() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| c).await;
    let group = Chat {
        user: "bob",
        group: Some("grp-9"),
    };
    fake.push_text("cb-g", "msg-g", group, "@Hermes\u{2005}summarise this");
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.text, "summarise this");
    assert_eq!(ev.source.chat_type, ChatType::Group);
    assert_eq!(ev.source.chat_id, "grp-9");
    assert_eq!(ev.source.user_id, "bob");
    adapter
        .send("grp-9", "done", Some(&ev.message_id))
        .await
        .unwrap();
    let reply = fake.nth("aibot_respond_msg", 0).await;
    assert_eq!(reply.req_id, "cb-g");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn proactive_send_uses_a_fresh_req_id_and_chatid() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| c).await;
    adapter.send("grp-1", "news", None).await.unwrap();
    adapter.send("grp-1", "more news", None).await.unwrap();
    let a = fake.nth("aibot_send_msg", 0).await;
    let b = fake.nth("aibot_send_msg", 1).await;
    assert_eq!(a.frame["body"]["chatid"], "grp-1");
    assert_eq!(a.frame["body"]["markdown"]["content"], "news");
    assert_ne!(a.req_id, b.req_id);
    assert!(a.req_id.starts_with("aibot_send_msg"));
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn a_file_is_uploaded_in_chunks_and_sent_as_a_file_message() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| c).await;
    assert!(adapter.can_send_files());
    // 1.2 MiB: three chunks, the last one short; bytes of every value.
    let content: Vec<u8> = (0..1_250_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = OutgoingFile {
        file_name: "reply.md".into(),
        content: content.clone(),
        caption: "ignored: WeCom files have no caption".into(),
        ..OutgoingFile::default()
    };
    // The AI-bot upload has no voice type: spoken replies stay text.
    assert!(!adapter.can_send_voice());
    adapter.send_file("alice", &file, None).await.unwrap();
    assert_eq!(
        fake.files(),
        vec![("alice".to_owned(), "reply.md".to_owned(), content)]
    );
    let cmds: Vec<String> = fake
        .received()
        .into_iter()
        .map(|r| r.cmd)
        .filter(|c| c != "aibot_subscribe" && c != "ping")
        .collect();
    assert_eq!(
        cmds,
        [
            "aibot_upload_media_init",
            "aibot_upload_media_chunk",
            "aibot_upload_media_chunk",
            "aibot_upload_media_chunk",
            "aibot_upload_media_finish",
            "aibot_send_msg",
        ]
    );
    // WeCom refuses files under 5 bytes: a clear error, nothing sent.
    let tiny = OutgoingFile {
        content: b"abc".to_vec(),
        ..file
    };
    let err = adapter.send_file("alice", &tiny, None).await.unwrap_err();
    assert!(matches!(err, AdapterError::Rejected { .. }), "{err}");
    assert_eq!(fake.files().len(), 1);
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn a_callback_req_id_answers_once_then_messages_go_proactive() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| c).await;
    fake.push_text("cb-1", "m-1", DM, "q");
    let ev = next_event(&mut rx).await;
    adapter
        .send("alice", "partial answer", Some(&ev.message_id))
        .await
        .unwrap();
    adapter
        .send("alice", "the rest", Some(&ev.message_id))
        .await
        .unwrap();
    assert_eq!(fake.nth("aibot_respond_msg", 0).await.req_id, "cb-1");
    let second = fake.nth("aibot_send_msg", 0).await;
    assert_eq!(second.frame["body"]["markdown"]["content"], "the rest");
    assert_eq!(fake.received_cmd("aibot_respond_msg").len(), 1);
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn a_refused_reply_falls_back_to_a_proactive_message() {
    let (fake, adapter, mut rx) = connected(
        Behaviour {
            refuse_respond: Some(846_608),
            ..Behaviour::default()
        },
        |c| c,
    )
    .await;
    fake.push_text("cb-old", "m-old", DM, "q");
    let ev = next_event(&mut rx).await;
    adapter
        .send("alice", "answer", Some(&ev.message_id))
        .await
        .unwrap();
    let sent = fake.nth("aibot_send_msg", 0).await;
    assert_eq!(sent.frame["body"]["markdown"]["content"], "answer");
    assert_eq!(sent.frame["body"]["chatid"], "alice");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn long_replies_are_split_and_sent_one_frame_at_a_time() {
    let (fake, adapter, mut rx) = connected(
        Behaviour {
            ack_delay: Duration::from_millis(50),
            ..Behaviour::default()
        },
        |c| c,
    )
    .await;
    fake.push_text("cb-long", "m-long", DM, "write a lot");
    let ev = next_event(&mut rx).await;
    let para = "lorem ipsum dolor sit amet ".repeat(60); // 1620 chars
    let text = format!("{para}\n\n{para}\n\n{para}\n\n{para}\n\n{para}");
    adapter
        .send("alice", &text, Some(&ev.message_id))
        .await
        .unwrap();

    let frames: Vec<_> = fake
        .received()
        .into_iter()
        .filter(|f| f.cmd == "aibot_respond_msg" || f.cmd == "aibot_send_msg")
        .collect();
    assert!(frames.len() >= 3, "{} pieces", frames.len());
    assert_eq!(frames[0].cmd, "aibot_respond_msg");
    assert_eq!(frames[0].req_id, "cb-long");
    let mut joined = String::new();
    for f in &frames {
        let c = f.frame["body"]["markdown"]["content"].as_str().unwrap();
        assert!(c.chars().count() <= 4000);
        joined.push_str(c);
    }
    assert_eq!(joined, text, "never cut: the pieces rejoin to the reply");
    assert_eq!(fake.max_in_flight(), 1, "each piece waited for its ack");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn a_missing_ack_is_a_network_error_after_the_timeout() {
    let (fake, adapter, _rx) = connected(
        Behaviour {
            ack_replies: false,
            ..Behaviour::default()
        },
        |c| WecomConfig {
            ack_timeout: Duration::from_millis(300),
            ..c
        },
    )
    .await;
    let err = adapter.send("alice", "hello?", None).await.unwrap_err();
    assert!(matches!(err, AdapterError::Network { .. }), "{err:?}");
    assert!(err.to_string().contains("aibot_send_msg"), "{err}");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn duplicate_msgid_is_delivered_once() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| c).await;
    fake.push_text("cb-a", "same-msg", DM, "once");
    fake.push_text("cb-b", "same-msg", DM, "once");
    // A later message (another chat, so it cannot be merged) proves the duplicate was processed (and
    // dropped) before it: frames of one connection are handled in order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    fake.push_text(
        "cb-c",
        "other-msg",
        Chat {
            user: "carol",
            group: None,
        },
        "next",
    );
    let first = next_event(&mut rx).await;
    assert_eq!(
        (first.message_id.as_str(), first.text.as_str()),
        ("same-msg", "once")
    );
    let second = next_event(&mut rx).await;
    assert_eq!(second.message_id, "other-msg");
    assert!(rx.try_recv().is_err());
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn disconnected_event_stops_without_reconnecting() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| WecomConfig {
        reconnect_base: Duration::from_millis(20),
        fragment_wait: Duration::from_secs(30),
        ..c
    })
    .await;
    // A message still held by the merger is handed out, not lost.
    fake.push_text("cb-held", "m-held", DM, "held");
    fake.push_event("ev-1", "ev-msg-1", "alice", "disconnected_event");
    let held = next_event(&mut rx).await;
    assert_eq!(held.text, "held");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !matches!(adapter.state(), WecomState::Replaced(_)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            adapter.state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(
        adapter.stop_error(),
        Some(AdapterError::Conflict { .. })
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.connections(),
        1,
        "a replaced connection is not reopened"
    );
    let err = adapter.send("alice", "hi", None).await.unwrap_err();
    assert!(matches!(err, AdapterError::NotConnected { .. }), "{err:?}");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn enter_chat_gets_the_welcome_text() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| WecomConfig {
        welcome_text: Some("Hi, I am Hermes.".into()),
        ..c
    })
    .await;
    fake.push_event("ev-enter", "ev-msg-2", "alice", "enter_chat");
    let w = fake.nth("aibot_respond_welcome_msg", 0).await;
    assert_eq!(w.req_id, "ev-enter");
    assert_eq!(w.frame["body"]["text"]["content"], "Hi, I am Hermes.");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn enter_chat_without_welcome_text_sends_nothing() {
    let (fake, adapter, _rx) = connected(Behaviour::default(), |c| c).await;
    fake.push_event("ev-enter", "ev-msg-3", "alice", "enter_chat");
    adapter.send("alice", "marker", None).await.unwrap();
    assert!(fake.received_cmd("aibot_respond_welcome_msg").is_empty());
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn images_become_media_and_unknown_content_placeholders() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| c).await;
    fake.push(serde_json::json!({
        "cmd": "aibot_msg_callback", "headers": {"req_id": "cb-img"},
        "body": {"msgid": "m-img", "aibotid": "bot-1", "chattype": "single",
                 "from": {"userid": "alice"}, "msgtype": "image",
                 "image": {"url": "https://example.invalid/x", "aeskey": "k"}}
    }));
    let ev = next_event(&mut rx).await;
    assert_eq!(ev.message_type, MessageType::Photo);
    assert_eq!(ev.text, "");
    assert_eq!(ev.media.len(), 1);
    assert_eq!(ev.media[0].kind, hermes_gateway::event::MediaKind::Image);
    fake.push(serde_json::json!({
        "cmd": "aibot_msg_callback", "headers": {"req_id": "cb-loc"},
        "body": {"msgid": "m-loc", "aibotid": "bot-1", "chattype": "single",
                 "from": {"userid": "bob"}, "msgtype": "location"}
    }));
    let ev = next_event(&mut rx).await;
    assert!(ev.text.contains("location message"), "{}", ev.text);
    assert!(ev.media.is_empty());
    // A malformed frame is skipped; the connection keeps working.
    fake.push(serde_json::json!({"cmd": "aibot_msg_callback", "headers": {"req_id": "bad"}, "body": {"msgtype": "text"}}));
    fake.push_text("cb-ok", "m-ok", DM, "after the bad one");
    assert_eq!(next_event(&mut rx).await.text, "after the bad one");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn split_user_text_is_joined_with_real_timers() {
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| WecomConfig {
        // The near-limit wait is stretched from 2 s to 4 s so a loaded
        // machine cannot split the message; 1.2 s gaps still prove that a
        // near-limit piece waits longer than the 0.6 s short wait.
        fragment_wait: Duration::from_millis(600),
        fragment_max_wait: Duration::from_secs(4),
        ..c
    })
    .await;
    let p1 = "a".repeat(4000);
    let p2 = "b".repeat(3950);
    let p3 = "c".repeat(120);
    let other = Chat {
        user: "carol",
        group: None,
    };
    fake.push_text("cb-1", "m-1", DM, &p1);
    fake.push_text("cb-x", "m-x", other, "unrelated");
    // Longer than the short wait, within the near-limit wait.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    fake.push_text("cb-2", "m-2", DM, &p2);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    fake.push_text("cb-3", "m-3", DM, &p3);

    let mut events = [next_event(&mut rx).await, next_event(&mut rx).await];
    events.sort_by(|a, b| a.source.user_id.cmp(&b.source.user_id));
    let (joined, unrelated) = (&events[0], &events[1]);
    assert_eq!(unrelated.text, "unrelated", "other chats never mix");
    assert_eq!(joined.source.user_id, "alice");
    assert_eq!(joined.text, format!("{p1}{p2}{p3}"));
    assert_eq!(joined.message_id, "m-3", "replies go to the newest piece");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "exactly one merged message");

    adapter
        .send("alice", "got it", Some(&joined.message_id))
        .await
        .unwrap();
    assert_eq!(fake.nth("aibot_respond_msg", 0).await.req_id, "cb-3");
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn disconnect_hands_out_held_pieces() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let fake = FakeWecom::start(Behaviour::default()).await;
    let adapter = WecomAdapter::new(WecomConfig {
        fragment_wait: Duration::from_secs(60),
        ..config(&fake.url)
    });
    let sink = events.clone();
    adapter
        .connect(Arc::new(move |ev| sink.lock().unwrap().push(ev)))
        .await
        .unwrap();
    fake.push_text("cb-1", "m-1", DM, "in flight");
    // The frame reaches the adapter before we stop it: wait for a later ack.
    adapter.send("alice", "marker", None).await.unwrap();
    adapter.disconnect().await;
    let got = events.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].text, "in flight");
    fake.assert_clean();
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

#[test]
fn from_env_enables_wecom_only_with_both_credentials() {
    assert!(WecomAdapter::from_env(&env_of(&[])).is_none());
    let err = WecomAdapter::from_env(&env_of(&[("WECOM_BOT_ID", "b")]))
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("WECOM_SECRET"), "{err}");
    let err = WecomAdapter::from_env(&env_of(&[("WECOM_SECRET", SECRET)]))
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("WECOM_BOT_ID"), "{err}");
    assert!(!err.to_string().contains(SECRET));

    let a = WecomAdapter::from_env(&env_of(&[("WECOM_BOT_ID", "b"), ("WECOM_SECRET", SECRET)]))
        .unwrap()
        .unwrap();
    assert_eq!(a.config().ws_url, "wss://openws.work.weixin.qq.com");
    assert_eq!(a.config().heartbeat_interval, Duration::from_secs(30));
    assert_eq!(a.config().ack_timeout, Duration::from_secs(5));
    assert_eq!(a.state(), WecomState::Idle);
    let debug = format!("{a:?}");
    assert!(!debug.contains(SECRET), "Debug shows the secret: {debug}");

    let a = WecomAdapter::from_env(&env_of(&[
        ("WECOM_BOT_ID", "b"),
        ("WECOM_SECRET", SECRET),
        ("WECOM_WS_URL", "ws://127.0.0.1:9"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(a.config().ws_url, "ws://127.0.0.1:9");
    let err = WecomAdapter::from_env(&env_of(&[
        ("WECOM_BOT_ID", "b"),
        ("WECOM_SECRET", SECRET),
        ("WECOM_WS_URL", "https://example.invalid"),
    ]))
    .unwrap()
    .unwrap_err();
    assert!(err.to_string().contains("WECOM_WS_URL"), "{err}");
}

/// Records every log event (message and fields) as text.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{}", event.metadata().level());
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn the_secret_never_reaches_the_log() {
    // A current-thread runtime: the adapter's tasks log on this thread, where
    // the capturing subscriber is installed.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let _guard = tracing::subscriber::set_default(Capture(lines.clone()));

    // Refused credentials, then a full session with a reconnect.
    let fake = FakeWecom::start(Behaviour {
        secret: "the-right-one".into(),
        ..Behaviour::default()
    })
    .await;
    let adapter = WecomAdapter::new(config(&fake.url));
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap_err();

    let (fake, adapter, mut rx) = connected(
        Behaviour {
            mute_pings_on: Some(0),
            ..Behaviour::default()
        },
        |c| WecomConfig {
            heartbeat_interval: Duration::from_millis(100),
            reconnect_base: Duration::from_millis(50),
            ..c
        },
    )
    .await;
    fake.wait_until("a resubscribe", |r| r.iter().any(|f| f.conn == 1))
        .await;
    while adapter.state() != WecomState::Connected {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.push_text("cb-1", "m-1", DM, "hi");
    let ev = next_event(&mut rx).await;
    adapter
        .send("alice", "hello", Some(&ev.message_id))
        .await
        .unwrap();
    adapter.disconnect().await;

    let lines = lines.lock().unwrap();
    let all = lines.join("\n");
    assert!(all.contains("subscribe refused"), "{all}");
    assert!(all.contains("connection lost"), "{all}");
    assert!(!all.contains(SECRET), "the secret was logged:\n{all}");
}

#[tokio::test]
async fn an_oversized_frame_ends_the_connection_instead_of_being_buffered() {
    // Found by reading the connection setup: tungstenite's defaults let a
    // server send 64 MiB messages, all buffered before parsing.
    let (fake, adapter, mut rx) = connected(Behaviour::default(), |c| WecomConfig {
        reconnect_base: Duration::from_millis(50),
        ..c
    })
    .await;
    fake.push_text("cb-big", "m-big", DM, &"x".repeat(2 * 1024 * 1024));
    fake.wait_until("a second connection's subscribe", |r| {
        r.iter().any(|f| f.conn == 1 && f.cmd == "aibot_subscribe")
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while adapter.state() != WecomState::Connected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            adapter.state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.push_text("cb-small", "m-small", DM, "a normal message");
    let ev = next_event(&mut rx).await;
    assert_eq!(
        ev.text, "a normal message",
        "the oversized one was not delivered"
    );
    adapter.disconnect().await;
    fake.assert_clean();
}
