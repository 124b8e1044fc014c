//! The protocol rules a real provider enforces, checked on every chat
//! request: the message sequence, tool calls answered and their arguments
//! JSON objects, no empty assistant message, and the allowed content parts.

use std::collections::VecDeque;

use serde_json::Value;

/// The rules for a user message's content parts: text parts carry text,
/// image parts a base64 `data:` URL of an image (what OpenAI checks).
fn check_parts(i: usize, parts: &[Value]) -> Result<(), String> {
    use base64::Engine as _;
    if parts.is_empty() {
        return Err(format!("messages[{i}]: an empty content array"));
    }
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") if part.get("text").is_some_and(Value::is_string) => {}
            Some("image_url") => {
                let url = part
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let (head, data) = url
                    .strip_prefix("data:")
                    .and_then(|r| r.split_once(";base64,"))
                    .ok_or_else(|| format!("messages[{i}]: image_url is not a base64 data URL"))?;
                if !head.starts_with("image/") {
                    return Err(format!("messages[{i}]: an image data URL of type {head:?}"));
                }
                if base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .is_err()
                {
                    return Err(format!("messages[{i}]: the image data is not valid base64"));
                }
            }
            other => return Err(format!("messages[{i}]: a content part of type {other:?}")),
        }
    }
    Ok(())
}

/// The rules a real provider enforces.
pub(super) fn check_request(v: &Value) -> Result<(), String> {
    if v.get("model")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("missing model".into());
    }
    let msgs = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages must be an array")?;
    if msgs
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        != Some("system")
    {
        return Err("messages[0] must be the system prompt".into());
    }
    // OpenAI refuses a tool_choice without tools, and knows three words.
    if let Some(choice) = v.get("tool_choice") {
        if v.get("tools")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            return Err("tool_choice is only allowed when tools are specified".into());
        }
        if !matches!(choice.as_str(), Some("none" | "auto" | "required")) && !choice.is_object() {
            return Err(format!(
                "tool_choice {choice} is not none, auto, required or an object"
            ));
        }
    }
    let mut pending: VecDeque<String> = VecDeque::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "system" && i > 0 {
            return Err(format!("messages[{i}]: a second system message"));
        }
        if let Some(parts) = m.get("content").and_then(Value::as_array) {
            check_parts(i, parts)?;
        }
        if role == "tool" {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            if pending.pop_front().as_deref() != Some(id) {
                return Err(format!(
                    "messages[{i}]: tool result {id} answers no pending call"
                ));
            }
            continue;
        }
        if !pending.is_empty() {
            return Err(format!("messages[{i}]: tool calls {pending:?} unanswered"));
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                pending.push_back(c["id"].as_str().unwrap_or("").to_owned());
                let args = c["function"]["arguments"].as_str().unwrap_or("");
                if !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
                    return Err(format!(
                        "messages[{i}]: tool call arguments {args:?} are not a JSON object"
                    ));
                }
            }
        }
        if role == "assistant"
            && m.get("tool_calls")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            && !has_text(m.get("content"))
        {
            return Err(format!(
                "messages[{i}]: an assistant message with neither content nor tool calls"
            ));
        }
        for forbidden in ["reasoning", "usage", "timestamp", "finish_reason"] {
            if m.get(forbidden).is_some() {
                return Err(format!("messages[{i}] carries ledger field {forbidden}"));
            }
        }
    }
    Ok(())
}

/// Whether a message's `content` has text: a non-empty string, or content
/// parts (`[{"type":"text","text":…}]`, as cache breakpoints send it) with
/// a non-empty text.
fn has_text(content: Option<&Value>) -> bool {
    match content {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(parts)) => parts
            .iter()
            .any(|p| p["type"] == "text" && p["text"].as_str().is_some_and(|t| !t.is_empty())),
        _ => false,
    }
}
