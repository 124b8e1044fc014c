//! Request encoding: a borrowed [`ChatRequest`] to chat-completions JSON.
//!
//! The body is serialized straight from the borrowed ledger through small
//! `Serialize` views; no intermediate `api_messages` vector, no clone of the
//! history (SPEC L5). Only `entry.message` is visited, so ledger metadata
//! cannot reach the wire.
//!
//! # The wire copy is always a valid request
//! The ledger keeps what the model produced; the wire view of it never
//! carries what a provider would refuse:
//! - **Tool-call arguments that are not a JSON object** (truncated or
//!   malformed JSON, an empty string, `[1]`) go out as `{}`. The loop answered
//!   such a call with an error result saying so
//!   ([`ToolRegistry::dispatch`](crate::ToolRegistry::dispatch)), so the model
//!   reads `{}` followed by "your arguments were not valid JSON".
//! - **An empty assistant message** — no text and no tool calls: a turn that
//!   was interrupted or cut before the model said anything — is left out.
//!   Omitted rather than given placeholder text, so the model is never shown
//!   words it did not write; the two user messages around it then follow each
//!   other, which the chat-completions API accepts (the gateway's inbox makes
//!   the same shape when a message is replaced).
//!
//! Both checks read the borrowed ledger in place (a JSON validation of each
//! argument string, no allocation), so the body is still built in one pass.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::EncodeError;
use crate::message::{LedgerEntry, Message, ToolCall};
use crate::model::ChatRequest;
use crate::tool::ToolSpec;

/// Per-call settings that are not part of the conversation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestOptions<'a> {
    /// The provider's model name (`gpt-4o-mini`, `anthropic/claude-…`, …).
    pub model: &'a str,
    /// Ask for a server-sent-event stream instead of one JSON body.
    pub stream: bool,
    /// Output token cap (`max_tokens`); omitted when `None`.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; omitted when `None`. Must be finite.
    pub temperature: Option<f32>,
    /// Ask for a final usage chunk (`stream_options.include_usage`). Only
    /// sent when `stream` is set: providers reject `stream_options` otherwise,
    /// and some local servers reject it outright, hence opt-in.
    pub include_usage: bool,
}

impl<'a> RequestOptions<'a> {
    /// Options for `model`: non-streaming, no limits, provider defaults.
    pub fn new(model: &'a str) -> Self {
        RequestOptions {
            model,
            stream: false,
            max_tokens: None,
            temperature: None,
            include_usage: false,
        }
    }
}

/// Appends the JSON body of one chat-completions call to `out`.
///
/// Field order: `model`, `messages` (system prompt first unless empty, then
/// each ledger entry's message), `tools` (omitted when empty), `stream`,
/// `stream_options` (streaming with usage only), `max_tokens`, `temperature`.
/// The body is appended to `out`; on error `out` is left as it was.
pub fn encode_request(
    opts: &RequestOptions<'_>,
    req: &ChatRequest<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    if let Some(t) = opts.temperature
        && !t.is_finite()
    {
        return Err(EncodeError::InvalidTemperature(t));
    }
    // serde_json's `Serializer` over a caller's writer is std-only, so the
    // body is built in one vector and moved (or appended) into `out`.
    let body = serde_json::to_vec(&Body { opts, req }).map_err(EncodeError::Json)?;
    if out.is_empty() {
        *out = body;
    } else {
        out.extend_from_slice(&body);
    }
    Ok(())
}

/// Encodes requests exactly as [`encode_request`] does, byte for byte, but
/// keeps the encoded system message and `tools` array of the last request
/// it saw. Within a run both are the same on every call and are most of the
/// body (a default CLI request: 3.1 KB of system prompt and 6.7 KB of tool
/// schemas before the conversation's first kilobyte), so a later call
/// encodes only the conversation and compares the rest: a string comparison
/// and a walk of the schemas, with no escaping or number formatting.
///
/// What is kept is compared by value on every call, never by address: a
/// changed prompt or toolset is encoded afresh.
#[derive(Debug, Default)]
pub struct RequestEncoder {
    /// The prompt and its encoded `{"role":"system","content":…}`.
    system: Option<(String, Vec<u8>)>,
    /// The definitions and their encoded `[…]`.
    tools: Option<(Vec<ToolSpec>, Vec<u8>)>,
}

impl RequestEncoder {
    /// An encoder that remembers nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the JSON body of `req` to `out`, as [`encode_request`] would;
    /// on error `out` is left as it was.
    pub fn encode(
        &mut self,
        opts: &RequestOptions<'_>,
        req: &ChatRequest<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        if let Some(t) = opts.temperature
            && !t.is_finite()
        {
            return Err(EncodeError::InvalidTemperature(t));
        }
        // The conversation: `[m1,m2,…]`, spliced without its brackets.
        let entries = json(&Entries(req.messages))?;
        let entries = entries
            .get(1..entries.len().saturating_sub(1))
            .unwrap_or_default();
        let model = json(opts.model)?;
        let tail = json(&Tail(opts))?;

        let mut body = Vec::with_capacity(entries.len() + 12 * 1024);
        body.extend_from_slice(b"{\"model\":");
        body.extend_from_slice(&model);
        body.extend_from_slice(b",\"messages\":[");
        let mut first = true;
        if !req.system_prompt.is_empty() {
            let system = match &self.system {
                Some((prompt, encoded)) if prompt == req.system_prompt => encoded,
                _ => {
                    self.system = None;
                    let encoded = json(&SystemMessage(req.system_prompt))?;
                    &self.system.insert((req.system_prompt.into(), encoded)).1
                }
            };
            body.extend_from_slice(system);
            first = false;
        }
        if !entries.is_empty() {
            if !first {
                body.push(b',');
            }
            body.extend_from_slice(entries);
        }
        body.push(b']');
        if !req.tools.is_empty() {
            let tools = match &self.tools {
                Some((specs, encoded)) if specs.as_slice() == req.tools => encoded,
                _ => {
                    self.tools = None;
                    let encoded = json(&Tools(req.tools))?;
                    &self.tools.insert((req.tools.to_vec(), encoded)).1
                }
            };
            body.extend_from_slice(b",\"tools\":");
            body.extend_from_slice(tools);
        }
        // `{"stream":…,…}`: always one field, so never `{}`.
        body.push(b',');
        body.extend_from_slice(tail.get(1..).unwrap_or_default());
        out.extend_from_slice(&body);
        Ok(())
    }
}

/// One part of a body, encoded on its own.
fn json<T: Serialize + ?Sized>(part: &T) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(part).map_err(EncodeError::Json)
}

/// The messages of the ledger that go on the wire, as a JSON array (the
/// `messages` array without the system message).
struct Entries<'r>(&'r [LedgerEntry]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.0
                .iter()
                .filter(|e| on_wire(&e.message))
                .map(|e| WireMessage(&e.message)),
        )
    }
}

/// The fields after `tools`, as [`Body`] writes them.
struct Tail<'o>(&'o RequestOptions<'o>);

impl Serialize for Tail<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let opts = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("stream", &opts.stream)?;
        if opts.stream && opts.include_usage {
            map.serialize_entry("stream_options", &StreamOptions)?;
        }
        if let Some(max) = opts.max_tokens {
            map.serialize_entry("max_tokens", &max)?;
        }
        if let Some(t) = opts.temperature {
            map.serialize_entry("temperature", &t)?;
        }
        map.end()
    }
}

/// The whole request body.
struct Body<'o, 'r> {
    opts: &'o RequestOptions<'o>,
    req: &'o ChatRequest<'r>,
}

impl Serialize for Body<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", self.opts.model)?;
        map.serialize_entry(
            "messages",
            &Messages {
                system_prompt: self.req.system_prompt,
                entries: self.req.messages,
            },
        )?;
        if !self.req.tools.is_empty() {
            map.serialize_entry("tools", &Tools(self.req.tools))?;
        }
        map.serialize_entry("stream", &self.opts.stream)?;
        if self.opts.stream && self.opts.include_usage {
            map.serialize_entry("stream_options", &StreamOptions)?;
        }
        if let Some(max) = self.opts.max_tokens {
            map.serialize_entry("max_tokens", &max)?;
        }
        if let Some(t) = self.opts.temperature {
            map.serialize_entry("temperature", &t)?;
        }
        map.end()
    }
}

/// `{"include_usage":true}`.
struct StreamOptions;

impl Serialize for StreamOptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

/// The `messages` array: the system prompt, then each entry's wire message.
struct Messages<'r> {
    system_prompt: &'r str,
    entries: &'r [LedgerEntry],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // No length up front: empty assistant messages are skipped, and
        // counting them first would be a second pass over the history.
        let mut seq = serializer.serialize_seq(None)?;
        if !self.system_prompt.is_empty() {
            seq.serialize_element(&SystemMessage(self.system_prompt))?;
        }
        for entry in self.entries {
            // Only the wire half of the entry: `meta` is never visited.
            if on_wire(&entry.message) {
                seq.serialize_element(&WireMessage(&entry.message))?;
            }
        }
        seq.end()
    }
}

/// Whether `message` goes on the wire: everything but an assistant message
/// with neither text nor tool calls (see the module docs).
fn on_wire(message: &Message) -> bool {
    match message {
        Message::Assistant {
            content,
            tool_calls,
        } => !tool_calls.is_empty() || content.as_deref().is_some_and(|c| !c.is_empty()),
        Message::User { .. } | Message::Tool { .. } => true,
    }
}

/// One message as sent: the derived `Message` encoding, except that tool
/// calls go through [`WireToolCall`].
struct WireMessage<'r>(&'r Message);

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Message::Assistant {
                content,
                tool_calls,
            } if !tool_calls.is_empty() => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("role", "assistant")?;
                map.serialize_entry("content", content)?;
                map.serialize_entry("tool_calls", &WireToolCalls(tool_calls))?;
                map.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// The `tool_calls` array of an assistant message.
struct WireToolCalls<'r>(&'r [ToolCall]);

impl Serialize for WireToolCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(WireToolCall))
    }
}

/// `{"id":…,"type":"function","function":{"name":…,"arguments":…}}` with the
/// arguments replaced by `{}` unless they are a JSON object.
struct WireToolCall<'r>(&'r ToolCall);

impl Serialize for WireToolCall<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Function<'r>(&'r ToolCall);
        impl Serialize for Function<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("name", &self.0.function.name)?;
                map.serialize_entry("arguments", self.0.function.arguments_on_wire())?;
                map.end()
            }
        }
        let call = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("id", &call.id)?;
        map.serialize_entry("type", &call.kind)?;
        map.serialize_entry("function", &Function(call))?;
        map.end()
    }
}

/// `{"role":"system","content":…}`; not a `Message` because the ledger has no
/// system role (SPEC L6).
struct SystemMessage<'r>(&'r str);

impl Serialize for SystemMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "system")?;
        map.serialize_entry("content", self.0)?;
        map.end()
    }
}

/// The `tools` array, borrowed.
struct Tools<'r>(&'r [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}
