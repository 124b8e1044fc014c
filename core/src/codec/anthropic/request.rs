//! A borrowed [`ChatRequest`] as an Anthropic Messages request body.
//!
//! The ledger maps onto Anthropic's shape without a copy of the history:
//! - the system prompt is the top-level `system` (a list of one text block
//!   when it carries a cache breakpoint), left out when empty;
//! - a user message is a `user` message; an assistant message an
//!   `assistant` message of blocks — echoed thinking blocks (see below),
//!   then its text (if any), then one `tool_use` block per call with the
//!   arguments as the `input` object (arguments that are not a JSON object
//!   go out as `{}`: the loop already answered such a call with an error);
//! - consecutive tool results form one `user` message of `tool_result`
//!   blocks, as the API requires right after the `tool_use` message;
//! - an assistant message with neither text nor tool calls (an interrupted
//!   or cut turn) is left out: Anthropic refuses empty content;
//! - tool-call ids are written with every character outside
//!   `[A-Za-z0-9_-]` as `_` (Anthropic's id alphabet; ids from other
//!   providers may use more), the same way in `tool_use` and `tool_result`.
//!
//! **Cache breakpoints** ([`MessagesOptions::cache`]): the system prompt and
//! the last three wire messages (four without a system prompt), each on its
//! last block — at most four, Anthropic's limit. Tools need none: they come
//! before the system prompt in Anthropic's cache prefix.
//!
//! **Thinking** ([`MessagesOptions::thinking_budget`]): `thinking:
//! {"type":"enabled","budget_tokens":N}`, no `temperature` (the API refuses
//! one), and `max_tokens` raised above the budget. In turns that called
//! tools, each assistant message's stored reasoning blocks (their
//! signatures checked by the API) go back first in its content, as the API
//! requires within a tool loop.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::super::request::CacheControl;
use super::super::{EncodeError, ToolsDialect, join_body, push_json_string};
use crate::message::{LedgerEntry, Message, ToolCall};
use crate::model::ChatRequest;
use crate::tool::ToolSpec;

/// The output cap sent when the caller sets none (`max_tokens` is required).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Room left for the answer above a thinking budget.
const ANSWER_ROOM: u32 = 4096;

/// Per-call settings of an Anthropic Messages request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MessagesOptions<'a> {
    /// The model (`claude-sonnet-4-5`, …).
    pub model: &'a str,
    /// Ask for an event stream.
    pub stream: bool,
    /// Output token cap (required by the API); [`DEFAULT_MAX_TOKENS`] when
    /// `None`.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; omitted when `None` or with thinking on.
    pub temperature: Option<f32>,
    /// Cache breakpoints (SPEC X3); `None` sends none.
    pub cache: Option<CacheControl>,
    /// Extended thinking with this token budget (at least 1024).
    pub thinking_budget: Option<u32>,
}

impl<'a> MessagesOptions<'a> {
    /// Options for `model`: not streaming, default limits, no cache, no
    /// thinking.
    pub fn new(model: &'a str) -> Self {
        MessagesOptions {
            model,
            stream: false,
            max_tokens: None,
            temperature: None,
            cache: None,
            thinking_budget: None,
        }
    }
}

/// Appends the JSON body of one `POST /v1/messages` call to `out`; on error
/// `out` is left as it was.
pub fn encode_messages_request(
    opts: &MessagesOptions<'_>,
    req: &ChatRequest<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    if let Some(t) = opts.temperature
        && !t.is_finite()
    {
        return Err(EncodeError::InvalidTemperature(t));
    }
    let head = serde_json::to_vec(&Head { opts, req }).map_err(EncodeError::Json)?;
    let tail = serde_json::to_vec(&Tail(opts)).map_err(EncodeError::Json)?;
    join_body(head, req, &TOOLS, &tail, out)
}

/// Messages' `tools` and `tool_choice: {"type":"none"}`: the model must
/// answer in text.
const TOOLS: ToolsDialect = ToolsDialect {
    write: write_tools,
    none_choice: b"{\"type\":\"none\"}",
};

/// The extended-thinking budget `opts` asks for (at least 1024), and the
/// `max_tokens` that leaves room for an answer beside it.
fn thinking_and_max_tokens(opts: &MessagesOptions<'_>) -> (Option<u32>, u32) {
    let thinking = opts.thinking_budget.map(|b| b.max(1024));
    let mut max_tokens = opts.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if let Some(budget) = thinking {
        max_tokens = max_tokens.max(budget.saturating_add(ANSWER_ROOM));
    }
    (thinking, max_tokens)
}

/// The body's fields before `tools`: `model`, `max_tokens`, `system`,
/// `messages`.
struct Head<'o, 'r> {
    opts: &'o MessagesOptions<'o>,
    req: &'o ChatRequest<'r>,
}

impl Serialize for Head<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let opts = self.opts;
        let (thinking, max_tokens) = thinking_and_max_tokens(opts);
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", opts.model)?;
        map.serialize_entry("max_tokens", &max_tokens)?;
        let system = !self.req.system_prompt.is_empty();
        if system {
            match opts.cache {
                None => map.serialize_entry("system", self.req.system_prompt)?,
                Some(marker) => map.serialize_entry(
                    "system",
                    &[TextBlock {
                        text: self.req.system_prompt,
                        cache: Some(marker),
                    }],
                )?,
            }
        }
        map.serialize_entry(
            "messages",
            &Messages {
                entries: self.req.messages,
                cache: opts.cache,
                breakpoints: if system { 3 } else { 4 },
                echo_thinking: thinking.is_some(),
            },
        )?;
        map.end()
    }
}

/// The body's fields after `tools`: `stream`, then `thinking` or
/// `temperature`.
struct Tail<'o>(&'o MessagesOptions<'o>);

impl Serialize for Tail<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let opts = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("stream", &opts.stream)?;
        if let Some(budget) = thinking_and_max_tokens(opts).0 {
            map.serialize_entry("thinking", &Thinking(budget))?;
        } else if let Some(t) = opts.temperature {
            map.serialize_entry("temperature", &t)?;
        }
        map.end()
    }
}

/// `{"type":"enabled","budget_tokens":N}`.
struct Thinking(u32);

impl Serialize for Thinking {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type", "enabled")?;
        map.serialize_entry("budget_tokens", &self.0)?;
        map.end()
    }
}

/// Appends the `tools` array, `[{"name":…,"description":…,"input_schema":…},…]`,
/// each schema's text as it is (see [`SchemaText`](crate::SchemaText)).
fn write_tools(specs: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.push(b'[');
    for (i, spec) in specs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        push_json_string(&spec.name, out)?;
        out.extend_from_slice(b",\"description\":");
        push_json_string(&spec.description, out)?;
        out.extend_from_slice(b",\"input_schema\":");
        out.extend_from_slice(spec.parameters.as_str().as_bytes());
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

/// Whether an entry goes on the wire at all.
fn on_wire(message: &Message) -> bool {
    match message {
        Message::Assistant {
            content,
            tool_calls,
        } => !tool_calls.is_empty() || content.as_deref().is_some_and(|c| !c.is_empty()),
        Message::User { .. } | Message::Tool { .. } => true,
    }
}

/// Whether entry `i` is the last ledger entry of its wire message (a run
/// of tool results is one message).
fn ends_wire_message(entries: &[LedgerEntry], i: usize) -> bool {
    let is_tool =
        |e: Option<&LedgerEntry>| matches!(e.map(|e| &e.message), Some(Message::Tool { .. }));
    !(is_tool(entries.get(i)) && is_tool(entries.get(i.saturating_add(1))))
}

/// The ledger indices whose wire message gets a breakpoint: the last `max`
/// wire messages, found walking back from the end.
fn breakpoints(entries: &[LedgerEntry], max: usize) -> ([usize; 4], usize) {
    let mut at = [0usize; 4];
    let mut len = 0;
    for (i, entry) in entries.iter().enumerate().rev() {
        if len >= max.min(at.len()) {
            break;
        }
        if on_wire(&entry.message)
            && ends_wire_message(entries, i)
            && let Some(slot) = at.get_mut(len)
        {
            *slot = i;
            len += 1;
        }
    }
    (at, len)
}

struct Messages<'r> {
    entries: &'r [LedgerEntry],
    cache: Option<CacheControl>,
    breakpoints: usize,
    echo_thinking: bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (at, len) = match self.cache {
            Some(_) => breakpoints(self.entries, self.breakpoints),
            None => ([0; 4], 0),
        };
        let marked = |i: usize| -> Option<CacheControl> {
            self.cache
                .filter(|_| at.get(..len).is_some_and(|at| at.contains(&i)))
        };
        let mut seq = serializer.serialize_seq(None)?;
        let mut tool_turn = false;
        let mut i = 0;
        while let Some(entry) = self.entries.get(i) {
            if self.echo_thinking && (i == 0 || matches!(entry.message, Message::User { .. })) {
                tool_turn = turn_calls_tools(self.entries.get(i..).unwrap_or_default());
            }
            match &entry.message {
                Message::User {
                    content,
                    attachments,
                } => {
                    if attachments.is_empty() {
                        seq.serialize_element(&UserMessage {
                            text: content,
                            cache: marked(i),
                        })?;
                    } else {
                        // Attachments go as their text references here: this
                        // encoder sends no image blocks yet (SPEC X6 images
                        // reach models through the OpenAI-compatible codec).
                        let mut text = alloc::string::String::from(content.as_str());
                        for attachment in attachments {
                            if !text.is_empty() {
                                text.push_str("\n\n");
                            }
                            text.push_str(&attachment.reference());
                        }
                        seq.serialize_element(&UserMessage {
                            text: &text,
                            cache: marked(i),
                        })?;
                    }
                    i += 1;
                }
                message @ Message::Assistant { .. } => {
                    if on_wire(message) {
                        let details = entry
                            .meta
                            .reasoning_details
                            .as_deref()
                            .filter(|_| self.echo_thinking && tool_turn);
                        seq.serialize_element(&AssistantMessage {
                            message,
                            details,
                            cache: marked(i),
                        })?;
                    }
                    i += 1;
                }
                Message::Tool { .. } => {
                    let start = i;
                    while matches!(
                        self.entries.get(i).map(|e| &e.message),
                        Some(Message::Tool { .. })
                    ) {
                        i += 1;
                    }
                    let results = self.entries.get(start..i).unwrap_or_default();
                    seq.serialize_element(&ToolResults {
                        results,
                        cache: marked(i.saturating_sub(1)),
                    })?;
                }
            }
        }
        seq.end()
    }
}

/// Whether the turn starting at `entries[0]` (up to the next user message)
/// called tools.
fn turn_calls_tools(entries: &[LedgerEntry]) -> bool {
    entries
        .iter()
        .enumerate()
        .take_while(|(i, e)| *i == 0 || !matches!(e.message, Message::User { .. }))
        .any(|(_, e)| !e.message.tool_calls().is_empty())
}

/// `{"role":"user","content":…}`.
struct UserMessage<'r> {
    text: &'r str,
    cache: Option<CacheControl>,
}

impl Serialize for UserMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "user")?;
        match self.cache {
            None => map.serialize_entry("content", self.text)?,
            Some(marker) => map.serialize_entry(
                "content",
                &[TextBlock {
                    text: self.text,
                    cache: Some(marker),
                }],
            )?,
        }
        map.end()
    }
}

/// `{"type":"text","text":…[,"cache_control":…]}`.
struct TextBlock<'r> {
    text: &'r str,
    cache: Option<CacheControl>,
}

impl Serialize for TextBlock<'_> {
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

/// `{"role":"assistant","content":[thinking…, text?, tool_use…]}`.
struct AssistantMessage<'r> {
    message: &'r Message,
    /// Stored reasoning blocks to echo (OpenRouter `reasoning_details` form).
    details: Option<&'r str>,
    cache: Option<CacheControl>,
}

impl Serialize for AssistantMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Message::Assistant {
            content,
            tool_calls,
        } = self.message
        else {
            return serializer.serialize_none();
        };
        let text = content.as_deref().filter(|c| !c.is_empty());
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "assistant")?;
        map.serialize_entry(
            "content",
            &AssistantBlocks {
                text,
                tool_calls,
                details: self.details,
                cache: self.cache,
            },
        )?;
        map.end()
    }
}

struct AssistantBlocks<'r> {
    text: Option<&'r str>,
    tool_calls: &'r [ToolCall],
    details: Option<&'r str>,
    cache: Option<CacheControl>,
}

impl Serialize for AssistantBlocks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if let Some(details) = self.details {
            // Only blocks the API can verify: text with its signature, or
            // encrypted (redacted) reasoning. Anything else is dropped.
            let blocks: Vec<StoredDetail<'_>> = serde_json::from_str(details).unwrap_or_default();
            for block in &blocks {
                match (
                    block.kind.as_ref(),
                    &block.text,
                    &block.signature,
                    &block.data,
                ) {
                    ("reasoning.text", Some(text), Some(signature), _) if !signature.is_empty() => {
                        seq.serialize_element(&ThinkingBlock { text, signature })?
                    }
                    ("reasoning.encrypted", _, _, Some(data)) if !data.is_empty() => {
                        seq.serialize_element(&RedactedBlock(data))?
                    }
                    _ => {}
                }
            }
        }
        let last_call = self.tool_calls.len().checked_sub(1);
        if let Some(text) = self.text {
            seq.serialize_element(&TextBlock {
                text,
                cache: self.cache.filter(|_| last_call.is_none()),
            })?;
        }
        for (n, call) in self.tool_calls.iter().enumerate() {
            seq.serialize_element(&ToolUse {
                call,
                cache: self.cache.filter(|_| Some(n) == last_call),
            })?;
        }
        seq.end()
    }
}

/// One stored reasoning block, as read back for the echo.
#[derive(serde::Deserialize)]
struct StoredDetail<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
}

struct ThinkingBlock<'r> {
    text: &'r str,
    signature: &'r str,
}

impl Serialize for ThinkingBlock<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type", "thinking")?;
        map.serialize_entry("thinking", self.text)?;
        map.serialize_entry("signature", self.signature)?;
        map.end()
    }
}

struct RedactedBlock<'r>(&'r str);

impl Serialize for RedactedBlock<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("type", "redacted_thinking")?;
        map.serialize_entry("data", self.0)?;
        map.end()
    }
}

/// `{"type":"tool_use","id":…,"name":…,"input":{…}}`.
struct ToolUse<'r> {
    call: &'r ToolCall,
    cache: Option<CacheControl>,
}

impl Serialize for ToolUse<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "tool_use")?;
        map.serialize_entry("id", &WireId(&self.call.id))?;
        map.serialize_entry("name", &self.call.function.name)?;
        map.serialize_entry("input", &Input(&self.call.function.arguments))?;
        if let Some(marker) = &self.cache {
            map.serialize_entry("cache_control", marker)?;
        }
        map.end()
    }
}

/// Tool arguments as the `input` object: the model's JSON text verbatim
/// when it is an object, else `{}`.
struct Input<'r>(&'r str);

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&serde_json::value::RawValue>(self.0) {
            Ok(raw) if raw.get().trim_start().starts_with('{') => raw.serialize(serializer),
            _ => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

/// A tool-call id in Anthropic's alphabet.
struct WireId<'r>(&'r str);

impl Serialize for WireId<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if !self.0.is_empty() && self.0.chars().all(ok) {
            serializer.serialize_str(self.0)
        } else if self.0.is_empty() {
            serializer.serialize_str("_")
        } else {
            let cleaned: alloc::string::String = self
                .0
                .chars()
                .map(|c| if ok(c) { c } else { '_' })
                .collect();
            serializer.serialize_str(&cleaned)
        }
    }
}

/// `{"role":"user","content":[{"type":"tool_result",…}, …]}`.
struct ToolResults<'r> {
    results: &'r [LedgerEntry],
    cache: Option<CacheControl>,
}

impl Serialize for ToolResults<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Blocks<'r>(&'r ToolResults<'r>);
        impl Serialize for Blocks<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let results = self.0.results;
                let last = results.len().checked_sub(1);
                let mut seq = serializer.serialize_seq(Some(results.len()))?;
                for (n, entry) in results.iter().enumerate() {
                    if let Message::Tool {
                        tool_call_id,
                        content,
                    } = &entry.message
                    {
                        seq.serialize_element(&ToolResult {
                            id: tool_call_id,
                            content,
                            cache: self.0.cache.filter(|_| Some(n) == last),
                        })?;
                    }
                }
                seq.end()
            }
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("role", "user")?;
        map.serialize_entry("content", &Blocks(self))?;
        map.end()
    }
}

struct ToolResult<'r> {
    id: &'r str,
    content: &'r str,
    cache: Option<CacheControl>,
}

impl Serialize for ToolResult<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", "tool_result")?;
        map.serialize_entry("tool_use_id", &WireId(self.id))?;
        map.serialize_entry("content", self.content)?;
        if let Some(marker) = &self.cache {
            map.serialize_entry("cache_control", marker)?;
        }
        map.end()
    }
}
