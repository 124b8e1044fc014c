//! OpenAI's chat-completions wire format as the server speaks it: the
//! request checked before any model call (a bad one is a `400` naming the
//! field), the `chat.completion` and `chat.completion.chunk` objects, and
//! OpenAI's error shape.

use serde_json::{Value, json};

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The sentence for the client.
    pub message: String,
    /// OpenAI's `type`.
    pub kind: &'static str,
    /// The offending field, when there is one.
    pub param: Option<String>,
    /// OpenAI's `code`.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// `400 invalid_request_error` about `param`.
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// `401`: the key is missing or wrong (the message never echoes it).
    pub fn unauthorized() -> Self {
        Self {
            status: 401,
            message: "Incorrect or missing API key: send `Authorization: Bearer <API_SERVER_KEY>`."
                .into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// `404` for an unknown path, model or session.
    pub fn not_found(message: impl Into<String>, code: &'static str) -> Self {
        Self {
            status: 404,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some(code),
        }
    }

    /// Any other status.
    pub fn other(
        status: u16,
        message: impl Into<String>,
        kind: &'static str,
        code: &'static str,
    ) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: Some(code),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// One message of the client's conversation, reduced to what the agent
/// keeps: its role and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientMessage {
    /// `system` (also `developer`), `user` or `assistant`.
    pub role: Role,
    /// The text (content parts joined).
    pub text: String,
}

/// The roles a client may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `system` or `developer`: instructions layered over the agent's prompt.
    System,
    /// The user.
    User,
    /// An earlier answer.
    Assistant,
}

/// A checked `POST /v1/chat/completions` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatRequest {
    /// The model id asked for.
    pub model: String,
    /// The conversation; the last one is a user message.
    pub messages: Vec<ClientMessage>,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Parses and checks a request body; `max_messages` bounds the conversation.
pub fn parse_chat_request(body: &[u8], max_messages: usize) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}"), None))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request(
            "The body must be a JSON object.",
            None,
        ));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => {
            return Err(ApiError::bad_request(
                "'model' must be a non-empty string.",
                Some("model"),
            ));
        }
        None => {
            return Err(ApiError::bad_request("'model' is required.", Some("model")));
        }
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "'stream' must be a boolean.",
                Some("stream"),
            ));
        }
    };
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "'stream_options.include_usage' must be a boolean.",
                    Some("stream_options.include_usage"),
                ));
            }
        },
        Some(_) => {
            return Err(ApiError::bad_request(
                "'stream_options' must be an object.",
                Some("stream_options"),
            ));
        }
    };
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "Only n = 1 is supported: the agent gives one answer.",
                Some("n"),
            ));
        }
    }
    let tools = obj.get("tools").or_else(|| obj.get("functions"));
    if tools
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
    {
        return Err(ApiError::bad_request(
            "Client-side tools are not supported: the agent runs its own tools on the server.",
            Some("tools"),
        ));
    }
    let messages = parse_messages(obj.get("messages"), max_messages)?;
    Ok(ChatRequest {
        model,
        messages,
        stream,
        include_usage,
    })
}

fn parse_messages(
    value: Option<&Value>,
    max_messages: usize,
) -> Result<Vec<ClientMessage>, ApiError> {
    let list = match value {
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(ApiError::bad_request(
                "'messages' must be an array of messages.",
                Some("messages"),
            ));
        }
        None => {
            return Err(ApiError::bad_request(
                "'messages' is required.",
                Some("messages"),
            ));
        }
    };
    if list.is_empty() {
        return Err(ApiError::bad_request(
            "'messages' must contain at least one message.",
            Some("messages"),
        ));
    }
    if list.len() > max_messages {
        return Err(ApiError::bad_request(
            format!(
                "'messages' has {} messages; at most {max_messages} are accepted.",
                list.len()
            ),
            Some("messages"),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let param = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(ApiError::bad_request(
                format!("{param} must be an object."),
                Some(&param),
            ));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool" | "function") => {
                return Err(ApiError::bad_request(
                    format!(
                        "{param}: tool results are not accepted; the agent runs its own tools."
                    ),
                    Some(&format!("{param}.role")),
                ));
            }
            Some(other) => {
                return Err(ApiError::bad_request(
                    format!(
                        "{param}.role '{other}' is not one of system, developer, user, assistant."
                    ),
                    Some(&format!("{param}.role")),
                ));
            }
            None => {
                return Err(ApiError::bad_request(
                    format!("{param}.role must be a string."),
                    Some(&format!("{param}.role")),
                ));
            }
        };
        let text = content_text(m.get("content"), role, &param)?;
        out.push(ClientMessage { role, text });
    }
    if out.last().map(|m| m.role) != Some(Role::User) {
        return Err(ApiError::bad_request(
            "The last message must be a user message: it is what the agent answers.",
            Some("messages"),
        ));
    }
    Ok(out)
}

/// The text of a message's `content`: a string, or text parts joined.
fn content_text(content: Option<&Value>, role: Role, param: &str) -> Result<String, ApiError> {
    let cparam = format!("{param}.content");
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) if role == Role::Assistant => Ok(String::new()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(t);
                    }
                    (Some("text"), _) => {
                        return Err(ApiError::bad_request(
                            format!("{cparam}[{j}].text must be a string."),
                            Some(&cparam),
                        ));
                    }
                    (Some(other), _) => {
                        return Err(ApiError::bad_request(
                            format!(
                                "{cparam}[{j}] is a '{other}' part; only text parts are supported."
                            ),
                            Some(&cparam),
                        ));
                    }
                    (None, _) => {
                        return Err(ApiError::bad_request(
                            format!("{cparam}[{j}] has no 'type'."),
                            Some(&cparam),
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::bad_request(
            format!("{cparam} must be a string or an array of text parts."),
            Some(&cparam),
        )),
    }
}

/// Token counts in OpenAI's `usage` shape.
pub fn usage_json(usage: &hermes_core::Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens.max(usage.prompt_tokens + usage.completion_tokens),
    })
}

/// What every object of one response shares.
#[derive(Clone, Debug)]
pub struct Envelope {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id served.
    pub model: String,
}

impl Envelope {
    /// A `chat.completion` with the whole answer.
    pub fn completion(&self, text: &str, finish: &str, usage: &hermes_core::Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "finish_reason": finish,
                "logprobs": null,
            }],
            "usage": usage_json(usage),
        })
    }

    /// A `chat.completion.chunk` carrying `delta` (and `finish_reason`);
    /// with usage asked for, `"usage": null` as OpenAI sends it.
    pub fn chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The last chunk when usage was asked for: no choices, the run's usage.
    pub fn usage_chunk(&self, usage: &hermes_core::Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_json(usage),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn err(body: &str) -> ApiError {
        parse_chat_request(body.as_bytes(), 3).unwrap_err()
    }

    #[test]
    fn a_conversation_is_parsed_with_its_parts_joined() {
        let r = parse_chat_request(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},
                "messages":[{"role":"developer","content":"be brief"},
                {"role":"assistant","content":null},
                {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#,
            3,
        )
        .unwrap();
        assert!(r.stream && r.include_usage);
        assert_eq!(r.messages[0].role, Role::System);
        assert_eq!(r.messages[2].text, "a\nb");
    }

    #[test]
    fn bad_bodies_are_400_naming_the_field() {
        for (body, needle) in [
            ("{", "not valid JSON"),
            ("[]", "JSON object"),
            (r#"{"messages":[]}"#, "'model' is required"),
            (r#"{"model":"m"}"#, "'messages' is required"),
            (r#"{"model":"m","messages":[]}"#, "at least one"),
            (r#"{"model":"m","messages":"hi"}"#, "array"),
            (r#"{"model":1,"messages":[]}"#, "'model' must"),
            (
                r#"{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}"#,
                "'stream'",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":5}]}"#,
                "messages[0].content",
            ),
            (
                r#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#,
                "'robot'",
            ),
            (
                r#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#,
                "tool results",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}"#,
                "last message",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                "image_url",
            ),
            (
                r#"{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}"#,
                "n = 1",
            ),
            (
                r#"{"model":"m","tools":[{}],"messages":[{"role":"user","content":"x"}]}"#,
                "tools",
            ),
        ] {
            let e = err(body);
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        let many = r#"{"model":"m","messages":[{"role":"user","content":"1"},{"role":"user","content":"2"},{"role":"user","content":"3"},{"role":"user","content":"4"}]}"#;
        assert!(err(many).message.contains("at most 3"));
    }
}
