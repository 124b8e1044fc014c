//! The OpenAI client against our own scripted loopback server, which checks
//! the protocol rules on every request (see `support::ScriptedServer`). This
//! covers what an emulator cannot: dropped connections, malformed chunks,
//! slow streams, exact attempt counts, refused connections.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, Flow, LedgerEntry, Message, Model, ModelError,
    ModelErrorKind, StopReason, StreamSink, Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
    Usage,
};
use hermes_runtime::client::{ClientError, ClientOptions, OpenAiClient};
use support::{Reply, ScriptedServer, Step, chunk_json, closed_port, within};

const HANG_GUARD: Duration = Duration::from_secs(90);

fn options(base_url: String, key: Option<&str>) -> ClientOptions {
    ClientOptions {
        base_url,
        api_key: key.map(str::to_owned),
        model: "test-model".into(),
        backoff_base: Duration::from_millis(5),
        connect_timeout: Duration::from_secs(10),
        idle_read_timeout: Duration::from_secs(60),
        ..ClientOptions::default()
    }
}

/// Records what the sink was shown; stops when `stop` is set.
#[derive(Clone, Default)]
struct RecordingSink {
    texts: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl RecordingSink {
    fn text(&self) -> String {
        self.texts.lock().unwrap().concat()
    }
    fn flow(&self) -> Flow {
        if self.stop.load(Ordering::SeqCst) {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl StreamSink for RecordingSink {
    fn on_text(&mut self, text: &str) -> Flow {
        self.texts.lock().unwrap().push(text.to_owned());
        self.flow()
    }
    fn on_progress(&mut self) -> Flow {
        self.flow()
    }
}

fn ask(client: &OpenAiClient, sink: &mut dyn StreamSink) -> Result<Completion, ModelError> {
    let history = vec![LedgerEntry::new(Message::user("Say hello"))];
    let request = ChatRequest {
        system_prompt: "You are a test.",
        messages: &history,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    client.complete(&request, sink)
}

/// Runs `ask` on a thread under the hang guard.
fn ask_guarded(client: OpenAiClient, sink: RecordingSink) -> Result<Completion, ModelError> {
    within(HANG_GUARD, move || {
        let mut sink = sink;
        ask(&client, &mut sink)
    })
}

#[test]
fn streams_text_and_usage_with_bearer_auth() {
    let server = ScriptedServer::openai(
        Some("sk-test-123"),
        vec![Reply::text_stream(&["Hel", "lo, ", "world"])],
    );
    let client = OpenAiClient::new(options(server.base_url(), Some("sk-test-123"))).unwrap();
    let sink = RecordingSink::default();
    let completion = ask_guarded(client, sink.clone()).unwrap();

    assert_eq!(completion.content.as_deref(), Some("Hello, world"));
    assert_eq!(completion.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        completion.usage,
        Some(Usage {
            prompt_tokens: 11,
            completion_tokens: 7,
            total_tokens: 18,
            ..Usage::default()
        })
    );
    assert_eq!(sink.text(), "Hello, world");
    assert!(
        sink.texts.lock().unwrap().len() >= 3,
        "text arrived in pieces"
    );

    server.assert_clean();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["messages"][0]["content"], "You are a test.");
    assert_eq!(body["messages"][1]["role"], "user");
}

#[test]
fn non_streaming_without_key_sends_no_auth_and_shows_text_once() {
    let server = ScriptedServer::openai(None, vec![Reply::text_body("Just one body.")]);
    let client = OpenAiClient::new(ClientOptions {
        stream: false,
        max_tokens: Some(64),
        temperature: Some(0.5),
        ..options(server.base_url(), None)
    })
    .unwrap();
    let sink = RecordingSink::default();
    let completion = ask_guarded(client, sink.clone()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("Just one body."));
    assert_eq!(completion.usage.map(|u| u.total_tokens), Some(8));
    assert_eq!(
        *sink.texts.lock().unwrap(),
        vec!["Just one body.".to_owned()]
    );
    server.assert_clean();
    let body = server.requests()[0].json();
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["temperature"], 0.5);
}

#[test]
fn an_empty_api_key_counts_as_no_key() {
    let server = ScriptedServer::openai(None, vec![Reply::text_stream(&["ok"])]);
    let client = OpenAiClient::new(options(server.base_url(), Some("  "))).unwrap();
    assert!(ask_guarded(client, RecordingSink::default()).is_ok());
    server.assert_clean();
}

#[test]
fn a_trailing_slash_in_the_base_url_is_fine() {
    let server = ScriptedServer::openai(None, vec![Reply::text_stream(&["ok"])]);
    let client = OpenAiClient::new(options(format!("{}/", server.base_url()), None)).unwrap();
    assert_eq!(
        ask_guarded(client, RecordingSink::default())
            .unwrap()
            .content
            .as_deref(),
        Some("ok")
    );
    server.assert_clean();
}

#[test]
fn a_server_that_ignores_stream_true_still_works() {
    let server = ScriptedServer::openai(None, vec![Reply::text_body("plain JSON anyway")]);
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let sink = RecordingSink::default();
    let completion = ask_guarded(client, sink.clone()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("plain JSON anyway"));
    assert_eq!(sink.text(), "plain JSON anyway");
    server.assert_clean();
}

#[test]
fn unauthorized_is_not_retried_and_names_status_and_provider_message() {
    let server = ScriptedServer::openai(
        Some("sk-wrong"),
        vec![Reply::error(401, "Incorrect API key provided: sk-wr****")],
    );
    let client = OpenAiClient::new(options(server.base_url(), Some("sk-wrong"))).unwrap();
    let err = ask_guarded(client, RecordingSink::default()).unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Status(401));
    assert!(err.message.contains("HTTP 401"), "{}", err.message);
    assert!(
        err.message.contains("Incorrect API key provided"),
        "{}",
        err.message
    );
    assert!(err.message.contains("check the API key"), "{}", err.message);
    assert_eq!(server.request_count(), 1, "401 must not be retried");
    server.assert_clean();
}

#[test]
fn other_client_errors_are_not_retried() {
    for status in [400u16, 403, 404, 422] {
        let server = ScriptedServer::openai(None, vec![Reply::error(status, "nope")]);
        let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
        let err = ask_guarded(client, RecordingSink::default()).unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::Status(status));
        assert_eq!(server.request_count(), 1, "{status} must not be retried");
        server.assert_clean();
    }
}

#[test]
fn service_unavailable_is_retried_then_succeeds() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::error(503, "overloaded"),
            Reply::error(502, "bad gateway"),
            Reply::text_stream(&["third time lucky"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let completion = ask_guarded(client, RecordingSink::default()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("third time lucky"));
    assert_eq!(server.request_count(), 3);
    server.assert_clean();
}

#[test]
fn retries_are_bounded_and_the_final_error_says_so() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::error(503, "overloaded 1"),
            Reply::error(503, "overloaded 2"),
            Reply::error(503, "still overloaded"),
            Reply::text_stream(&["never reached"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let err = ask_guarded(client, RecordingSink::default()).unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Status(503));
    assert!(err.message.contains("still overloaded"), "{}", err.message);
    assert!(err.message.contains("3 attempts"), "{}", err.message);
    assert_eq!(server.request_count(), 3);
    assert_eq!(server.remaining_script(), 1);
}

#[test]
fn retry_after_seconds_is_honoured() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::error(429, "slow down").with_header("Retry-After", "1"),
            Reply::text_stream(&["ok"]),
        ],
    );
    // A tiny backoff base: any wait near one second comes from Retry-After.
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let completion = ask_guarded(client, RecordingSink::default()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("ok"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Lower bound only (sleeping never ends early); no upper bound on speed.
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_millis(900), "waited only {gap:?}");
    server.assert_clean();
}

#[test]
fn retry_after_is_capped() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::error(429, "come back in an hour").with_header("Retry-After", "3600"),
            Reply::text_stream(&["ok"]),
        ],
    );
    let client = OpenAiClient::new(ClientOptions {
        max_retry_after: Duration::from_millis(50),
        ..options(server.base_url(), None)
    })
    .unwrap();
    // Without the cap this would wait an hour; the hang guard catches that.
    let completion = ask_guarded(client, RecordingSink::default()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("ok"));
    assert_eq!(server.request_count(), 2);
}

#[test]
fn a_runaway_stream_is_cut_off_at_the_body_cap_and_keeps_the_shown_text() {
    // Found while capping every body read from the network: a stream was
    // bounded per line and event, but not in total, so a server that keeps
    // sending (keep-alives, or text) kept the client reading for ever.
    let keep_alive = format!(": {}\n", "k".repeat(64 * 1024 - 3));
    let server = ScriptedServer::openai(
        None,
        vec![Reply::stream(vec![
            Step::data(chunk_json(serde_json::json!({"content": "Runaway"}), None)),
            Step::Repeat(keep_alive, 1100),
            Step::done(),
        ])],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let sink = RecordingSink::default();
    let err = ask_guarded(client, sink.clone()).unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Protocol, "{err:?}");
    assert!(err.message.contains("exceeds 64 MiB"), "{}", err.message);
    assert_eq!(err.partial_text.as_deref(), Some("Runaway"));
    assert_eq!(server.request_count(), 1, "not retried");
}

#[test]
fn a_stream_dropped_after_text_is_not_retried_and_keeps_the_partial_text() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::stream(vec![
                Step::data(chunk_json(serde_json::json!({"content": "Half an "}), None)),
                Step::data(chunk_json(serde_json::json!({"content": "answer"}), None)),
                Step::Drop,
            ]),
            Reply::text_stream(&["a different answer"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let sink = RecordingSink::default();
    let err = ask_guarded(client, sink.clone()).unwrap_err();
    assert_eq!(err.partial_text.as_deref(), Some("Half an answer"));
    assert_eq!(sink.text(), "Half an answer");
    assert!(
        matches!(
            err.kind,
            ModelErrorKind::Transport | ModelErrorKind::Protocol
        ),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 1, "shown text must not be replayed");
    server.assert_clean();
}

#[test]
fn a_stream_dropped_before_any_text_is_retried() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::stream(vec![
                Step::data(chunk_json(serde_json::json!({"role": "assistant"}), None)),
                Step::Drop,
            ]),
            Reply::text_stream(&["second try"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let completion = ask_guarded(client, RecordingSink::default()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("second try"));
    assert_eq!(server.request_count(), 2);
    server.assert_clean();
}

#[test]
fn a_malformed_chunk_is_a_protocol_error_and_not_retried() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::stream(vec![
                Step::Chunk("data: {\"choices\": [{\"delta\": {\"content\": 42\n\n".into()),
                Step::done(),
            ]),
            Reply::text_stream(&["never"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let err = ask_guarded(client, RecordingSink::default()).unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Protocol);
    assert!(err.message.contains("bad response from"), "{}", err.message);
    assert_eq!(server.request_count(), 1);
}

#[test]
fn a_slow_stream_is_interrupted_through_the_sink_and_returns_the_partial_text() {
    let server = ScriptedServer::openai(
        None,
        vec![Reply::stream(vec![
            Step::data(chunk_json(
                serde_json::json!({"content": "The beginning"}),
                None,
            )),
            Step::Sleep(Duration::from_secs(60)),
            Step::data(chunk_json(
                serde_json::json!({"content": " and the end"}),
                Some("stop"),
            )),
            Step::done(),
        ])],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let sink = RecordingSink::default();
    // The "user" interrupts once the first text is on screen.
    let watcher = sink.clone();
    thread::spawn(move || {
        while watcher.text().is_empty() {
            thread::sleep(Duration::from_millis(5));
        }
        watcher.stop.store(true, Ordering::SeqCst);
    });
    let started = Instant::now();
    let completion = ask_guarded(client, sink.clone()).unwrap();
    let elapsed = started.elapsed();
    assert_eq!(completion.content.as_deref(), Some("The beginning"));
    assert_eq!(completion.finish_reason, None);
    // Generous: the server would have kept us 60 s; the client ticks at 50 ms.
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
    assert_eq!(server.request_count(), 1);
    server.assert_clean();
}

#[test]
fn an_interrupt_while_waiting_for_the_response_head_returns_empty() {
    let server = ScriptedServer::openai(None, vec![Reply::Hang(Duration::from_secs(60))]);
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let sink = RecordingSink::default();
    let stopper = sink.stop.clone();
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        stopper.store(true, Ordering::SeqCst);
    });
    let completion = ask_guarded(client, sink).unwrap();
    // Nothing received; the client still says which model it asked.
    assert_eq!(
        completion,
        Completion {
            model: Some("test-model".into()),
            ..Completion::default()
        }
    );
    assert_eq!(server.request_count(), 1);
}

#[test]
fn an_idle_stream_times_out_and_is_retried() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::stream(vec![Step::Sleep(Duration::from_secs(30))]),
            Reply::text_stream(&["after the stall"]),
        ],
    );
    let client = OpenAiClient::new(ClientOptions {
        idle_read_timeout: Duration::from_millis(300),
        ..options(server.base_url(), None)
    })
    .unwrap();
    let completion = ask_guarded(client, RecordingSink::default()).unwrap();
    assert_eq!(completion.content.as_deref(), Some("after the stall"));
    assert_eq!(server.request_count(), 2);
}

#[test]
fn a_refused_connection_names_the_url_and_what_to_check() {
    let port = closed_port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let client = OpenAiClient::new(ClientOptions {
        max_attempts: 2,
        ..options(base.clone(), None)
    })
    .unwrap();
    let err = ask_guarded(client, RecordingSink::default()).unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Transport, "{err:?}");
    assert!(
        err.message
            .contains(&format!("cannot reach {base}/chat/completions")),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("connection refused"),
        "{}",
        err.message
    );
    assert!(err.message.contains("--base-url"), "{}", err.message);
    assert!(err.message.contains("2 attempts"), "{}", err.message);
}

#[test]
fn list_models_reads_the_ids() {
    let server = ScriptedServer::openai(
        Some("sk-models"),
        vec![Reply::json(
            r#"{"object":"list","data":[{"id":"llama3.2","object":"model"},{"id":"qwen2.5","object":"model"}]}"#,
        )],
    );
    let client = OpenAiClient::new(options(server.base_url(), Some("sk-models"))).unwrap();
    let models = within(HANG_GUARD, move || client.list_models()).unwrap();
    assert_eq!(models, vec!["llama3.2".to_owned(), "qwen2.5".to_owned()]);
    server.assert_clean();
}

#[test]
fn list_models_reports_a_status_error() {
    let server = ScriptedServer::openai(None, vec![Reply::error(404, "no such route")]);
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let err = within(HANG_GUARD, move || client.list_models()).unwrap_err();
    match err {
        ClientError::Model(e) => {
            assert_eq!(e.kind, ModelErrorKind::Status(404));
            assert!(e.message.contains("no such route"), "{}", e.message);
        }
        other => panic!("expected a model error, got {other:?}"),
    }
}

#[test]
fn bad_configuration_is_a_typed_error_and_the_key_is_never_printed() {
    let bad_url = OpenAiClient::new(ClientOptions {
        base_url: "localhost:11434/v1".into(),
        ..ClientOptions::default()
    })
    .unwrap_err();
    assert!(matches!(bad_url, ClientError::Config(ref m) if m.contains("http://")));

    let bad_header = OpenAiClient::new(ClientOptions {
        extra_headers: vec![("X-Title".into(), "two\nlines".into())],
        ..ClientOptions::default()
    })
    .unwrap_err();
    assert!(matches!(bad_header, ClientError::Config(_)));

    let bad_key = OpenAiClient::new(ClientOptions {
        api_key: Some("sk-secret\r\nInjected: yes".into()),
        ..ClientOptions::default()
    })
    .unwrap_err();
    assert!(!bad_key.to_string().contains("sk-secret"), "{bad_key}");

    let opts = ClientOptions {
        api_key: Some("sk-very-secret".into()),
        extra_headers: vec![("X-Token".into(), "header-secret".into())],
        ..ClientOptions::default()
    };
    let client = OpenAiClient::new(opts.clone()).unwrap();
    for printed in [format!("{opts:?}"), format!("{client:?}")] {
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert!(!printed.contains("header-secret"), "{printed}");
    }
}

#[test]
fn defaults_match_the_documented_values() {
    let d = ClientOptions::default();
    assert_eq!(d.base_url, "http://127.0.0.1:11434/v1");
    assert!(d.stream);
    assert_eq!(d.connect_timeout, Duration::from_secs(10));
    assert_eq!(d.idle_read_timeout, Duration::from_secs(120));
    assert_eq!(d.max_attempts, 3);
    assert_eq!(d.backoff_base, Duration::from_millis(500));
    assert_eq!(d.max_retry_after, Duration::from_secs(60));
    let client = OpenAiClient::new(d).unwrap();
    let other = client.with_model("llama3.2");
    assert_eq!(other.options().model, "llama3.2");
    assert_eq!(
        other.chat_url(),
        "http://127.0.0.1:11434/v1/chat/completions"
    );
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<OpenAiClient>();
}

/// A tool for the end-to-end run.
struct Weather {
    spec: ToolSpec,
}

impl Tool for Weather {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let v: serde_json::Value = serde_json::from_str(arguments).unwrap();
        Ok(format!("Sunny in {}", v["city"].as_str().unwrap_or("?")))
    }
}

#[test]
fn an_agent_run_over_http_with_a_streamed_tool_call() {
    let tool_call_stream = Reply::stream(vec![
        Step::data(chunk_json(
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_abc",
                "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
            None,
        )),
        Step::data(chunk_json(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]}),
            None,
        )),
        Step::data(chunk_json(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"Oslo\"}"}}]}),
            None,
        )),
        Step::data(chunk_json(serde_json::json!({}), Some("tool_calls"))),
        Step::done(),
    ]);
    let server = ScriptedServer::openai(
        Some("sk-agent"),
        vec![
            tool_call_stream,
            Reply::text_stream(&["It is ", "sunny in Oslo."]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), Some("sk-agent"))).unwrap();
    let tools = ToolRegistry::new().with(Weather {
        spec: ToolSpec::new(
            "weather",
            "Weather for a city",
            serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
    });
    let agent = Agent::new(Arc::new(client), Arc::new(tools), "You are a weather bot.");
    let outcome = within(HANG_GUARD, move || {
        agent.run_conversation("Weather in Oslo?", Vec::new())
    });
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(outcome.final_text, "It is sunny in Oslo.");
    server.assert_clean();

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].json();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], "You are a weather bot.");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_abc");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\": \"Oslo\"}"
    );
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_abc");
    assert_eq!(messages[3]["content"], "Sunny in Oslo");
    assert_eq!(second["tools"][0]["function"]["name"], "weather");
}

#[test]
fn connections_are_reused_between_calls() {
    let server = ScriptedServer::openai(
        None,
        vec![
            Reply::text_stream(&["one"]),
            Reply::text_stream(&["two"]),
            Reply::text_stream(&["three"]),
        ],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    within(HANG_GUARD, move || {
        for _ in 0..3 {
            ask(&client, &mut RecordingSink::default()).unwrap();
        }
    });
    assert_eq!(server.request_count(), 3);
    assert_eq!(
        server.connection_count(),
        1,
        "the pooled connection is reused"
    );
    server.assert_clean();
}

/// Bytes a server sends after a complete answer make its connection unfit:
/// the pooled connection is probed before it is lent again, so the next
/// request goes out on a new one and gets its own answer. (The probe at
/// the answer's end is skipped: these bytes come after it, as they may.)
#[test]
fn a_connection_with_bytes_after_its_answer_is_not_lent_again() {
    let server = Arc::new(ScriptedServer::openai(
        None,
        vec![
            Reply::text_stream(&["one"])
                .then_raw(Duration::from_millis(100), "HTTP/1.1 200 OK\r\n\r\n"),
            Reply::text_stream(&["two"]),
        ],
    ));
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let watched = server.clone();
    let second = within(HANG_GUARD, move || {
        ask(&client, &mut RecordingSink::default()).unwrap();
        while watched.trailers_sent() == 0 {
            thread::sleep(Duration::from_millis(5));
        }
        ask(&client, &mut RecordingSink::default()).unwrap()
    });
    assert_eq!(second.content.as_deref(), Some("two"));
    assert_eq!(server.request_count(), 2);
    assert_eq!(
        server.connection_count(),
        2,
        "the spoiled connection was dropped"
    );
    server.assert_clean();
}

/// A client writes each request into the buffer of the one before: a short
/// request after a long one carries nothing of it (the body is exactly the
/// short request's JSON: a leftover byte would be trailing characters).
#[test]
fn a_short_request_after_a_long_one_carries_nothing_of_it() {
    let server = ScriptedServer::openai(
        None,
        vec![Reply::text_stream(&["one"]), Reply::text_stream(&["two"])],
    );
    let client = OpenAiClient::new(options(server.base_url(), None)).unwrap();
    let long = "x".repeat(20_000);
    for text in [long, "short".to_owned()] {
        // A clone shares what the client keeps.
        let client = client.clone();
        within(HANG_GUARD, move || {
            let history = vec![LedgerEntry::new(Message::user(text))];
            let request = ChatRequest {
                system_prompt: "You are a test.",
                messages: &history,
                tools: &[],
                tool_choice: hermes_core::ToolChoice::Auto,
            };
            client.complete(&request, &mut RecordingSink::default())
        })
        .unwrap();
    }
    server.assert_clean();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].body.len() < 200, "{}", requests[1].body.len());
    let body = requests[1].json();
    assert_eq!(body["messages"][1]["content"], "short");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(2));
}
