//! Non-streaming bodies: a realistic response, variants from compatible
//! servers, typed errors, and error bodies of every shape.

use hermes_core::codec::{DecodeError, decode_error_body, decode_response};
use hermes_core::{Completion, FinishReason, ToolCall, Usage};

use super::support::{COMPLETION_SCHEMA, assert_valid};

pub(crate) const RESPONSE: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Checking h\u00e9llo 世界 🚀",
        "refusal": null,
        "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
          {"id": "call_2", "type": "function", "function": {"name": "search_files", "arguments": "{\"pattern\":\"x\"}"}}
        ],
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

#[test]
fn response_fixture_is_realistic_and_decodes() {
    assert_valid(COMPLETION_SCHEMA, &serde_json::from_str(RESPONSE).unwrap());
    let c = decode_response(RESPONSE.as_bytes()).unwrap();
    assert_eq!(
        c,
        Completion {
            content: Some("Checking héllo 世界 🚀".into()),
            tool_calls: vec![
                ToolCall::new("call_1", "read_file", r#"{"path":"a.txt"}"#),
                ToolCall::new("call_2", "search_files", r#"{"pattern":"x"}"#),
            ],
            reasoning: None,
            finish_reason: Some(FinishReason::ToolCalls),
            usage: Some(Usage {
                prompt_tokens: 1117,
                completion_tokens: 46,
                total_tokens: 1163,
                ..Usage::default()
            }),
            ..Completion::default()
        }
    );
}

#[test]
fn response_variants_from_compatible_servers() {
    // DeepSeek-style reasoning, no usage, no tool calls.
    let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"think think"},"finish_reason":"stop"}]}"#;
    assert_valid(COMPLETION_SCHEMA, &serde_json::from_str(body).unwrap());
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content.as_deref(), Some("42"));
    assert_eq!(c.reasoning.as_deref(), Some("think think"));
    assert_eq!(c.finish_reason, Some(FinishReason::Stop));
    assert_eq!(c.usage, None);

    // Arguments as an object and no id (seen from local servers).
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}"#;
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content, None);
    assert_eq!(c.tool_calls, vec![ToolCall::new("", "f", r#"{"a":1}"#)]);

    // A refusal is shown as the content.
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#;
    let c = decode_response(body.as_bytes()).unwrap();
    assert_eq!(c.content.as_deref(), Some("I can't help with that."));
}

#[test]
fn response_errors_are_typed() {
    let err = decode_response(br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#)
        .unwrap_err();
    assert_eq!(
        err,
        DecodeError::Provider {
            message: "Rate limit reached".into()
        }
    );
    assert_eq!(
        decode_response(br#"{"id":"x","choices":[]}"#).unwrap_err(),
        DecodeError::NoChoices
    );
    assert_eq!(
        decode_response(br#"{"id":"x"}"#).unwrap_err(),
        DecodeError::NoChoices
    );
    for garbage in [
        &b"<html>502 Bad Gateway</html>"[..],
        b"",
        b"{\"choices\":[{\"message\":{\"content\":5}}]}",
        b"{\"choices\":{}}",
        b"{\"choices\":[{\"message\":{\"content\":\"a\"}}]",
        b"\xff\xfe",
    ] {
        let err = decode_response(garbage).unwrap_err();
        assert!(
            matches!(err, DecodeError::Json { .. }),
            "{garbage:?}: {err:?}"
        );
    }
}

#[test]
fn error_bodies_of_every_shape() {
    let cases: &[(&str, Option<&str>)] = &[
        (
            r#"{"error":{"message":"Invalid API key","type":"auth"}}"#,
            Some("Invalid API key"),
        ),
        (r#"{"error":"model not found"}"#, Some("model not found")),
        (
            r#"{"message":"Too many requests"}"#,
            Some("Too many requests"),
        ),
        (r#"{"detail":"Not Found"}"#, Some("Not Found")),
        (
            r#"[{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}]"#,
            Some("Resource exhausted"),
        ),
        (r#"{"error":{"code":500}}"#, None),
        (r#"{"error":""}"#, None),
        ("upstream connect error", None),
        ("", None),
        ("[]", None),
    ];
    for (body, want) in cases {
        assert_eq!(
            decode_error_body(body.as_bytes()).as_deref(),
            *want,
            "{body}"
        );
    }
}
