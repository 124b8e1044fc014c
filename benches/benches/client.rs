//! Per-request overhead of the OpenAI client (`hermes_runtime::client`)
//! against a loopback HTTP/1.1 server that answers instantly with a canned
//! completion: request encoding, the helper thread, HTTP over a pooled
//! keep-alive connection, and decoding (one JSON body, or an SSE stream of a
//! few chunks). What the model would cost is zero here, so this is the
//! client's own floor per model call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_core::{ChatRequest, LedgerEntry, Message, Model, NullSink};
use hermes_runtime::client::{ClientOptions, OpenAiClient};

const JSON_BODY: &str = r#"{"id":"chatcmpl-b","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}"#;

fn sse_body() -> String {
    let mut events = String::new();
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    events.push_str(&chunk(r#"{"role":"assistant","content":""}"#, "null"));
    for piece in ["Hello!", " How", " can", " I", " help", " you", " today?"] {
        events.push_str(&chunk(&format!("{{\"content\":\"{piece}\"}}"), "null"));
    }
    events.push_str(&chunk("{}", "\"stop\""));
    events.push_str("data: {\"id\":\"chatcmpl-b\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":9,\"total_tokens\":29}}\n\n");
    events.push_str("data: [DONE]\n\n");
    events
}

/// Starts the instant server; returns its base URL.
fn start_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sse = sse_body();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let sse = sse.clone();
            thread::spawn(move || serve(stream, &sse));
        }
    });
    format!("http://{addr}/v1")
}

fn serve(stream: TcpStream, sse: &str) {
    let _ = stream.set_nodelay(true);
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut body = Vec::new();
    loop {
        let mut content_length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':')
                && n.eq_ignore_ascii_case("content-length")
            {
                content_length = v.trim().parse().unwrap_or(0);
            }
        }
        body.resize(content_length, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        // The request says whether it wants a stream.
        let streaming = body.windows(13).any(|w| w == b"\"stream\":true");
        let response = if streaming {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{sse}\r\n0\r\n\r\n",
                sse.len()
            )
        } else {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{JSON_BODY}",
                JSON_BODY.len()
            )
        };
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn client(base_url: &str, stream: bool) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: base_url.to_owned(),
        api_key: Some("sk-bench".into()),
        model: "bench-model".into(),
        stream,
        ..ClientOptions::default()
    })
    .unwrap()
}

fn bench_client(c: &mut Criterion) {
    let base = start_server();
    let history = vec![LedgerEntry::new(Message::user("Hello there, who are you?"))];
    let request = ChatRequest {
        system_prompt: "You are a helpful assistant.",
        messages: &history,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let mut group = c.benchmark_group("client_request");
    for (name, stream) in [("non_streaming", false), ("streaming", true)] {
        let client = client(&base, stream);
        // Warm the connection pool so every measured call reuses it.
        client.complete(&request, &mut NullSink).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                let completion = client.complete(black_box(&request), &mut NullSink).unwrap();
                black_box(completion)
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = bench_client
}
criterion_main!(benches);
