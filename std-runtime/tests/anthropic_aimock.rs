//! The native Anthropic Messages client (`[provider] api = "anthropic"`)
//! against the pinned `@copilotkit/aimock`, which serves `/v1/messages`
//! (fixtures in `tests/emulators/aimock/fixtures/anthropic.json`). aimock
//! runs `--strict`: it then refuses a tool loop whose assistant turn does not
//! start with the signed thinking block it sent. Every raw request goes
//! through a recording proxy and is checked against the Messages request
//! schema generated from Anthropic's SDK (`tests/fixtures/anthropic-schemas`).
//!
//! Requires `npm ci --prefix tests/emulators/aimock`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::{
    Agent, AgentEvent, FinishReason, FnObserver, IterationBudget, LedgerEntry, Message, StopReason,
    Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use hermes_runtime::client::{AnthropicClient, CacheControl, ClientOptions, OpenAiClient};
use hermes_runtime::fallback::{FallbackModel, Link};
use hermes_tests::aimock::Aimock;
use serde_json::Value;
use support::proxy::RecordingProxy;
use support::within;

const FIXTURES: &str = "anthropic.json";
const HANG_GUARD: Duration = Duration::from_secs(90);
const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/messages_request.schema.json");
const STREAMING_SCHEMA: &str =
    include_str!("../../tests/fixtures/anthropic-schemas/messages_request_streaming.schema.json");

fn assert_valid(body: &Value) {
    let schema = if body["stream"] == true {
        STREAMING_SCHEMA
    } else {
        REQUEST_SCHEMA
    };
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations: {errors:#?}\nin {body:#}"
    );
}

fn options(base_url: String, model: &str, stream: bool) -> ClientOptions {
    ClientOptions {
        base_url,
        api_key: Some("sk-ant-aimock-test".into()),
        model: model.into(),
        stream,
        backoff_base: Duration::from_millis(5),
        cache: Some(CacheControl::default()),
        ..ClientOptions::default()
    }
}

struct Clock {
    spec: ToolSpec,
}

impl Tool for Clock {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let v: Value = serde_json::from_str(arguments).unwrap();
        Ok(format!(
            "12:00 in {}",
            v["timezone"].as_str().unwrap_or("?")
        ))
    }
}

fn clock() -> ToolRegistry {
    ToolRegistry::new().with(Clock {
        spec: ToolSpec::new(
            "get_time",
            "Current time",
            serde_json::json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
        ),
    })
}

/// Runs `text` through an agent on `client`, recording streamed pieces.
fn run(client: AnthropicClient, text: &'static str) -> (hermes_core::RunOutcome, String, String) {
    within(HANG_GUARD, move || {
        let agent = Agent::new(Arc::new(client), Arc::new(clock()), "You are a test agent.");
        let streamed = Arc::new(Mutex::new((String::new(), String::new())));
        let s = streamed.clone();
        let mut observer = FnObserver(move |e: &AgentEvent<'_>| match e {
            AgentEvent::TextDelta(t) => s.lock().unwrap().0.push_str(t),
            AgentEvent::ReasoningDelta(t) => s.lock().unwrap().1.push_str(t),
            _ => {}
        });
        let budget = IterationBudget::new(10);
        let outcome = agent.run(text, Vec::new(), &budget, &mut observer);
        let (text, reasoning) = streamed.lock().unwrap().clone();
        (outcome, text, reasoning)
    })
}

#[test]
fn a_full_agent_run_with_tools_streaming_and_thinking() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start_with(FIXTURES, &["--strict"]);
    let proxy = RecordingProxy::start(&mock.url);
    let client = AnthropicClient::new(ClientOptions {
        reasoning_effort: Some("low".into()),
        ..options(format!("{}/v1", proxy.url()), "claude-sonnet-4-5", true)
    })
    .unwrap();
    let (outcome, text, reasoning) = run(client, "use the clock tool");
    assert_eq!(
        outcome.stop,
        StopReason::Completed,
        "{:?}\n{}",
        outcome.stop,
        mock.log.lock().unwrap()
    );
    assert_eq!(outcome.final_text, "The clock tool says it is noon.");
    assert_eq!(
        text, "The clock tool says it is noon.",
        "streamed to the sink"
    );
    // Reasoning streamed apart from the answer and never became it.
    assert!(reasoning.contains("the clock tool gives it"), "{reasoning}");
    let messages = outcome.new_messages();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    let call = &messages[1].message.tool_calls()[0];
    assert_eq!(call.id, "toolu_clock_1");
    assert_eq!(call.function.arguments, r#"{"timezone":"UTC"}"#);
    assert_eq!(
        messages[2].message,
        Message::tool("toolu_clock_1", "12:00 in UTC")
    );
    assert!(messages[1].meta.reasoning_details.is_some());
    assert_eq!(messages[3].meta.finish_reason, Some(FinishReason::Stop));
    assert_eq!(messages[3].meta.model.as_deref(), Some("claude-sonnet-4-5"));

    let seen = proxy.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.path, "/v1/messages");
        assert_eq!(s.header("x-api-key"), Some("sk-ant-aimock-test"));
        assert_eq!(s.header("anthropic-version"), Some("2023-06-01"));
        assert!(
            s.header("authorization").is_none(),
            "no Bearer token to Anthropic"
        );
        assert_valid(&s.json());
    }
    let second = seen[1].json();
    assert_eq!(second["thinking"]["type"], "enabled");
    assert!(second.get("temperature").is_none());
    let assistant = &second["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    // The signed thinking block first (aimock's strict mode checks it),
    // then the tool call; the result in a user message of blocks.
    assert_eq!(assistant["content"][0]["type"], "thinking");
    assert_eq!(
        assistant["content"][0]["signature"],
        "aimock-placeholder-signature"
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(
        assistant["content"][1]["input"],
        serde_json::json!({"timezone": "UTC"})
    );
    assert_eq!(second["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(
        second["messages"][2]["content"][0]["tool_use_id"],
        "toolu_clock_1"
    );
    // Breakpoints: the system prompt and the last three messages.
    assert_eq!(second["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(second.to_string().matches("cache_control").count(), 4);
}

#[test]
fn without_the_thinking_echo_strict_aimock_refuses_the_tool_loop() {
    hermes_tests::require!(Npm("aimock"));
    // The check the test above passes is real: a continuation whose
    // assistant turn lacks the signed block is a 400 from strict aimock.
    let mock = Aimock::start_with(FIXTURES, &["--strict"]);
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 5000, "stream": false,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": "use the clock tool"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_clock_1", "name": "get_time", "input": {"timezone": "UTC"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_clock_1", "content": "12:00"}]}
        ]
    });
    assert_valid(&body);
    let response = ureq::post(format!("{}/v1/messages", mock.url))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(&body)
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

#[test]
fn non_streaming_text() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let proxy = RecordingProxy::start(&mock.url);
    let client = AnthropicClient::new(options(
        format!("{}/v1", proxy.url()),
        "claude-haiku-4-5",
        false,
    ))
    .unwrap();
    let (outcome, text, _) = run(client, "hello claude");
    assert_eq!(outcome.final_text, "Hello from the Messages API!");
    assert_eq!(text, "Hello from the Messages API!", "shown once, whole");
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1);
    let body = seen[0].json();
    assert_valid(&body);
    assert_eq!(body["stream"], false);
    assert_eq!(body["tools"][0]["name"], "get_time");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert!(body.get("thinking").is_none());
}

#[test]
fn max_tokens_is_a_cut_answer() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    for stream in [true, false] {
        let client = AnthropicClient::new(options(
            format!("{}/v1", mock.url),
            "claude-sonnet-4-5",
            stream,
        ))
        .unwrap();
        let (outcome, _, _) = run(client, "write a long essay");
        assert_eq!(outcome.stop, StopReason::Truncated, "stream={stream}");
        assert_eq!(outcome.final_text, "Once upon a time");
    }
}

#[test]
fn an_overloaded_anthropic_primary_falls_back_to_an_openai_compatible_model() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let primary =
        AnthropicClient::new(options(format!("{}/v1", mock.url), "claude-primary", true)).unwrap();
    let fallback = OpenAiClient::new(ClientOptions {
        base_url: format!("{}/v1", mock.url),
        model: "gpt-4o".into(),
        backoff_base: Duration::from_millis(5),
        ..ClientOptions::default()
    })
    .unwrap();
    let chain = FallbackModel::new(
        Link {
            name: "claude-primary".into(),
            model: Arc::new(primary),
        },
        vec![Link {
            name: "gpt-4o".into(),
            model: Arc::new(fallback),
        }],
    );
    let outcome = within(HANG_GUARD, move || {
        Agent::new(Arc::new(chain), Arc::new(clock()), "sys").run_conversation(
            "overloaded",
            vec![LedgerEntry::new(Message::user("earlier"))],
        )
    });
    assert_eq!(outcome.final_text, "The fallback answered.");
    assert_eq!(
        outcome.new_messages()[1].meta.model.as_deref(),
        Some("gpt-4o")
    );
    // 529 is retried (3 attempts) before the fallback takes the call.
    let statuses: Vec<u64> = mock
        .messages_requests()
        .iter()
        .map(|e| e["response"]["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![529, 529, 529]);
    assert_eq!(mock.chat_requests().len(), 1);
}
