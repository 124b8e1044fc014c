//! A non-streaming Anthropic `message` body (or error object) as a
//! [`Completion`].

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::super::DecodeError;
use super::super::reasoning::Details;
use super::super::response::provider_error;
use crate::message::{FinishReason, ToolCall, Usage};
use crate::model::Completion;

/// The `format` of reasoning blocks this API produced, as OpenRouter names it.
pub(crate) const FORMAT: &str = "anthropic-claude-v1";

/// Maps Anthropic's `stop_reason` onto the loop's finish reasons.
pub(crate) fn stop_reason(s: &str) -> FinishReason {
    match s {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.into()),
    }
}

/// A reasoning block in the ledger's (OpenRouter's) form.
pub(crate) fn text_detail(index: usize, text: &str, signature: &str) -> Map<String, Value> {
    let mut block = Map::new();
    block.insert("type".into(), Value::from("reasoning.text"));
    block.insert("text".into(), Value::from(text));
    if !signature.is_empty() {
        block.insert("signature".into(), Value::from(signature));
    }
    block.insert("format".into(), Value::from(FORMAT));
    block.insert("index".into(), Value::from(index));
    block
}

/// An encrypted (redacted) reasoning block in the ledger's form.
pub(crate) fn encrypted_detail(index: usize, data: &str) -> Map<String, Value> {
    let mut block = Map::new();
    block.insert("type".into(), Value::from("reasoning.encrypted"));
    block.insert("data".into(), Value::from(data));
    block.insert("format".into(), Value::from(FORMAT));
    block.insert("index".into(), Value::from(index));
    block
}

/// Decodes a `POST /v1/messages` response body.
///
/// Text blocks are joined into the content, thinking blocks into the
/// reasoning (and kept with their signatures as reasoning details, so a tool
/// loop can send them back); each `tool_use` block is a tool call whose
/// arguments are the `input` object's JSON text. `{"type":"error",…}` is a
/// [`DecodeError::Provider`].
pub fn decode_messages_response(body: &[u8]) -> Result<Completion, DecodeError> {
    let parsed: MessageBody<'_> =
        serde_json::from_slice(body).map_err(|e| DecodeError::json(&e))?;
    if parsed.error.is_some() || parsed.kind.as_deref() == Some("error") {
        return Err(provider_error(body));
    }
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut details = Details::default();
    let mut tool_calls = Vec::new();
    for (index, block) in parsed.content.unwrap_or_default().into_iter().enumerate() {
        match block.kind.as_ref() {
            "text" => content.push_str(block.text.as_deref().unwrap_or("")),
            "thinking" => {
                let text = block.thinking.as_deref().unwrap_or("");
                reasoning.push_str(text);
                details.push(text_detail(
                    index,
                    text,
                    block.signature.as_deref().unwrap_or(""),
                ));
            }
            "redacted_thinking" => {
                details.push(encrypted_detail(index, block.data.as_deref().unwrap_or("")))
            }
            "tool_use" => tool_calls.push(ToolCall::new(
                block.id.as_deref().unwrap_or(""),
                block.name.as_deref().unwrap_or(""),
                block.input.map_or("{}", RawValue::get),
            )),
            _ => {}
        }
    }
    Ok(Completion {
        content: (!content.is_empty()).then_some(content),
        tool_calls,
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        reasoning_details: details.to_json(),
        model: None,
        finish_reason: parsed.stop_reason.as_deref().map(stop_reason),
        usage: parsed.usage,
    })
}

#[derive(Deserialize)]
struct MessageBody<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Vec<Block<'a>>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
pub(crate) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) data: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) input: Option<&'a RawValue>,
}
