//! Request encoding: a borrowed [`ChatRequest`] to chat-completions JSON.
//!
//! The body is serialized straight from the borrowed ledger through small
//! `Serialize` views; no intermediate `api_messages` vector, no clone of the
//! history (SPEC L5). Only `entry.message` is visited, so ledger metadata
//! cannot reach the wire — with one explicit exception, see below.
//!
//! # Decorations (SPEC X3, reasoning)
//! Two per-call options change how some messages are written, without
//! touching the ledger type: the encoder decorates the borrowed message as
//! it serializes it.
//! - **Cache breakpoints** ([`RequestOptions::cache`]): the system prompt and
//!   the last three messages that can carry one (the last four when there is
//!   no system prompt) are written with their content as one text part
//!   marked `cache_control: {"type":"ephemeral"}` — at most four breakpoints,
//!   Anthropic's limit. A message can carry one when its text is not empty
//!   (an assistant message that only calls tools cannot). Placement is found
//!   by walking back from the end, so it costs the same whatever the length
//!   of the history. (Image parts of user messages join the same parts array;
//!   the marker goes on the last part.)
//! - **Reasoning echo** ([`RequestOptions::reasoning_echo`]): the one way a
//!   ledger field reaches the wire. Providers that require the model's
//!   earlier reasoning back (DeepSeek's thinking mode and Kimi K2 with tool
//!   calls: `reasoning_content`; OpenRouter: `reasoning_details`) get exactly
//!   that field, on the assistant messages of turns that called tools, and
//!   only when the caller asks for it. Everything else in
//!   [`EntryMeta`](crate::EntryMeta) stays off the wire.
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

mod encoder;
pub use encoder::RequestEncoder;

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
    /// Explicit prompt-cache breakpoints (Anthropic models, directly or
    /// through OpenRouter); `None` sends nothing extra (SPEC X3).
    pub cache: Option<CacheControl>,
    /// How much the model should reason, and in which dialect.
    pub reasoning: Option<Reasoning<'a>>,
    /// Which stored reasoning to send back, for providers that require it.
    pub reasoning_echo: ReasoningEcho,
}

/// A `cache_control` marker: `{"type":"ephemeral"}`, optionally with a one
/// hour lifetime instead of the default five minutes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `"ttl":"1h"`.
    pub one_hour: bool,
}

impl Serialize for CacheControl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "ephemeral")?;
        if self.one_hour {
            map.serialize_entry("ttl", "1h")?;
        }
        map.end()
    }
}

/// A reasoning-effort setting (`minimal`, `low`, `medium`, `high`, …) as
/// each dialect spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reasoning<'a> {
    /// OpenAI's top-level `"reasoning_effort": "high"` (DeepSeek, Kimi and
    /// most compatible servers read it too).
    Effort(&'a str),
    /// OpenRouter's `"reasoning": {"effort": "high"}`.
    OpenRouter(&'a str),
}

/// Which stored reasoning goes back to the provider on assistant messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningEcho {
    /// Nothing: the default, and what providers that reject unknown fields
    /// need.
    #[default]
    Off,
    /// `reasoning_content` on every assistant message of a turn (the
    /// messages between two user messages) in which the model called tools:
    /// DeepSeek's thinking mode and Kimi K2 thinking refuse a tool loop whose
    /// reasoning was dropped. A message of such a turn without stored
    /// reasoning gets an empty one (after a fallback from a model that
    /// produced none), which those validators accept.
    ReasoningContent,
    /// OpenRouter's `reasoning_details`, verbatim, on the assistant messages
    /// that have them in turns that called tools (OpenRouter passes them to
    /// the model's provider, which checks their signatures within a tool
    /// loop and ignores them elsewhere).
    ReasoningDetails,
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
            cache: None,
            reasoning: None,
            reasoning_echo: ReasoningEcho::Off,
        }
    }
}

/// Appends the JSON body of one chat-completions call to `out`.
///
/// Field order: `model`, `messages` (system prompt first unless empty, then
/// each ledger entry's message), `tools` (omitted when empty), `stream`,
/// `stream_options` (streaming with usage only), `max_tokens`, `temperature`,
/// then `reasoning_effort` or `reasoning` when set.
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
    // parts are built in vectors and joined into `out`.
    let head = serde_json::to_vec(&Head {
        opts,
        req,
        attachments,
    })
    .map_err(EncodeError::Json)?;
    let tail = serde_json::to_vec(&Tail(opts)).map_err(EncodeError::Json)?;
    super::join_body(head, req, &TOOLS, &tail, out)
}

/// The chat-completions `tools` and `tool_choice: "none"`.
const TOOLS: super::ToolsDialect = super::ToolsDialect {
    write: write_tools,
    none_choice: b"\"none\"",
};

/// Appends the `tools` array,
/// `[{"type":"function","function":{"name":…,"description":…,"parameters":…}},…]`,
/// each schema's text as it is (see [`SchemaText`](crate::SchemaText)).
pub(super) fn write_tools(specs: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.push(b'[');
    for (i, spec) in specs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
        super::push_json_string(&spec.name, out)?;
        out.extend_from_slice(b",\"description\":");
        super::push_json_string(&spec.description, out)?;
        out.extend_from_slice(b",\"parameters\":");
        out.extend_from_slice(spec.parameters.as_str().as_bytes());
        out.extend_from_slice(b"}}");
    }
    out.push(b']');
    Ok(())
}

/// The fields after `tools`, as a map of their own.
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
        serialize_reasoning(&mut map, opts.reasoning)?;
        map.end()
    }
}

/// `reasoning_effort` or OpenRouter's `reasoning`, as [`Tail`] writes them.
fn serialize_reasoning<M: SerializeMap>(
    map: &mut M,
    reasoning: Option<Reasoning<'_>>,
) -> Result<(), M::Error> {
    match reasoning {
        Some(Reasoning::Effort(effort)) => map.serialize_entry("reasoning_effort", effort),
        Some(Reasoning::OpenRouter(effort)) => {
            map.serialize_entry("reasoning", &EffortObject(effort))
        }
        None => Ok(()),
    }
}

/// The body's fields before `tools`: `model` and `messages`.
struct Head<'o, 'r> {
    opts: &'o RequestOptions<'o>,
    req: &'o ChatRequest<'r>,
    attachments: &'o dyn AttachmentResolver,
}

impl Serialize for Head<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("model", self.opts.model)?;
        map.serialize_entry(
            "messages",
            &Messages {
                system_prompt: self.req.system_prompt,
                entries: self.req.messages,
                attachments: self.attachments,
                cache: self.opts.cache,
                echo: self.opts.reasoning_echo,
            },
        )?;
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

/// `{"effort":…}`.
struct EffortObject<'r>(&'r str);

impl Serialize for EffortObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("effort", self.0)?;
        map.end()
    }
}

/// The `messages` array: the system prompt, then each entry's wire message.
struct Messages<'r> {
    system_prompt: &'r str,
    entries: &'r [LedgerEntry],
    attachments: &'r dyn AttachmentResolver,
    cache: Option<CacheControl>,
    echo: ReasoningEcho,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // No length up front: empty assistant messages are skipped, and
        // counting them first would be a second pass over the history.
        let system = !self.system_prompt.is_empty();
        let breakpoints = match self.cache {
            Some(_) => Breakpoints::place(self.entries, if system { 3 } else { 4 }),
            None => Breakpoints::default(),
        };
        let mut seq = serializer.serialize_seq(None)?;
        if system {
            seq.serialize_element(&SystemMessage {
                content: self.system_prompt,
                cache: self.cache,
            })?;
        }
        // Whether the current turn (up to the next user message) called
        // tools; only computed for the echo that needs it.
        let mut tool_turn = false;
        for (i, entry) in self.entries.iter().enumerate() {
            if self.echo != ReasoningEcho::Off
                && (i == 0 || matches!(entry.message, Message::User { .. }))
            {
                tool_turn = turn_calls_tools(self.entries.get(i..).unwrap_or_default());
            }
            if !on_wire(&entry.message) {
                continue;
            }
            let cache = self.cache.filter(|_| breakpoints.contains(i));
            let reasoning = match (self.echo, &entry.message) {
                (ReasoningEcho::ReasoningContent, Message::Assistant { .. }) if tool_turn => {
                    Echo::Content(entry.meta.reasoning.as_deref().unwrap_or(""))
                }
                (ReasoningEcho::ReasoningDetails, Message::Assistant { .. }) if tool_turn => entry
                    .meta
                    .reasoning_details
                    .as_deref()
                    .and_then(|raw| serde_json::from_str(raw).ok())
                    .map_or(Echo::None, Echo::Details),
                _ => Echo::None,
            };
            if cache.is_none() && matches!(reasoning, Echo::None) {
                // Only the wire half of the entry: `meta` is never visited.
                seq.serialize_element(&WireMessage {
                    message: &entry.message,
                    attachments: self.attachments,
                })?;
            } else {
                seq.serialize_element(&Decorated {
                    message: &entry.message,
                    cache,
                    reasoning,
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
                        cache: None,
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
/// an `image_url` part or its text reference, in order). A cache marker goes
/// on the last part.
struct UserContent<'r> {
    text: &'r str,
    attachments: &'r [Attachment],
    resolver: &'r dyn AttachmentResolver,
    cache: Option<CacheControl>,
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
            return Content::new(&text, self.cache).serialize(serializer);
        }
        let mut seq = serializer.serialize_seq(None)?;
        let last = self.attachments.len();
        if !self.text.is_empty() {
            seq.serialize_element(&TextPart {
                text: self.text,
                cache: self.cache.filter(|_| last == 0),
            })?;
        }
        for (i, attachment) in self.attachments.iter().enumerate() {
            let cache = self.cache.filter(|_| i + 1 == last);
            match self.resolver.image_url(attachment) {
                Some(url) => seq.serialize_element(&ImagePart { url, cache })?,
                None => seq.serialize_element(&TextPart {
                    text: &attachment.reference(),
                    cache,
                })?,
            }
        }
        seq.end()
    }
}

/// `{"type":"image_url","image_url":{"url":…}[,"cache_control":{…}]}`.
struct ImagePart<'r> {
    url: &'r str,
    cache: Option<CacheControl>,
}

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
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "image_url")?;
        map.serialize_entry("image_url", &Url(self.url))?;
        if let Some(marker) = &self.cache {
            map.serialize_entry("cache_control", marker)?;
        }
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

/// Whether the turn starting at `entries[0]` (up to, not including, the
/// next user message) has an assistant message with tool calls.
fn turn_calls_tools(entries: &[LedgerEntry]) -> bool {
    entries
        .iter()
        .enumerate()
        .take_while(|(i, e)| *i == 0 || !matches!(e.message, Message::User { .. }))
        .any(|(_, e)| !e.message.tool_calls().is_empty())
}

/// The ledger positions that get a cache breakpoint.
#[derive(Default)]
struct Breakpoints {
    at: [usize; 4],
    len: usize,
}

impl Breakpoints {
    /// The last `max` entries whose message can carry a marker, found
    /// walking back from the end (so the cost does not grow with the history
    /// when recent messages have text, as they nearly always do).
    fn place(entries: &[LedgerEntry], max: usize) -> Self {
        let mut found = Breakpoints::default();
        for (i, entry) in entries.iter().enumerate().rev() {
            if found.len >= max.min(found.at.len()) {
                break;
            }
            if entry.message.content().is_some_and(|c| !c.is_empty())
                && let Some(slot) = found.at.get_mut(found.len)
            {
                *slot = i;
                found.len += 1;
            }
        }
        found
    }

    fn contains(&self, i: usize) -> bool {
        self.at.get(..self.len).is_some_and(|at| at.contains(&i))
    }
}

/// What a decorated assistant message carries back of its reasoning.
#[derive(Clone, Copy)]
enum Echo<'r> {
    None,
    Content(&'r str),
    Details(&'r serde_json::value::RawValue),
}

/// A message written with its decorations: content as a marked text part,
/// and/or the echoed reasoning. The fields and their order are the derived
/// `Message` encoding's, plus the echo last.
struct Decorated<'r> {
    message: &'r Message,
    cache: Option<CacheControl>,
    reasoning: Echo<'r>,
    attachments: &'r dyn AttachmentResolver,
}

impl Serialize for Decorated<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", self.message.role().as_str())?;
        match self.message {
            Message::User {
                content,
                attachments,
            } if !attachments.is_empty() => {
                map.serialize_entry(
                    "content",
                    &UserContent {
                        text: content,
                        attachments,
                        resolver: self.attachments,
                        cache: self.cache,
                    },
                )?;
            }
            Message::User { content, .. } => {
                map.serialize_entry("content", &Content::new(content, self.cache))?;
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                match content {
                    Some(text) => {
                        map.serialize_entry("content", &Content::new(text, self.cache))?
                    }
                    None => map.serialize_entry("content", &None::<&str>)?,
                }
                if !tool_calls.is_empty() {
                    map.serialize_entry("tool_calls", &WireToolCalls(tool_calls))?;
                }
            }
            Message::Tool {
                tool_call_id,
                content,
            } => {
                map.serialize_entry("tool_call_id", tool_call_id)?;
                map.serialize_entry("content", &Content::new(content, self.cache))?;
            }
        }
        match self.reasoning {
            Echo::None => {}
            Echo::Content(text) => map.serialize_entry("reasoning_content", text)?,
            Echo::Details(raw) => map.serialize_entry("reasoning_details", raw)?,
        }
        map.end()
    }
}

/// A message's content: a plain string, or — with a cache marker — one text
/// part carrying it.
struct Content<'r> {
    text: &'r str,
    cache: Option<CacheControl>,
}

impl<'r> Content<'r> {
    fn new(text: &'r str, cache: Option<CacheControl>) -> Self {
        Content { text, cache }
    }
}

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.cache {
            None => serializer.serialize_str(self.text),
            Some(marker) => {
                let mut seq = serializer.serialize_seq(Some(1))?;
                seq.serialize_element(&TextPart {
                    text: self.text,
                    cache: Some(marker),
                })?;
                seq.end()
            }
        }
    }
}

/// `{"type":"text","text":…[,"cache_control":{…}]}`.
struct TextPart<'r> {
    text: &'r str,
    cache: Option<CacheControl>,
}

impl Serialize for TextPart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "text")?;
        map.serialize_entry("text", self.text)?;
        if let Some(marker) = &self.cache {
            map.serialize_entry("cache_control", marker)?;
        }
        map.end()
    }
}

/// `{"role":"system","content":…}`; not a `Message` because the ledger has no
/// system role (SPEC L6). With caching on, the content is one marked part.
struct SystemMessage<'r> {
    content: &'r str,
    cache: Option<CacheControl>,
}

impl Serialize for SystemMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "system")?;
        map.serialize_entry("content", &Content::new(self.content, self.cache))?;
        map.end()
    }
}
