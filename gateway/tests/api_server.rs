//! The OpenAI-compatible API server (`gateway/src/api_server`): real HTTP
//! over 127.0.0.1 against the server with the production agent factory and
//! a real SQLite store, the loopback fake provider behind it. Raw bodies and
//! stream chunks are checked against OpenAI's published schemas; the
//! official `openai` Python client plays the peer against a real `hermes
//! gateway run` process (`api_server_python.rs`).
#![cfg(feature = "api_server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::api_server_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use api_server_support::{
    KEY, MODEL, Running, assert_chunk, assert_completion, assert_error, call, complete, sse_data,
    wait_for,
};
use hermes_core::Message;
use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};

fn user(text: &str) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": text}]})
}

fn slow(pieces: usize, delay_ms: u64) -> Reply {
    Reply::SlowText {
        pieces: (0..pieces).map(|i| format!("p{i} ")).collect(),
        delay: Duration::from_millis(delay_ms),
    }
}

#[test]
fn health_models_and_the_key() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let run = Running::start(&provider, |_| {});
    let health = call("GET", &run.url("/v1/health"), None, None, &[]);
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");

    let models = call("GET", &run.url("/v1/models"), Some(KEY), None, &[]);
    assert_eq!(models.status, 200, "{}", models.body);
    let m = models.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL);
    assert_eq!(m["data"][0]["object"], "model");
    let one = call(
        "GET",
        &run.url("/v1/models/hermes-agent"),
        Some(KEY),
        None,
        &[],
    );
    assert_eq!(one.json()["id"], MODEL);

    // No key, a wrong key, the key with its last byte changed, an empty one.
    let near = format!("{}X", &KEY[..KEY.len() - 1]);
    for key in [None, Some("sk-wrong"), Some(near.as_str()), Some("")] {
        let a = call("GET", &run.url("/v1/models"), key, None, &[]);
        assert_error(&a, 401, Some("invalid_api_key"));
    }
    let basic = format!("Basic {KEY}");
    let a = call(
        "GET",
        &run.url("/v1/models"),
        None,
        None,
        &[("authorization", &basic)],
    );
    assert_error(&a, 401, Some("invalid_api_key"));
    let unauth = call(
        "POST",
        &run.url("/v1/chat/completions"),
        Some("sk-wrong"),
        Some(user("hi").to_string().as_bytes()),
        &[],
    );
    assert_error(&unauth, 401, Some("invalid_api_key"));
    let nowhere = call("GET", &run.url("/v1/nothing"), Some(KEY), None, &[]);
    assert_error(&nowhere, 404, None);
    assert!(
        provider.requests().is_empty(),
        "nothing unauthorised reached the model"
    );
}

#[test]
fn a_completion_runs_the_agent_with_its_tools_and_returns_only_the_answer() {
    let provider = FakeProvider::start(vec![
        Reply::tool(
            "call_1",
            "todo",
            r#"{"todos":[{"id":"1","content":"secret-plan-step","status":"pending"}]}"#,
        ),
        Reply::text("All planned."),
    ])
    .unwrap();
    let run = Running::start(&provider, |_| {});
    let body = json!({"model": MODEL, "messages": [
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "plan it"}]},
    ]});
    let a = complete(&run, &body, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_completion(&v);
    assert_eq!(v["model"], MODEL);
    assert_eq!(v["choices"][0]["message"]["content"], "All planned.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0, "{v}");
    for leak in ["todo", "call_1", "secret-plan-step"] {
        assert!(!a.body.contains(leak), "tool activity leaked: {}", a.body);
    }
    // The provider saw the client's conversation under the agent's prompt
    // with the client's system message added, then the tool round.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let msgs = requests[0]["messages"].as_array().unwrap();
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(system.ends_with("Answer in English."), "{system}");
    assert!(
        system.len() > "Answer in English.".len() + 20,
        "the agent's own prompt is kept"
    );
    let texts: Vec<&str> = msgs[1..]
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(texts, ["hi", "hello", "plan it"]);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    // The run is a stored session, tool call and result included.
    let id = a.header("x-hermes-session-id").unwrap().to_owned();
    let stored = run.store.lock().unwrap().load_transcript(&id).unwrap();
    assert!(
        stored
            .iter()
            .any(|e| matches!(&e.message, Message::Tool { .. })),
        "{stored:?}"
    );
    assert!(matches!(
        &stored.last().unwrap().message,
        Message::Assistant { content: Some(c), .. } if c == "All planned."
    ));
}

#[test]
fn a_stream_is_valid_chunks_then_done_with_usage_and_no_tool_activity() {
    let provider = FakeProvider::start(vec![
        Reply::tool("call_9", "todo", r#"{"todos":[]}"#),
        Reply::SlowText {
            pieces: vec!["Hel".into(), "lo".into(), " there".into()],
            delay: Duration::from_millis(20),
        },
    ])
    .unwrap();
    let run = Running::start(&provider, |_| {});
    let mut body = user("stream please");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let a = complete(&run, &body, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = sse_data(&a.body);
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        a.body
    );
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let mut text = String::new();
    for c in &chunks {
        assert_chunk(c);
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    assert_eq!(text, "Hello there");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0].get("finish_reason"))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(
        last["usage"]["completion_tokens"].as_u64().is_some(),
        "{last}"
    );
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one id per stream");
    for leak in ["todo", "call_9"] {
        assert!(!a.body.contains(leak), "tool activity leaked: {}", a.body);
    }
    // Without include_usage: no usage chunk and no usage key.
    provider.push(Reply::text("short"));
    let mut body = user("again");
    body["stream"] = json!(true);
    let a = complete(&run, &body, &[]);
    assert!(!a.body.contains("usage"), "{}", a.body);
    assert!(a.body.ends_with("data: [DONE]\n\n"), "{}", a.body);
}

#[test]
fn bad_requests_are_refused_before_any_model_call() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let run = Running::start(&provider, |c| {
        c.max_body_bytes = 4096;
        c.max_messages = 3;
    });
    let post = |body: &[u8]| {
        call(
            "POST",
            &run.url("/v1/chat/completions"),
            Some(KEY),
            Some(body),
            &[],
        )
    };
    for (body, needle) in [
        ("{not json", "not valid JSON"),
        (r#"{"model":"hermes-agent","messages":[]}"#, "at least one"),
        (r#"{"model":"hermes-agent","messages":"hi"}"#, "array"),
        (
            r#"{"model":"hermes-agent","messages":[{"role":"user","content":7}]}"#,
            "messages[0].content",
        ),
        (
            r#"{"model":"hermes-agent","stream":"yes","messages":[{"role":"user","content":"x"}]}"#,
            "'stream'",
        ),
        (
            r#"{"model":"hermes-agent","messages":[{"role":"user","content":"1"},{"role":"user","content":"2"},{"role":"user","content":"3"},{"role":"user","content":"4"}]}"#,
            "at most 3",
        ),
    ] {
        let message = assert_error(&post(body.as_bytes()), 400, None);
        assert!(message.contains(needle), "{body}: {message}");
    }
    let unknown = post(br#"{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}"#);
    let message = assert_error(&unknown, 404, Some("model_not_found"));
    assert!(message.contains("gpt-4o"), "{message}");
    let big = json!({"model": MODEL, "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    assert_error(
        &post(big.to_string().as_bytes()),
        413,
        Some("request_too_large"),
    );
    let wrong_method = call(
        "GET",
        &run.url("/v1/chat/completions"),
        Some(KEY),
        None,
        &[],
    );
    assert_error(&wrong_method, 405, None);
    assert!(provider.requests().is_empty(), "{:?}", provider.requests());
}

#[test]
fn at_the_concurrency_limit_a_request_gets_429() {
    let provider = FakeProvider::start(vec![slow(8, 150), Reply::text("after")]).unwrap();
    let run = Running::start(&provider, |c| c.max_concurrent = 1);
    let url = run.url("/v1/chat/completions");
    let first = std::thread::spawn(move || {
        call(
            "POST",
            &url,
            Some(KEY),
            Some(user("slow").to_string().as_bytes()),
            &[],
        )
    });
    assert!(wait_for(Duration::from_secs(10), || !provider
        .requests()
        .is_empty()));
    let busy = complete(&run, &user("me too"), &[]);
    let message = assert_error(&busy, 429, Some("rate_limit_exceeded"));
    assert!(message.contains("API_SERVER_MAX_CONCURRENT"), "{message}");
    let first = first.join().unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        provider.requests().len(),
        1,
        "the refused request made no call"
    );
    let after = complete(&run, &user("now"), &[]);
    assert_eq!(after.json()["choices"][0]["message"]["content"], "after");
}

/// Sends a completion over a raw socket, waits until the provider has it,
/// then hangs up; the run must stop long before the provider's answer ends
/// (the one run slot is free again).
fn hang_up_and_check_interrupted(stream: bool) {
    // 60 pieces, 200 ms apart: 12 s if nobody interrupts.
    let provider = FakeProvider::start(vec![slow(60, 200)]).unwrap();
    let run = Running::start(&provider, |c| c.max_concurrent = 1);
    let mut body = user("long one");
    body["stream"] = json!(stream);
    let body = body.to_string();
    let addr = run.base.trim_start_matches("http://").to_owned();
    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    assert!(wait_for(Duration::from_secs(10), || !provider
        .requests()
        .is_empty()));
    if stream {
        // The head and the first chunks arrive before the hang-up.
        let mut buf = [0u8; 512];
        let n = conn.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    }
    let hung_up = Instant::now();
    drop(conn);
    provider.push(Reply::text("next"));
    let freed = wait_for(Duration::from_secs(6), || {
        let a = complete(&run, &user("next"), &[]);
        a.status == 200
    });
    assert!(freed, "the disconnected client's run kept its slot");
    assert!(
        hung_up.elapsed() < Duration::from_secs(8),
        "{:?}",
        hung_up.elapsed()
    );
}

#[test]
fn a_client_that_hangs_up_interrupts_its_run() {
    hang_up_and_check_interrupted(false);
}

#[test]
fn a_streaming_client_that_hangs_up_interrupts_its_run() {
    hang_up_and_check_interrupted(true);
}

#[test]
fn an_upstream_failure_is_502_with_its_message() {
    let provider = FakeProvider::start(vec![
        Reply::Status(400, "upstream says the moon is full".into()),
        Reply::Status(400, "upstream says the moon is full".into()),
    ])
    .unwrap();
    let run = Running::start(&provider, |_| {});
    let a = complete(&run, &user("hi"), &[]);
    let message = assert_error(&a, 502, Some("upstream_error"));
    assert!(message.contains("the moon is full"), "{message}");
    let mut body = user("hi");
    body["stream"] = json!(true);
    let a = complete(&run, &body, &[]);
    let message = assert_error(&a, 502, Some("upstream_error"));
    assert!(message.contains("the moon is full"), "{message}");
}

#[test]
fn the_session_header_continues_a_stored_session() {
    let provider = FakeProvider::start(vec![
        Reply::text("Noted: blue."),
        Reply::text("You said blue."),
    ])
    .unwrap();
    let run = Running::start(&provider, |_| {});
    let first = complete(&run, &user("my colour is blue"), &[]);
    assert_eq!(first.status, 200, "{}", first.body);
    let id = first.header("x-hermes-session-id").unwrap().to_owned();
    let second = complete(
        &run,
        &user("what is my colour?"),
        &[("x-hermes-session-id", &id)],
    );
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.header("x-hermes-session-id"), Some(id.as_str()));
    let requests = provider.requests();
    let texts: Vec<&str> = requests[1]["messages"].as_array().unwrap()[1..]
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        texts,
        ["my colour is blue", "Noted: blue.", "what is my colour?"]
    );
    assert_eq!(
        run.store
            .lock()
            .unwrap()
            .load_transcript(&id)
            .unwrap()
            .len(),
        4
    );
    let unknown = complete(&run, &user("x"), &[("x-hermes-session-id", "nope")]);
    assert_error(&unknown, 404, Some("session_not_found"));
    assert_eq!(provider.requests().len(), 2);

    // One run per session: a second request on a busy session is 409.
    provider.push(slow(6, 150));
    let url = run.url("/v1/chat/completions");
    let header = id.clone();
    let busy_run = std::thread::spawn(move || {
        call(
            "POST",
            &url,
            Some(KEY),
            Some(user("slowly").to_string().as_bytes()),
            &[("x-hermes-session-id", &header)],
        )
    });
    assert!(wait_for(Duration::from_secs(10), || provider
        .requests()
        .len()
        == 3));
    let second = complete(&run, &user("me too"), &[("x-hermes-session-id", &id)]);
    assert_error(&second, 409, Some("session_busy"));
    assert_eq!(busy_run.join().unwrap().status, 200);
}

#[test]
fn cors_answers_only_the_configured_origins() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let run = Running::start(&provider, |c| {
        c.cors_origins = vec!["http://ui.example:3000".into()];
    });
    let pre = call(
        "OPTIONS",
        &run.url("/v1/chat/completions"),
        None,
        None,
        &[
            ("origin", "http://ui.example:3000"),
            ("access-control-request-method", "POST"),
        ],
    );
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    assert!(
        pre.header("access-control-allow-headers")
            .unwrap()
            .contains("authorization")
    );
    let models = call(
        "GET",
        &run.url("/v1/models"),
        Some(KEY),
        None,
        &[("origin", "http://ui.example:3000")],
    );
    assert_eq!(
        models.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    let other = call(
        "GET",
        &run.url("/v1/models"),
        Some(KEY),
        None,
        &[("origin", "http://evil.example")],
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
}

#[test]
fn the_api_server_alone_is_a_valid_gateway_and_needs_its_key() {
    use hermes_gateway::app::{check_config, run_gateway};
    use hermes_runtime::config::{Environment, Overrides, load};
    let dir = tempfile::tempdir().unwrap();
    let settings = |vars: &[(&str, &str)]| {
        let mut pairs: Vec<(String, String)> = vec![
            ("HERMES_HOME".into(), dir.path().display().to_string()),
            ("HERMES_BASE_URL".into(), "http://127.0.0.1:9/v1".into()),
            ("HERMES_MODEL".into(), "m".into()),
            ("HERMES_TOOLSETS".into(), "todo".into()),
        ];
        pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let overrides = Overrides {
            workdir: Some(dir.path().to_owned()),
            ..Overrides::default()
        };
        load(&overrides, &Environment::from_pairs(pairs)).unwrap()
    };
    let alone = check_config(&settings(&[
        ("API_SERVER_ENABLED", "true"),
        ("API_SERVER_KEY", KEY),
    ]))
    .unwrap();
    assert_eq!(alone.platforms, ["api_server"]);
    let shown = alone.to_string();
    assert!(
        shown.contains("api_server") && !shown.contains("nobody is allowed"),
        "{shown}"
    );
    let err = run_gateway(&settings(&[("API_SERVER_ENABLED", "true")]), true).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("API_SERVER_KEY"), "{err}");
    let err = run_gateway(
        &settings(&[
            ("API_SERVER_ENABLED", "true"),
            ("API_SERVER_KEY", KEY),
            ("API_SERVER_PORT", "eighty"),
        ]),
        true,
    )
    .unwrap_err();
    assert!(err.to_string().contains("API_SERVER_PORT"), "{err}");
    assert!(!err.to_string().contains(KEY), "{err}");
    // Disabled, it is no platform at all.
    let err = check_config(&settings(&[("API_SERVER_KEY", KEY)])).unwrap_err();
    assert!(err.to_string().contains("API_SERVER_ENABLED"), "{err}");
}

/// A run's slot is free before its answer reaches the client: one client
/// sending request after request at the limit of one run never gets 429
/// (found by the load example: the slot used to be released after the
/// answer was handed over).
#[test]
fn back_to_back_requests_at_a_limit_of_one_are_never_refused() {
    let provider = FakeProvider::start(vec![]).unwrap();
    let run = Running::start(&provider, |c| c.max_concurrent = 1);
    for i in 0..40 {
        let a = complete(&run, &user(&format!("n{i}")), &[]);
        assert_eq!(a.status, 200, "request {i}: {}", a.body);
        let mut body = user("s");
        body["stream"] = json!(true);
        let a = complete(&run, &body, &[]);
        assert_eq!(a.status, 200, "stream {i}: {}", a.body);
    }
}

/// Issue 44: a request has no chat user, so its model calls count against
/// `[limits] unattended_account` (the key's holder; the owner by default),
/// charged with the stored answer; once that account reached its cap the
/// next request is `429` with the line saying when it resets, and no
/// model call is made.
#[test]
fn requests_are_charged_to_the_keys_account_and_refused_at_its_cap() {
    let provider = FakeProvider::start(vec![Reply::text("One."), Reply::text("Two.")]).unwrap();
    let run = Running::start(&provider, |config| {
        let file: toml::Table =
            "[limits]\nuser_day_tokens = 1\ntimezone = \"UTC\"\nunattended_account = \"telegram:99\"\n"
                .parse()
                .unwrap();
        config.limits =
            hermes_runtime::spending::SpendingLimits::from_config(&file, |_| None, None, None)
                .unwrap();
    });
    let a = complete(&run, &user("hi"), &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    let tokens = a.json()["usage"]["total_tokens"].as_u64().unwrap();
    assert!(tokens > 0);
    let day = hermes_runtime::spending::SpendingLimits::default()
        .periods(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        )
        .day_key();
    let account = |who: &str| {
        run.store
            .lock()
            .unwrap()
            .kv_get(&hermes_runtime::spending::account_key("tok", &day, who))
            .unwrap()
    };
    assert_eq!(
        account("telegram:99"),
        Some(tokens.to_string()),
        "charged to the key's account"
    );
    assert_eq!(account("api_server:api"), None, "not to a made-up user");
    let refused = complete(&run, &user("again"), &[]);
    let message = assert_error(&refused, 429, Some("usage_limit_reached"));
    assert!(
        message.contains("daily usage limit") && message.contains("00:00 (UTC)"),
        "{message}"
    );
    assert_eq!(provider.requests().len(), 1, "no model call when capped");
}
