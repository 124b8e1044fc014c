//! Non-streaming bodies: a `chat.completion` object, or a provider error.

// Numbers here come from the outside (a provider, a platform, a header):
// arithmetic on them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::DecodeError;
use crate::message::{FinishReason, FunctionCall, ToolCall, ToolCallKind, Usage};
use crate::model::Completion;

/// Decodes a non-streaming `chat.completion` body.
///
/// Only the first choice is read (the encoder never asks for `n > 1`).
/// A body with an `error` member is a [`DecodeError::Provider`]; a body with
/// no choice is [`DecodeError::NoChoices`]. A `refusal` stands in for the
/// content when there is no content, so the user sees why nothing came back.
/// Tool-call `arguments` sent as a JSON object (some local servers do) are
/// kept as their JSON text, since the loop expects the argument string.
pub fn decode_response(body: &[u8]) -> Result<Completion, DecodeError> {
    let parsed: ResponseBody<'_> =
        serde_json::from_slice(body).map_err(|e| DecodeError::json(&e))?;
    if parsed.error.is_some() {
        return Err(provider_error(body));
    }
    let choice = parsed
        .choices
        .and_then(|c| c.into_iter().next())
        .ok_or(DecodeError::NoChoices)?;
    let message = choice.message.unwrap_or_default();
    // Empty text is no text, as in a stream: the same body then gives the
    // same completion whether it arrived as JSON or where a stream was
    // expected (found by the `response_body` fuzz target).
    let content = message
        .content
        .filter(|c| !c.is_empty())
        .or(message.refusal.filter(|r| !r.is_empty()))
        .map(Cow::into_owned);
    let reasoning = message
        .reasoning_content
        .or(message.reasoning)
        .filter(|r| !r.is_empty())
        .map(Cow::into_owned);
    let reasoning_details = super::reasoning::keep_array(message.reasoning_details);
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(ResponseToolCall::into_tool_call)
        .collect();
    Ok(Completion {
        content,
        tool_calls,
        reasoning,
        reasoning_details,
        model: None,
        finish_reason: choice.finish_reason.as_deref().map(FinishReason::parse),
        usage: parsed.usage,
    })
}

/// Extracts the provider's message from an error body, whatever its shape:
/// `{"error":{"message":…}}` (OpenAI and most compatibles), `{"error":"…"}`,
/// `{"message":…}`, `{"detail":"…"}` (FastAPI-based servers), or any of these
/// as the first element of an array (Google). `None` when the body is not
/// JSON or has no message, so the caller can fall back to the raw text.
pub fn decode_error_body(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    error_message(&value)
}

fn error_message(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::Array(items) => items.first().and_then(error_message),
        Value::Object(map) => {
            match map.get("error") {
                Some(Value::Object(err)) => {
                    if let Some(Value::String(m)) = err.get("message") {
                        return non_empty(m);
                    }
                }
                Some(Value::String(m)) => return non_empty(m),
                _ => {}
            }
            match (map.get("message"), map.get("detail")) {
                (Some(Value::String(m)), _) | (None, Some(Value::String(m))) => non_empty(m),
                _ => None,
            }
        }
        _ => None,
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The error for a body or chunk that has an `error` member.
pub(crate) fn provider_error(body: &[u8]) -> DecodeError {
    let message = decode_error_body(body).unwrap_or_else(|| {
        // An error object without a message: show it whole rather than nothing.
        String::from_utf8_lossy(body).into_owned()
    });
    DecodeError::Provider { message }
}

#[derive(Deserialize)]
struct ResponseBody<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    message: Option<ResponseMessage<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Default, Deserialize)]
struct ResponseMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    /// OpenRouter's reasoning blocks, kept verbatim for echoing.
    #[serde(borrow, default)]
    reasoning_details: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Arguments>,
}

/// `arguments` as a string (the spec) or as an inline JSON value.
#[derive(Deserialize)]
#[serde(untagged)]
enum Arguments {
    Text(String),
    Json(serde_json::Value),
}

impl ResponseToolCall {
    fn into_tool_call(self) -> ToolCall {
        let arguments = match self.function.arguments {
            Some(Arguments::Text(s)) => s,
            Some(Arguments::Json(serde_json::Value::Null)) | None => String::new(),
            Some(Arguments::Json(v)) => v.to_string(),
        };
        ToolCall {
            // A missing id stays empty: the codec sees one response and
            // could only invent ids like `call_0` that repeat across turns,
            // which providers needing conversation-unique ids reject. The
            // agent loop, which sees the whole conversation, names it
            // (SPEC L7).
            id: self.id.unwrap_or_default(),
            kind: ToolCallKind::Function,
            function: FunctionCall {
                name: self.function.name,
                arguments,
            },
        }
    }
}
