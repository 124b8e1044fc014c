//! The OpenAI client against a third-party emulator, the pinned
//! `@copilotkit/aimock` (fixtures in `tests/emulators/aimock/fixtures/client.json`):
//! scripted tool calls with arguments split across many chunks,
//! `finish_reason: length`, 429 with `Retry-After`, a one-shot 500, and a
//! full agent run. Each test starts its own aimock on a free port.
//!
//! Requires `npm ci --prefix tests/emulators/aimock`; without it these tests
//! fail with that instruction.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, LedgerEntry, Message, Model, ModelError,
    ModelErrorKind, NullSink, StopReason, Tool, ToolCall, ToolContext, ToolError, ToolRegistry,
    ToolSpec,
};
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_tests::aimock::Aimock;
use support::within;

const FIXTURES: &str = "client.json";
const HANG_GUARD: Duration = Duration::from_secs(90);

fn client(mock: &Aimock, stream: bool) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: mock.base_url(),
        api_key: Some("sk-aimock-test".into()),
        model: "gpt-4o".into(),
        stream,
        backoff_base: Duration::from_millis(5),
        ..ClientOptions::default()
    })
    .unwrap()
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Weather forecast",
            serde_json::json!({"type": "object", "properties": {
                "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}}),
        ),
        ToolSpec::new(
            "get_time",
            "Current time",
            serde_json::json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
        ),
    ]
}

fn ask(client: OpenAiClient, text: &'static str) -> Result<Completion, ModelError> {
    within(HANG_GUARD, move || {
        let history = vec![LedgerEntry::new(Message::user(text))];
        let tools = tools();
        let request = ChatRequest {
            system_prompt: "You are a test agent.",
            messages: &history,
            tools: &tools,
            tool_choice: hermes_core::ToolChoice::Auto,
        };
        client.complete(&request, &mut NullSink)
    })
}

fn args(call: &ToolCall) -> serde_json::Value {
    serde_json::from_str(&call.function.arguments).unwrap_or_else(|e| {
        panic!(
            "arguments of {} are not JSON ({e}): {}",
            call.function.name, call.function.arguments
        )
    })
}

fn check_tool_calls(completion: &Completion) {
    assert_eq!(completion.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(completion.tool_calls.len(), 2, "{completion:?}");
    let weather = &completion.tool_calls[0];
    assert_eq!(weather.id, "call_weather_1");
    assert_eq!(weather.function.name, "get_weather");
    assert_eq!(
        args(weather),
        serde_json::json!({"location": "Paris, France", "unit": "celsius", "days": 3})
    );
    let time = &completion.tool_calls[1];
    assert_eq!(time.id, "call_time_2");
    assert_eq!(time.function.name, "get_time");
    assert_eq!(args(time), serde_json::json!({"timezone": "Europe/Paris"}));
}

#[test]
fn streamed_tool_calls_with_arguments_split_across_chunks() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    // The fixture streams arguments 4 characters per chunk.
    let completion = ask(client(&mock, true), "weather in paris").unwrap();
    check_tool_calls(&completion);
    let journal = mock.chat_requests();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0]["body"]["stream"], true);
    assert_eq!(journal[0]["body"]["messages"][0]["role"], "system");
    // aimock journals the header redacted; the exact value is checked by the
    // scripted server's rules.
    assert!(
        journal[0]["headers"]["authorization"].is_string(),
        "no Authorization header: {}",
        journal[0]["headers"]
    );
}

#[test]
fn non_streamed_tool_calls() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let completion = ask(client(&mock, false), "weather in paris").unwrap();
    check_tool_calls(&completion);
}

#[test]
fn streamed_text() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let completion = ask(client(&mock, true), "hello").unwrap();
    assert_eq!(
        completion.content.as_deref(),
        Some("Hi there! How can I help you today?")
    );
    assert_eq!(completion.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn finish_reason_length_is_reported() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    for stream in [true, false] {
        let completion = ask(client(&mock, stream), "write a long essay").unwrap();
        assert_eq!(
            completion.finish_reason,
            Some(FinishReason::Length),
            "stream={stream}"
        );
        assert_eq!(
            completion.content.as_deref(),
            Some("Once upon a time there was a very long essay that")
        );
    }
}

#[test]
fn rate_limited_once_with_retry_after_then_success() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let completion = ask(client(&mock, true), "rate limited once").unwrap();
    assert_eq!(completion.content.as_deref(), Some("after the rate limit"));
    let statuses: Vec<u64> = mock
        .chat_requests()
        .iter()
        .map(|e| e["response"]["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![429, 200]);
}

#[test]
fn a_one_shot_500_is_retried() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let completion = ask(client(&mock, false), "flaky server").unwrap();
    assert_eq!(
        completion.content.as_deref(),
        Some("recovered after one failure")
    );
    assert_eq!(mock.chat_requests().len(), 2);
}

#[test]
fn a_persistent_429_fails_after_the_bounded_attempts_with_the_provider_message() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let err = ask(client(&mock, true), "always limited").unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Status(429));
    assert!(
        err.message.contains("Quota exhausted for this key"),
        "{}",
        err.message
    );
    assert!(err.message.contains("3 attempts"), "{}", err.message);
    assert_eq!(mock.chat_requests().len(), 3);
}

#[test]
fn list_models_against_aimock() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let c = client(&mock, true);
    let models = within(HANG_GUARD, move || c.list_models()).unwrap();
    assert!(models.iter().any(|m| m == "gpt-4o"), "{models:?}");
}

struct Clock {
    spec: ToolSpec,
}

impl Tool for Clock {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let v: serde_json::Value = serde_json::from_str(arguments).unwrap();
        Ok(format!(
            "12:00 in {}",
            v["timezone"].as_str().unwrap_or("?")
        ))
    }
}

#[test]
fn an_agent_run_against_aimock() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start(FIXTURES);
    let tools = ToolRegistry::new().with(Clock {
        spec: tools().remove(1),
    });
    let agent = Agent::new(
        Arc::new(client(&mock, true)),
        Arc::new(tools),
        "You are a test agent.",
    );
    let outcome = within(HANG_GUARD, move || {
        agent.run_conversation("use the clock tool", Vec::new())
    });
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(outcome.final_text, "The clock tool says it is noon.");
    let journal = mock.chat_requests();
    assert_eq!(journal.len(), 2);
    let messages = journal[1]["body"]["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["role"], "tool");
    assert_eq!(messages.last().unwrap()["tool_call_id"], "call_clock_1");
    assert_eq!(messages.last().unwrap()["content"], "12:00 in UTC");
}
