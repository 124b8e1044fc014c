//! The published OpenAI chat-completions request schemas
//! (`tests/fixtures/openai-schemas/`), for tests that check every request
//! the gateway's agent made — image parts included.
#![allow(clippy::unwrap_used, dead_code)]

use serde_json::{Value, json};

const REQUEST_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");
const REQUEST_STREAMING_SCHEMA: &str = include_str!(
    "../../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);

/// Panics unless every request is a valid OpenAI chat-completions request
/// (the streaming schema for `stream: true` ones).
pub fn assert_valid_requests(requests: &[Value]) {
    let plain: Value = serde_json::from_str(REQUEST_SCHEMA).unwrap();
    let streaming: Value = serde_json::from_str(REQUEST_STREAMING_SCHEMA).unwrap();
    let plain = jsonschema::validator_for(&plain).unwrap();
    let streaming = jsonschema::validator_for(&streaming).unwrap();
    for (i, request) in requests.iter().enumerate() {
        let validator = if request["stream"] == json!(true) {
            &streaming
        } else {
            &plain
        };
        let errors: Vec<String> = validator
            .iter_errors(request)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "request {i}: {errors:#?}\n{request:#}");
    }
}
