//! The client's answers to providers that are not there in spirit: one that
//! accepts the connection and never answers (bounded by the first-byte and
//! call timeouts, not by every attempt's read timeout), one that sends a web
//! page instead of JSON, and a base URL that carries credentials (which no
//! message may repeat). Against `support::ScriptedServer` on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use hermes_core::{
    ChatRequest, Completion, LedgerEntry, Message, Model, ModelError, ModelErrorKind, NullSink,
};
use hermes_runtime::client::{ClientError, ClientOptions, OpenAiClient};
use support::{Reply, Rules, ScriptedServer, Step, closed_port, within};

const HANG_GUARD: Duration = Duration::from_secs(90);

fn options(base_url: String) -> ClientOptions {
    ClientOptions {
        base_url,
        model: "test-model".into(),
        backoff_base: Duration::from_millis(5),
        ..ClientOptions::default()
    }
}

fn ask(client: OpenAiClient) -> Result<Completion, ModelError> {
    within(HANG_GUARD, move || {
        let history = vec![LedgerEntry::new(Message::user("Say hello"))];
        let request = ChatRequest {
            system_prompt: "You are a test.",
            messages: &history,
            tools: &[],
            tool_choice: hermes_core::ToolChoice::Auto,
        };
        client.complete(&request, &mut NullSink)
    })
}

/// Runs `ask` and returns the error with how long the call took.
fn ask_failing(client: OpenAiClient) -> (ModelError, Duration) {
    let started = Instant::now();
    let err = ask(client).unwrap_err();
    (err, started.elapsed())
}

#[test]
fn defaults_bound_a_silent_provider_to_90_seconds() {
    let d = ClientOptions::default();
    assert_eq!(d.first_byte_timeout, Duration::from_secs(30));
    assert_eq!(d.call_timeout, Duration::from_secs(90));
    // Three attempts of 30 s fit the call timeout; the 120 s read timeout
    // no longer decides how long a silent provider is waited for.
    assert!(d.first_byte_timeout * d.max_attempts <= d.call_timeout);
}

#[test]
fn a_provider_that_never_answers_fails_within_the_call_timeout() {
    let server = ScriptedServer::openai(
        None,
        (0..10)
            .map(|_| Reply::Hang(Duration::from_secs(60)))
            .collect(),
    );
    let client = OpenAiClient::new(ClientOptions {
        first_byte_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_millis(800),
        max_attempts: 10,
        // The read timeout alone would have waited a minute per attempt.
        idle_read_timeout: Duration::from_secs(60),
        ..options(server.base_url())
    })
    .unwrap();
    let (err, took) = ask_failing(client);
    assert_eq!(err.kind, ModelErrorKind::Timeout, "{err:?}");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    assert!(err.message.contains("call timeout"), "{}", err.message);
    // Retried on the first-byte timeout until the call's time ran out.
    let attempts = server.request_count();
    assert!((2..=4).contains(&attempts), "{attempts} attempts");
}

#[test]
fn each_attempt_waits_only_the_first_byte_timeout_then_retries() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::Hang(Duration::from_secs(60)),
            Reply::text_stream(&["second attempt"]),
        ],
    );
    let client = OpenAiClient::new(ClientOptions {
        first_byte_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_secs(30),
        ..options(server.base_url())
    })
    .unwrap();
    let started = Instant::now();
    let completion = ask(client).unwrap();
    assert_eq!(completion.content.as_deref(), Some("second attempt"));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(server.request_count(), 2);
}

#[test]
fn headers_then_silence_is_bounded_by_the_call_timeout() {
    let server = ScriptedServer::openai(
        None,
        (0..5)
            .map(|_| Reply::stream(vec![Step::Sleep(Duration::from_secs(60))]))
            .collect(),
    );
    let client = OpenAiClient::new(ClientOptions {
        first_byte_timeout: Duration::from_millis(200),
        call_timeout: Duration::from_millis(700),
        max_attempts: 5,
        idle_read_timeout: Duration::from_secs(60),
        ..options(server.base_url())
    })
    .unwrap();
    let (err, took) = ask_failing(client);
    assert_eq!(err.kind, ModelErrorKind::Timeout, "{err:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(server.request_count(), 1, "no time was left for a retry");
}

#[test]
fn a_healthy_long_stream_is_not_cut_by_either_timeout() {
    // 2 s of answer, a piece every 100 ms: far longer than both deadlines.
    let pieces: Vec<String> = (0..20).map(|i| format!("p{i} ")).collect();
    let mut steps = vec![Step::data(support::chunk_json(
        serde_json::json!({"role": "assistant", "content": ""}),
        None,
    ))];
    for p in &pieces {
        steps.push(Step::Sleep(Duration::from_millis(100)));
        steps.push(Step::data(support::chunk_json(
            serde_json::json!({"content": p}),
            None,
        )));
    }
    steps.push(Step::data(support::chunk_json(
        serde_json::json!({}),
        Some("stop"),
    )));
    steps.push(Step::done());
    let server = ScriptedServer::openai(None, vec![Reply::stream(steps)]);
    let client = OpenAiClient::new(ClientOptions {
        first_byte_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_millis(500),
        idle_read_timeout: Duration::from_secs(5),
        ..options(server.base_url())
    })
    .unwrap();
    let completion = ask(client).unwrap();
    assert_eq!(completion.content.unwrap(), pieces.concat());
    assert_eq!(server.request_count(), 1);
    server.assert_clean();
}

#[test]
fn a_retry_after_beyond_the_call_deadline_gives_up_at_once() {
    let server = ScriptedServer::openai(
        None,
        vec![Reply::error(503, "overloaded").with_header("Retry-After", "30")],
    );
    let client = OpenAiClient::new(ClientOptions {
        call_timeout: Duration::from_secs(2),
        ..options(server.base_url())
    })
    .unwrap();
    let (err, took) = ask_failing(client);
    assert_eq!(err.kind, ModelErrorKind::Status(503));
    assert!(took < Duration::from_secs(2), "did not sleep: {took:?}");
    assert!(err.message.contains("call timeout"), "{}", err.message);
    assert_eq!(server.request_count(), 1);
}

const HTML_PAGE: &str = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\
                         <body><h1>Welcome to nginx!</h1></body></html>\n";

fn html(status: u16) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Content-Type".into(), "text/html; charset=utf-8".into())],
        body: HTML_PAGE.into(),
    }
}

#[test]
fn an_html_page_with_status_200_says_wrong_base_url() {
    for stream in [true, false] {
        // With and without an HTML content type: some servers send a page
        // labelled as JSON or as an event stream.
        for content_type in ["text/html", "application/json", "text/event-stream"] {
            let server = ScriptedServer::openai(
                None,
                vec![Reply::Full {
                    status: 200,
                    headers: vec![("Content-Type".into(), content_type.into())],
                    body: HTML_PAGE.into(),
                }],
            );
            let client = OpenAiClient::new(ClientOptions {
                stream,
                ..options(server.base_url())
            })
            .unwrap();
            let (err, _) = ask_failing(client);
            assert!(
                err.message
                    .contains("the provider answered with HTML, not JSON — wrong base URL?"),
                "stream={stream} {content_type}: {}",
                err.message
            );
            assert!(err.message.contains("Welcome to nginx!"), "{}", err.message);
            assert_eq!(err.kind, ModelErrorKind::Protocol);
            assert_eq!(server.request_count(), 1, "an HTML page is not retried");
        }
    }
}

#[test]
fn html_error_pages_and_model_lists_are_named_too() {
    let server = ScriptedServer::openai(None, vec![html(404)]);
    let client = OpenAiClient::new(options(server.base_url())).unwrap();
    let (err, _) = ask_failing(client);
    assert_eq!(err.kind, ModelErrorKind::Status(404));
    assert!(err.message.contains("HTML, not JSON"), "{}", err.message);
    assert!(
        !err.message.contains("<body>"),
        "the page is summarised, not quoted: {}",
        err.message
    );

    let server = ScriptedServer::openai(None, vec![html(200)]);
    let client = OpenAiClient::new(options(server.base_url())).unwrap();
    let err = within(HANG_GUARD, move || client.list_models()).unwrap_err();
    assert!(
        err.to_string().contains("HTML, not JSON — wrong base URL?"),
        "{err}"
    );
}

/// A server that requires the Basic credentials of `proxyuser:hunter2pass`.
fn basic_auth_server(script: Vec<Reply>) -> (ScriptedServer, String) {
    let server = ScriptedServer::start(
        Rules {
            prefix: "/v1".into(),
            api_key: None,
            basic_auth: Some("cHJveHl1c2VyOmh1bnRlcjJwYXNz".into()),
        },
        script,
    );
    let url = format!("http://proxyuser:hunter2pass@{}/v1", server.addr());
    (server, url)
}

fn assert_masked(text: &str) {
    assert!(
        !text.contains("hunter2pass") && !text.contains("proxyuser"),
        "credentials leaked: {text}"
    );
}

#[test]
fn credentials_in_the_base_url_are_sent_but_never_shown() {
    // They work: the request carries them as Basic auth.
    let (server, url) = basic_auth_server(vec![Reply::text_stream(&["hi"])]);
    let client = OpenAiClient::new(options(url.clone())).unwrap();
    assert_masked(client.chat_url());
    assert_masked(&format!("{client:?}"));
    assert_masked(&format!("{:?}", client.options()));
    assert_eq!(ask(client).unwrap().content.as_deref(), Some("hi"));
    server.assert_clean();

    // Every kind of failure names the URL, masked.
    let (server, url) = basic_auth_server(vec![
        Reply::error(500, "boom"),
        Reply::error(500, "boom"),
        Reply::error(401, "bad credentials"),
        html(200),
        Reply::Hang(Duration::from_secs(60)),
    ]);
    let shown = format!("http://***@{}/v1/chat/completions", server.addr());
    let client = OpenAiClient::new(ClientOptions {
        max_attempts: 2,
        first_byte_timeout: Duration::from_millis(300),
        call_timeout: Duration::from_millis(400),
        ..options(url.clone())
    })
    .unwrap();
    for _ in 0..4 {
        let (err, _) = ask_failing(client.clone());
        assert_masked(&err.message);
        assert!(err.message.contains(&shown), "{}", err.message);
    }
    let port = closed_port();
    let refused = OpenAiClient::new(ClientOptions {
        max_attempts: 1,
        ..options(format!("http://proxyuser:hunter2pass@127.0.0.1:{port}/v1"))
    })
    .unwrap();
    let (err, _) = ask_failing(refused);
    assert_masked(&err.message);
    assert!(
        err.message.contains("http://***@127.0.0.1"),
        "{}",
        err.message
    );
    let err = within(HANG_GUARD, {
        let client = client.clone();
        move || client.list_models()
    })
    .unwrap_err();
    assert_masked(&err.to_string());

    let bad = OpenAiClient::new(ClientOptions {
        base_url: "ftp://proxyuser:hunter2pass@host/v1".into(),
        ..ClientOptions::default()
    })
    .unwrap_err();
    assert!(matches!(bad, ClientError::Config(_)));
    assert_masked(&bad.to_string());
}
