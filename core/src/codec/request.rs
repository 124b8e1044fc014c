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
//!
//! # Attachments (SPEC X6)
//! A user message with attachments is sent with its content as parts: the
//! text (`{"type":"text"}`), then one `{"type":"image_url","image_url":
//! {"url":…}}` part per image the caller's
//! [`AttachmentResolver`] lends a URL for. An image it lends none for goes
//! as its short text reference ([`Attachment::reference`]); a message whose
//! images all go as references is sent as one plain string, so a model that
//! cannot see images never receives a parts array. The URLs (data URLs of a
//! few MB) are borrowed from the resolver and written once, into the body.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::EncodeError;
use crate::attachment::{Attachment, AttachmentResolver, TextReferences};
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
/// Attachments travel as their text references; see [`encode_request_with`].
pub fn encode_request(
    opts: &RequestOptions<'_>,
    req: &ChatRequest<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    encode_request_with(opts, req, &TextReferences, out)
}

/// [`encode_request`], asking `attachments` how to send each image of a
/// user message: as an `image_url` part (the URL it lends) or as its text
/// reference (see the module docs).
pub fn encode_request_with(
    opts: &RequestOptions<'_>,
    req: &ChatRequest<'_>,
    attachments: &dyn AttachmentResolver,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    if let Some(t) = opts.temperature
        && !t.is_finite()
    {
        return Err(EncodeError::InvalidTemperature(t));
    }
    // serde_json's `Serializer` over a caller's writer is std-only, so the
    // body is built in one vector and moved (or appended) into `out`.
    let body = serde_json::to_vec(&Body {
        opts,
        req,
        attachments,
    })
    .map_err(EncodeError::Json)?;
    if out.is_empty() {
        *out = body;
    } else {
        out.extend_from_slice(&body);
    }
    Ok(())
}

/// The whole request body.
struct Body<'o, 'r> {
    opts: &'o RequestOptions<'o>,
    req: &'o ChatRequest<'r>,
    attachments: &'o dyn AttachmentResolver,
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
                attachments: self.attachments,
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
    attachments: &'r dyn AttachmentResolver,
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
                seq.serialize_element(&WireMessage {
                    message: &entry.message,
                    attachments: self.attachments,
                })?;
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
/// calls go through [`WireToolCall`] and a user message's attachments
/// through [`UserContent`].
struct WireMessage<'r> {
    message: &'r Message,
    attachments: &'r dyn AttachmentResolver,
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.message {
            Message::User {
                content,
                attachments,
            } if !attachments.is_empty() => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("role", "user")?;
                map.serialize_entry(
                    "content",
                    &UserContent {
                        text: content,
                        attachments,
                        resolver: self.attachments,
                    },
                )?;
                map.end()
            }
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

/// The content of a user message with attachments: one string when no image
/// is sent as an image, otherwise the parts (text first, then each image as
/// an `image_url` part or its text reference, in order).
struct UserContent<'r> {
    text: &'r str,
    attachments: &'r [Attachment],
    resolver: &'r dyn AttachmentResolver,
}

impl Serialize for UserContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let any_image = self
            .attachments
            .iter()
            .any(|a| self.resolver.image_url(a).is_some());
        if !any_image {
            // Only messages with attachments come here, and they are few:
            // joining their references costs one small string.
            let mut text = String::from(self.text);
            for attachment in self.attachments {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&attachment.reference());
            }
            return serializer.serialize_str(&text);
        }
        let mut seq = serializer.serialize_seq(None)?;
        if !self.text.is_empty() {
            seq.serialize_element(&TextPart(self.text))?;
        }
        for attachment in self.attachments {
            match self.resolver.image_url(attachment) {
                Some(url) => seq.serialize_element(&ImagePart(url))?,
                None => seq.serialize_element(&TextPart(&attachment.reference()))?,
            }
        }
        seq.end()
    }
}

/// `{"type":"text","text":…}`.
struct TextPart<'r>(&'r str);

impl Serialize for TextPart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type", "text")?;
        map.serialize_entry("text", self.0)?;
        map.end()
    }
}

/// `{"type":"image_url","image_url":{"url":…}}`.
struct ImagePart<'r>(&'r str);

impl Serialize for ImagePart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Url<'r>(&'r str);
        impl Serialize for Url<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("url", self.0)?;
                map.end()
            }
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type", "image_url")?;
        map.serialize_entry("image_url", &Url(self.0))?;
        map.end()
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
