//! `wecom_callback`: the cost of one WeCom callback before it reaches the
//! runner.
//!
//! - `receive/<size>`: the sans-IO checks of a signed, encrypted text
//!   callback — envelope XML, SHA-1 signature, AES-256-CBC decryption, corp
//!   id, message XML — for a short message and a 2048-byte one.
//! - `http_round_trip`: the same callback POSTed over a keep-alive loopback
//!   connection to the adapter's hyper server, until `success` comes back
//!   (the handler only counts), i.e. what WeCom waits for.
//!
//! Run with `cargo bench -p hermes-benches --bench wecom_callback`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_gateway::adapter::{EventHandler, PlatformAdapter};
use hermes_wecom_callback::crypto::CallbackCrypto;
use hermes_wecom_callback::endpoint::Endpoint;
use hermes_wecom_callback::{WecomCallbackAdapter, WecomCallbackConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
const KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";
const CORP: &str = "ww1436e0e65a779aee";
const NOW_S: u64 = 1_700_000_000;

/// (query, body) of a callback carrying `text`.
fn callback(crypto: &CallbackCrypto, text: &str, msg_id: u64) -> (String, String) {
    let xml = format!(
        "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><FromUserName><![CDATA[zhangsan]]></FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{text}]]></Content><MsgId>{msg_id}</MsgId><AgentID>1000002</AgentID></xml>"
    );
    let enc = crypto.encrypt(xml.as_bytes(), [9; 16]);
    let sig = crypto.sign(&NOW_S.to_string(), "nonce", &enc);
    (
        format!("msg_signature={sig}&timestamp={NOW_S}&nonce=nonce"),
        format!(
            "<xml><ToUserName><![CDATA[{CORP}]]></ToUserName><Encrypt><![CDATA[{enc}]]></Encrypt><AgentID><![CDATA[1000002]]></AgentID></xml>"
        ),
    )
}

fn receive(c: &mut Criterion) {
    let crypto = CallbackCrypto::new(TOKEN, KEY, CORP).unwrap();
    let endpoint = Endpoint::new(crypto.clone(), Some("1000002".into()), Some(300));
    let mut group = c.benchmark_group("wecom_callback/receive");
    for (name, text) in [
        ("short", "帮我总结一下今天的会议".to_owned()),
        ("2048_bytes", "长".repeat(2048 / 3)),
    ] {
        let (query, body) = callback(&crypto, &text, 1);
        group.bench_function(name, |b| {
            b.iter(|| {
                endpoint
                    .receive(black_box(&query), black_box(body.as_bytes()), NOW_S)
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn http_round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let delivered = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&delivered);
    let handler: EventHandler = Arc::new(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let config = WecomCallbackConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        // Nothing listens there: connect goes on without a token.
        api_url: "http://127.0.0.1:9".into(),
        api_max_attempts: 1,
        replay_window: None,
        ..WecomCallbackConfig::new(CORP, "secret", 1_000_002, TOKEN, KEY)
    };
    let adapter = WecomCallbackAdapter::new(config).unwrap();
    rt.block_on(adapter.connect(handler)).unwrap();
    let addr = adapter.local_addr().unwrap();
    let crypto = CallbackCrypto::new(TOKEN, KEY, CORP).unwrap();
    let mut conn = rt.block_on(tokio::net::TcpStream::connect(addr)).unwrap();
    let mut next_id = 0u64;
    let mut buf = vec![0u8; 4096];
    c.bench_function("wecom_callback/http_round_trip", |b| {
        b.iter_batched(
            || {
                next_id += 1;
                let (query, body) = callback(&crypto, "帮我总结一下今天的会议", next_id);
                format!(
                    "POST /wecom/callback?{query} HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            },
            |request| {
                rt.block_on(async {
                    conn.write_all(request.as_bytes()).await.unwrap();
                    let mut got = 0;
                    while !buf[..got].ends_with(b"success") {
                        let n = conn.read(&mut buf[got..]).await.unwrap();
                        assert!(n > 0, "connection closed");
                        got += n;
                    }
                })
            },
            criterion::BatchSize::SmallInput,
        )
    });
    assert!(delivered.load(Ordering::Relaxed) > 0);
    rt.block_on(adapter.disconnect());
}

criterion_group!(benches, receive, http_round_trip);
criterion_main!(benches);
