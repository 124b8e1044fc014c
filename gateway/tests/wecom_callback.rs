//! The WeCom callback adapter through real HTTP on 127.0.0.1: the test plays
//! WeCom (encrypts, signs and POSTs callbacks to the adapter's server) and a
//! loopback fake of the qyapi REST API takes the replies, checking WeCom's
//! rules on every request (SPEC G8, G1, G7, E1, E4).
#![cfg(feature = "wecom_callback")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::wecom_callback_support;

use std::sync::Arc;
use std::time::Duration;

use hermes_gateway::adapter::{AdapterError, PlatformAdapter};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::{ChatType, MessageEvent, MessageType};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps, refusal_text};
use hermes_gateway_testing::{
    ManualClock, Pace, ScriptedModel, TestAgentFactory, collector, recv_within,
};
use hermes_runtime::store::Store;
use hermes_wecom_callback::crypto::CallbackCrypto;
use hermes_wecom_callback::xml::IMAGE_PLACEHOLDER;
use hermes_wecom_callback::{WecomCallbackAdapter, WecomCallbackConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use wecom_callback_support::{AES_KEY, AGENT, CORP, FakeQyApi, SECRET, TOKEN, WeCom, text_xml};

/// 2023-11-14 22:13:20 UTC, in seconds.
const NOW_S: u64 = 1_700_000_000;

fn config(fake: &FakeQyApi, clock: &Arc<ManualClock>) -> WecomCallbackConfig {
    WecomCallbackConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        api_url: fake.url.clone(),
        api_backoff: Duration::from_millis(10),
        clock: clock.clone(),
        ..WecomCallbackConfig::new(CORP, SECRET, AGENT, TOKEN, AES_KEY)
    }
}

struct Setup {
    fake: FakeQyApi,
    adapter: WecomCallbackAdapter,
    rx: mpsc::UnboundedReceiver<MessageEvent>,
    wecom: WeCom,
}

async fn setup_with(tweak: impl FnOnce(WecomCallbackConfig) -> WecomCallbackConfig) -> Setup {
    let fake = FakeQyApi::start().await;
    let clock = ManualClock::new(NOW_S * 1000);
    let adapter = WecomCallbackAdapter::new(tweak(config(&fake, &clock))).unwrap();
    let (handler, rx) = collector();
    adapter.connect(handler).await.unwrap();
    let addr = adapter.local_addr().expect("listening");
    let wecom = WeCom::new(addr, "/wecom/callback");
    Setup {
        fake,
        adapter,
        rx,
        wecom,
    }
}

async fn setup() -> Setup {
    setup_with(|c| c).await
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) -> MessageEvent {
    recv_within(rx, Duration::from_secs(20))
        .await
        .expect("no event within 20 s")
}

/// Nothing was delivered to the handler.
fn assert_no_event(rx: &mut mpsc::UnboundedReceiver<MessageEvent>) {
    if let Ok(ev) = rx.try_recv() {
        panic!("unexpected event: {ev:?}");
    }
}

#[tokio::test]
async fn url_verification_answers_the_decrypted_echostr() {
    let mut s = setup().await;
    let (status, body) = s
        .wecom
        .verify_url("5927782489442352469", NOW_S, false)
        .await;
    assert_eq!((status, body.as_str()), (200, "5927782489442352469"));
    let (status, body) = s.wecom.verify_url("5927782489442352469", NOW_S, true).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("signature"), "{body}");
    // A verification captured an hour ago is not answered.
    let (status, body) = s.wecom.verify_url("1", NOW_S - 3600, false).await;
    assert_eq!(status, 403, "{body}");
    assert_no_event(&mut s.rx);
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn a_dm_becomes_one_message_event_and_the_reply_goes_out_through_message_send() {
    let mut s = setup().await;
    assert_eq!(s.adapter.platform(), "wecom_callback");
    assert_eq!(s.adapter.max_message_len(), 2048);
    let (status, body) = s
        .wecom
        .say("alice", "hello <bot> & co", "1001", NOW_S)
        .await;
    assert_eq!((status, body.as_str()), (200, "success"));
    let ev = next_event(&mut s.rx).await;
    assert_eq!(ev.message_id, "1001");
    assert_eq!(ev.text, "hello <bot> & co");
    assert_eq!(ev.message_type, MessageType::Text);
    assert_eq!(ev.source.platform, "wecom_callback");
    assert_eq!(ev.source.chat_type, ChatType::Dm);
    assert_eq!(ev.source.chat_id, "alice");
    assert_eq!(ev.source.user_id, "alice");

    s.adapter
        .send(&ev.source.chat_id, "hi back", Some(&ev.message_id))
        .await
        .unwrap();
    s.adapter.send("alice", "and again", None).await.unwrap();
    let sent = s.fake.sent_to("alice");
    let texts: Vec<&str> = sent.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["hi back", "and again"]);
    assert!(sent.iter().all(|m| m.msgtype == "text"));
    // One token for everything: fetched at connect, cached since.
    assert_eq!(s.fake.tokens_issued(), 1);
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn markdown_replies_when_configured() {
    let s = setup_with(|c| WecomCallbackConfig {
        message_format: hermes_wecom_callback::MessageFormat::Markdown,
        ..c
    })
    .await;
    s.adapter.send("alice", "**bold**", None).await.unwrap();
    assert_eq!(s.fake.sent_to("alice")[0].msgtype, "markdown");
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn an_expired_token_is_refreshed_and_the_send_retried_once() {
    let s = setup().await;
    assert_eq!(s.fake.tokens_issued(), 1);
    s.fake.expire_tokens();
    s.adapter.send("alice", "after expiry", None).await.unwrap();
    assert_eq!(s.fake.send_answers(), [42001, 0]);
    assert_eq!(s.fake.tokens_issued(), 2);
    assert_eq!(s.fake.sent_to("alice")[0].content, "after expiry");

    // Refused again with the fresh token: retried once only, then an error.
    s.fake.fail_sends(&[42001, 42001]);
    let err = s.adapter.send("alice", "doomed", None).await.unwrap_err();
    assert!(
        matches!(&err, AdapterError::Rejected { message, .. } if message.contains("42001")),
        "{err:?}"
    );
    assert_eq!(s.fake.tokens_issued(), 3);
    assert!(
        !err.to_string().contains("token-"),
        "the token leaked: {err}"
    );
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn the_token_is_cached_for_its_expires_in() {
    let fake = FakeQyApi::start().await;
    fake.set_expires_in(600);
    let clock = ManualClock::new(NOW_S * 1000);
    let adapter = WecomCallbackAdapter::new(config(&fake, &clock)).unwrap();
    adapter.connect(collector().0).await.unwrap();
    adapter.send("alice", "one", None).await.unwrap();
    clock.advance(Duration::from_secs(400));
    adapter.send("alice", "two", None).await.unwrap();
    assert_eq!(fake.tokens_issued(), 1);
    // Close to its expiry the token is fetched again before WeCom refuses it.
    clock.advance(Duration::from_secs(200));
    adapter.send("alice", "three", None).await.unwrap();
    assert_eq!(fake.tokens_issued(), 2);
    assert_eq!(fake.send_answers(), [0, 0, 0]);
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test]
async fn busy_is_retried_and_other_errcodes_fail_the_send() {
    let s = setup().await;
    s.fake.fail_sends(&[-1]);
    s.adapter.send("alice", "patience", None).await.unwrap();
    assert_eq!(s.fake.send_answers(), [-1, 0]);
    s.fake.fail_sends(&[81013]);
    let err = s.adapter.send("nobody", "who?", None).await.unwrap_err();
    assert!(
        matches!(&err, AdapterError::Rejected { message, .. } if message.contains("81013")),
        "{err:?}"
    );
    assert_eq!(s.fake.send_answers(), [-1, 0, 81013]);
    // A server outside the app's trusted IPs is told what to change.
    s.fake.fail_sends(&[60020]);
    let err = s
        .adapter
        .send("alice", "from afar", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("trusted IPs"), "{err}");
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn refused_callbacks_never_reach_the_handler_and_the_server_keeps_serving() {
    let mut s = setup().await;
    let xml = text_xml("mallory", "let me in", "666", NOW_S);
    let (query, body) = s.wecom.sealed(&xml, NOW_S);

    // Wrong signature.
    let forged = query.replacen("msg_signature=", "msg_signature=0", 1);
    let (status, reply) = s.wecom.post_raw(&forged, body.clone()).await;
    assert_eq!(status, 403, "{reply}");
    // Signed correctly, but an hour old (a captured request replayed).
    let (old_query, old_body) = s.wecom.sealed(&xml, NOW_S - 3600);
    assert_eq!(s.wecom.post_raw(&old_query, old_body).await.0, 403);
    // Another corp's message under our key and token.
    let addr = s.adapter.local_addr().unwrap();
    let foreign = WeCom::with_crypto(
        addr,
        "/wecom/callback",
        CallbackCrypto::new(TOKEN, AES_KEY, "ww0000000000000000").unwrap(),
    );
    assert_eq!(foreign.post(&xml, NOW_S).await.0, 403);
    // Another key: decrypts to garbage, bad padding, signed with our token.
    let wrong_key = WeCom::with_crypto(
        addr,
        "/wecom/callback",
        CallbackCrypto::new(TOKEN, &"B".repeat(43), CORP).unwrap(),
    );
    let (status, reply) = wrong_key.post(&xml, NOW_S).await;
    assert_eq!(status, 400, "{reply}");
    // Malformed envelope; malformed message inside a valid envelope.
    assert_eq!(s.wecom.post_raw(&query, "<xml><Encrypt>").await.0, 400);
    assert_eq!(s.wecom.post(&xml[..40], NOW_S).await.0, 400);
    assert_eq!(s.wecom.post("plain text, not xml", NOW_S).await.0, 400);
    // Missing parameters.
    assert_eq!(s.wecom.post_raw("timestamp=1", body.clone()).await.0, 400);
    // Oversized body (the cap is 64 KiB), refused before it is read whole.
    let huge = format!("<xml><Encrypt>{}</Encrypt></xml>", "A".repeat(70 * 1024));
    assert_eq!(s.wecom.post_raw(&query, huge).await.0, 413);
    // Not the callback path, not a callback method.
    let base = format!("http://{}", s.adapter.local_addr().unwrap());
    let status = |method: &'static str, path: &'static str| {
        let url = format!("{base}{path}");
        async move {
            hermes_tests::http::request_async(method, &url, None)
                .await
                .unwrap()
                .status
        }
    };
    assert_eq!(status("GET", "/other").await, 404);
    assert_eq!(status("PUT", "/wecom/callback").await, 405);
    assert_eq!(status("GET", "/health").await, 200);
    assert_no_event(&mut s.rx);

    // Still serving.
    assert_eq!(
        s.wecom.post_raw(&query, body).await,
        (200, "success".to_owned())
    );
    assert_eq!(next_event(&mut s.rx).await.message_id, "666");
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn an_oversized_body_without_content_length_is_cut_off() {
    let s = setup().await;
    let addr = s.adapter.local_addr().unwrap();
    let (query, _) = s.wecom.sealed(&text_xml("a", "b", "1", NOW_S), NOW_S);
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /wecom/callback?{query} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let chunk = "A".repeat(16 * 1024);
    for _ in 0..8 {
        let piece = format!("{:x}\r\n{chunk}\r\n", chunk.len());
        if conn.write_all(piece.as_bytes()).await.is_err() {
            break;
        }
    }
    // The server answers and closes while data is still coming: the close
    // may be a reset after the answer, so keep what arrived before it.
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn silent_and_idle_connections_are_closed_after_the_header_timeout() {
    let s = setup_with(|c| WecomCallbackConfig {
        header_timeout: Duration::from_millis(200),
        ..c
    })
    .await;
    let addr = s.adapter.local_addr().unwrap();
    // A client that connects and sends nothing (or dribbles a header) does
    // not hold a connection slot for ever.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /wecom/callback HTTP/1.1\r\nHost")
        .await
        .unwrap();
    // An idle keep-alive connection after one request is closed too.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    for conn in [&mut silent, &mut slow, &mut idle] {
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "the connection stayed open");
    }
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn a_retried_callback_is_delivered_once() {
    let mut s = setup().await;
    let xml = text_xml("alice", "only once", "2002", NOW_S);
    let (query, body) = s.wecom.sealed(&xml, NOW_S);
    for _ in 0..3 {
        // WeCom's retry is the same request again.
        assert_eq!(s.wecom.post_raw(&query, body.clone()).await.0, 200);
    }
    // Re-encrypted (another random prefix), same MsgId.
    assert_eq!(s.wecom.post(&xml, NOW_S + 5).await.0, 200);
    assert_eq!(next_event(&mut s.rx).await.text, "only once");
    s.wecom.say("alice", "a new one", "2003", NOW_S).await;
    assert_eq!(next_event(&mut s.rx).await.text, "a new one");
    assert_no_event(&mut s.rx);
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn media_and_events() {
    let mut s = setup().await;
    let image = format!(
        "<xml><ToUserName>{CORP}</ToUserName><FromUserName>alice</FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType>image</MsgType><PicUrl>http://127.0.0.1:9/p.jpg</PicUrl><MediaId>MEDIA1</MediaId><MsgId>3003</MsgId><AgentID>{AGENT}</AgentID></xml>"
    );
    assert_eq!(s.wecom.post(&image, NOW_S).await.0, 200);
    let ev = next_event(&mut s.rx).await;
    // The turn fetches the image (SPEC X6): no placeholder, the media id
    // as the handle.
    assert_eq!(
        (ev.text.as_str(), ev.message_type),
        ("", MessageType::Photo)
    );
    assert_eq!(ev.media.len(), 1);
    assert_eq!(ev.media[0].kind, hermes_gateway::event::MediaKind::Image);
    assert_eq!(ev.media[0].handle, "MEDIA1");
    // Without a media id there is nothing to fetch: a placeholder.
    let bare = format!(
        "<xml><ToUserName>{CORP}</ToUserName><FromUserName>alice</FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType>image</MsgType><PicUrl>http://127.0.0.1:9/p.jpg</PicUrl><MsgId>3004</MsgId><AgentID>{AGENT}</AgentID></xml>"
    );
    assert_eq!(s.wecom.post(&bare, NOW_S).await.0, 200);
    let ev = next_event(&mut s.rx).await;
    assert_eq!(
        (ev.text.as_str(), ev.message_type),
        (IMAGE_PLACEHOLDER, MessageType::Photo)
    );
    assert!(ev.media.is_empty());

    s.fake
        .add_media("MEDIA1", "image/jpeg", b"\xff\xd8\xff\xe0 jpeg bytes");
    let media = s.adapter.fetch_media("MEDIA1").await.unwrap();
    assert_eq!(media.bytes, b"\xff\xd8\xff\xe0 jpeg bytes");
    assert_eq!(media.content_type.as_deref(), Some("image/jpeg"));
    assert_eq!(media.file_name.as_deref(), Some("MEDIA1.bin"));
    let err = s.adapter.fetch_media("missing").await.unwrap_err();
    assert!(err.to_string().contains("40007"), "{err}");

    // An event (the user opened the app) is acknowledged, not a message.
    let event = format!(
        "<xml><ToUserName>{CORP}</ToUserName><FromUserName>alice</FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType>event</MsgType><Event>enter_agent</Event><AgentID>{AGENT}</AgentID></xml>"
    );
    assert_eq!(
        s.wecom.post(&event, NOW_S).await,
        (200, "success".to_owned())
    );
    assert_no_event(&mut s.rx);
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn a_ten_thousand_character_reply_arrives_whole_in_pieces_of_at_most_2048_bytes() {
    let s = setup().await;
    // Three-byte characters, words and paragraphs: bytes, not characters,
    // are what WeCom counts.
    let mut text = String::new();
    let mut i = 0;
    while text.chars().count() < 10_000 {
        text.push_str(&format!("第{i}段 paragraph with some words, 长文本测试。"));
        text.push_str(if i % 7 == 6 { "\n\n" } else { " " });
        i += 1;
    }
    let text: String = text.chars().take(10_000).collect();
    s.adapter.send("alice", &text, None).await.unwrap();
    let pieces = s.fake.sent_to("alice");
    assert!(pieces.len() >= text.len() / 2048, "{} pieces", pieces.len());
    for p in &pieces {
        assert!(p.content.len() <= 2048, "{} bytes", p.content.len());
    }
    let joined: String = pieces.iter().map(|p| p.content.as_str()).collect();
    assert_eq!(joined, text);
    s.adapter.disconnect().await;
    s.fake.assert_clean();
}

#[tokio::test]
async fn refused_credentials_fail_connect_naming_the_settings() {
    let fake = FakeQyApi::start().await;
    let clock = ManualClock::new(NOW_S * 1000);
    let adapter = WecomCallbackAdapter::new(WecomCallbackConfig {
        corp_secret: "wrong-secret".into(),
        ..config(&fake, &clock)
    })
    .unwrap();
    let err = adapter.connect(collector().0).await.unwrap_err();
    let AdapterError::Auth { message, .. } = &err else {
        panic!("expected Auth, got {err:?}");
    };
    assert!(message.contains("WECOM_CALLBACK_CORP_SECRET"), "{message}");
    assert!(
        !message.contains("wrong-secret"),
        "the secret leaked: {message}"
    );
    assert!(
        adapter.local_addr().is_none(),
        "still listening after a refused connect"
    );
}

#[tokio::test]
async fn graceful_stop_answers_the_callback_in_flight_then_closes_the_port() {
    let mut s = setup().await;
    let addr = s.adapter.local_addr().unwrap();
    let (query, body) = s
        .wecom
        .sealed(&text_xml("alice", "last words", "4004", NOW_S), NOW_S);
    let mut conn = TcpStream::connect(addr).await.unwrap();
    // `Expect: 100-continue`: the server's "100 Continue" proves the request
    // is accepted and being read before the stop begins.
    let head = format!(
        "POST /wecom/callback?{query} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(20), conn.read_exact(&mut interim))
        .await
        .expect("no 100 Continue")
        .unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    let (first, rest) = body.split_at(body.len() / 2);
    conn.write_all(first.as_bytes()).await.unwrap();

    let adapter = s.adapter.clone();
    let stopping = tokio::spawn(async move { adapter.disconnect().await });
    // The listener closes first: new connections are refused…
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "the port stayed open while stopping");
    // …while the request in flight is still answered.
    conn.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer))
        .await
        .expect("no answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("success"), "{answer}");
    assert_eq!(next_event(&mut s.rx).await.text, "last words");
    tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("disconnect did not finish")
        .unwrap();
    assert!(s.adapter.local_addr().is_none());
    // Connecting again serves again.
    s.adapter.connect(collector().0).await.unwrap();
    assert!(s.adapter.local_addr().is_some());
    s.adapter.disconnect().await;
}

#[tokio::test]
async fn a_stalled_request_does_not_hold_the_stop_past_the_grace_period() {
    let s = setup_with(|c| WecomCallbackConfig {
        shutdown_grace: Duration::from_millis(300),
        body_timeout: Duration::from_secs(600),
        ..c
    })
    .await;
    let addr = s.adapter.local_addr().unwrap();
    let (query, _) = s.wecom.sealed(&text_xml("a", "b", "1", NOW_S), NOW_S);
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /wecom/callback?{query} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    conn.read_exact(&mut interim).await.unwrap();
    // The body never comes.
    tokio::time::timeout(Duration::from_secs(20), s.adapter.disconnect())
        .await
        .expect("disconnect hung on a stalled request");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the stalled connection outlived the stop");
}

/// The adapter with the real runner: allow-lists, refusals and answers are
/// the runner's (G1: the adapter only translates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_runner_unknown_users_are_refused_and_allowed_users_answered() {
    let fake = FakeQyApi::start().await;
    let clock = ManualClock::new(NOW_S * 1000);
    let adapter = Arc::new(WecomCallbackAdapter::new(config(&fake, &clock)).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    let model = ScriptedModel::new(Pace::Instant);
    let mut gateway = GatewayConfig::default();
    // The platform's own allow-list variable, as the environment gives it.
    let env = [(
        "WECOM_CALLBACK_ALLOWED_USERS".to_owned(),
        "alice".to_owned(),
    )]
    .into_iter()
    .collect();
    gateway.allow = GatewayConfig::from_sources(
        &toml::Table::new(),
        &env,
        hermes_gateway::platform::platforms(),
    )
    .unwrap()
    .allow;
    gateway.pairing = false;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(model.clone()),
        store: Arc::new(std::sync::Mutex::new(store)),
        clock: clock.clone(),
        config: gateway,
    });
    runner.start().await.unwrap();
    let wecom = WeCom::new(adapter.local_addr().unwrap(), "/wecom/callback");

    assert_eq!(wecom.say("mallory", "hi", "5001", NOW_S).await.0, 200);
    let sent = fake
        .wait_sent(|s| s.iter().any(|m| m.touser == "mallory"))
        .await;
    assert_eq!(sent[0].content, refusal_text("mallory"));
    assert_eq!(model.call_count(), 0, "an unknown user reached the model");

    assert_eq!(
        wecom.say("alice", "hello agent", "5002", NOW_S).await.0,
        200
    );
    fake.wait_sent(|s| s.iter().any(|m| m.touser == "alice"))
        .await;
    assert_eq!(fake.sent_to("alice")[0].content, "reply to: hello agent");
    runner.shutdown().await;
    assert!(
        adapter.local_addr().is_none(),
        "shutdown did not stop the server"
    );
    fake.assert_clean();
}
