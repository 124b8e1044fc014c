//! Incremental decoding of `chat.completion.chunk` server-sent-event streams.
//!
//! [`SseDecoder`] is a push parser: feed it whatever the transport read, split
//! anywhere, and it calls the [`StreamSink`] as pieces of text arrive and
//! accumulates the [`Completion`]. [`decode_stream`] drives it from an
//! `embedded-io` reader.
//!
//! # Framing (the SSE spec, plus what real servers do; shared with the
//! Anthropic decoder through `codec::frame`)
//! - Lines end in `\n`, `\r\n` or `\r`; a `\r\n` split across two feeds is one
//!   line end. A UTF-8 byte-order mark before the first line is skipped.
//! - `data:` lines (one optional space after the colon) of one event are
//!   joined with `\n` and dispatched at a blank line. Some servers never send
//!   blank lines: when a `data:` line arrives while the pending data already
//!   is a complete JSON value, the pending event is dispatched first, and a
//!   complete pending event is also accepted at EOF.
//! - `:` lines are comments (keep-alives): they reach the sink as
//!   [`StreamSink::on_progress`], a chance to stop during long silences.
//! - `event: error` turns the event's data into [`DecodeError::Provider`];
//!   other `event:`, `id:`, `retry:` and unknown fields are ignored.
//! - `data: [DONE]` ends the stream.
//! - A body whose first line opens a JSON value (`{` or `[`) is not SSE: a
//!   server that ignored `stream: true`, or an error object. It is buffered
//!   and decoded at EOF like a non-streaming body ([`decode_response`]), so
//!   its text reaches the completion but not the sink.
//!
//! # Chunks
//! Only `choices[0]` is read. `delta.content` (and `delta.refusal`) go to
//! [`StreamSink::on_text`], `delta.reasoning_content` or `delta.reasoning` to
//! [`StreamSink::on_reasoning`]; a chunk without text calls
//! [`StreamSink::on_progress`]. Tool-call deltas are joined by `index`: `id`
//! and `name` are taken from the first fragment that has them, `arguments` are
//! appended. A top-level `usage` (possibly in a final chunk with no choices) is
//! kept, and so is the `finish_reason`. A chunk with an `error` member is a
//! [`DecodeError::Provider`] (providers report failures mid-stream this way).
//!
//! # Stopping
//! When the sink returns [`Flow::Stop`] the decoder stops at once: the rest of
//! that chunk and of the fed bytes is dropped, and [`SseStatus::Stopped`] is
//! returned. The accumulated text is then exactly the text the sink was shown.

// Numbers here come from the outside (a provider, a platform, a header):
// arithmetic on them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, SeqAccess, Visitor};

use super::fast::{self, ToolDelta};
use super::frame::{DEFAULT_MAX_EVENT_BYTES, FrameHandler, MAX_TOOL_CALLS, SseFramer, SseStatus};
use super::reasoning;
use super::response::{decode_error_body, decode_response, provider_error};
use super::{DecodeError, StreamError};
use crate::message::{FinishReason, FunctionCall, ToolCall, ToolCallKind, Usage};
use crate::model::{Completion, Flow, NullSink, StreamSink};

/// Bytes asked of the reader per `read` in [`decode_stream`].
const READ_CHUNK: usize = 8 * 1024;

/// Where the decoder is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Streaming,
    Done,
    Stopped,
    /// An error was returned; it is returned again on every later feed.
    Failed(DecodeError),
}

/// One tool call being assembled from deltas.
#[derive(Clone, Debug)]
struct ToolSlot {
    index: u32,
    id: String,
    name: String,
    arguments: String,
}

/// Puts `slot` at `at` (the end if past it), unless the completion has
/// [`MAX_TOOL_CALLS`] calls already.
fn insert_tool(tools: &mut Vec<ToolSlot>, at: usize, slot: ToolSlot) -> Result<(), DecodeError> {
    if tools.len() >= MAX_TOOL_CALLS {
        return Err(DecodeError::TooManyToolCalls {
            limit: MAX_TOOL_CALLS,
        });
    }
    tools.insert(at.min(tools.len()), slot);
    Ok(())
}

/// The incremental decoder of one streamed completion. See the module docs.
#[derive(Clone)]
pub struct SseDecoder {
    frame: SseFramer,
    chunks: Chunks,
    state: State,
}

/// What the chunks decoded so far add up to.
#[derive(Clone, Default)]
struct Chunks {
    content: String,
    reasoning: String,
    /// OpenRouter's `reasoning_details` pieces, joined by index.
    reasoning_details: reasoning::Details,
    /// Tool calls, sorted by their wire `index`; at most
    /// [`MAX_TOOL_CALLS`] ([`insert_tool`]). On the heap: the decoder moves
    /// by value as a completion ends, and 64 slots inline made each move a
    /// 5 KB copy, ≈ 5 k instructions a tool turn (issue 39).
    tools: Vec<ToolSlot>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    /// Chunk events decoded so far.
    events: u64,
}

impl fmt::Debug for SseDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseDecoder")
            .field("state", &self.state)
            .field("events", &self.chunks.events)
            .field("content_len", &self.chunks.content.len())
            .field("tool_calls", &self.chunks.tools.len())
            .field("pending_bytes", &self.frame.pending_bytes())
            .finish()
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the default size cap ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder that fails with [`DecodeError::TooLarge`] when one line or
    /// one event exceeds `max_event_bytes`: a line is measured as received
    /// (field name included, line end excluded), an event as its `data:`
    /// values joined with `\n`, a plain JSON body as its lines joined with
    /// `\n`. Like everything else, this does not depend on how the bytes
    /// were split between feeds.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        SseDecoder {
            frame: SseFramer::new(max_event_bytes),
            chunks: Chunks::default(),
            state: State::Streaming,
        }
    }

    /// Feeds any slice of bytes (split anywhere: mid-line, mid-UTF-8
    /// character, mid-CRLF).
    ///
    /// After [`SseStatus::Done`] or [`SseStatus::Stopped`] further bytes are
    /// ignored; after an error, the same error is returned again. The
    /// decoded-so-far completion stays available through [`Self::partial`].
    pub fn feed(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<SseStatus, DecodeError> {
        match &self.state {
            State::Streaming => {}
            State::Done => return Ok(SseStatus::Done),
            State::Stopped => return Ok(SseStatus::Stopped),
            State::Failed(e) => return Err(e.clone()),
        }
        let result = self.frame.feed(bytes, &mut self.chunks, sink);
        match &result {
            Ok(SseStatus::NeedMore) => {}
            Ok(SseStatus::Done) => self.state = State::Done,
            Ok(SseStatus::Stopped) => self.state = State::Stopped,
            Err(e) => self.state = State::Failed(e.clone()),
        }
        result
    }

    /// The completion so far: for interrupts and broken streams. Holds every
    /// tool call seen, even unfinished ones; a caller that was interrupted
    /// drops them.
    pub fn partial(&self) -> Completion {
        Completion {
            content: non_empty(&self.chunks.content),
            tool_calls: self.chunks.tools.iter().map(slot_to_call).collect(),
            reasoning: non_empty(&self.chunks.reasoning),
            reasoning_details: self.chunks.reasoning_details.to_json(),
            model: None,
            finish_reason: self.chunks.finish_reason.clone(),
            usage: self.chunks.usage,
        }
    }

    /// The stream ended (EOF). Returns the completion if `[DONE]` was seen or
    /// a `finish_reason` arrived (or the sink stopped the stream), else
    /// [`DecodeError::Truncated`]. A last event without its blank line is
    /// accepted if it is complete. Call [`Self::partial`] first to keep the
    /// text on error ([`decode_stream`] does).
    pub fn finish(mut self) -> Result<Completion, DecodeError> {
        self.finish_in_place()?;
        Ok(self.into_completion())
    }

    /// [`Self::finish`] without consuming the decoder, so the caller can still
    /// take the partial completion after an error.
    pub(crate) fn finish_in_place(&mut self) -> Result<(), DecodeError> {
        match &self.state {
            State::Streaming => {}
            State::Done | State::Stopped => return Ok(()),
            State::Failed(e) => return Err(e.clone()),
        }
        let finished = self.frame.finish(&mut self.chunks, &mut NullSink)?;
        if let Some(body) = finished.raw_body {
            return self.finish_raw_body(&body);
        }
        if finished.status == Some(SseStatus::Done) {
            self.state = State::Done;
        }
        if self.state == State::Done || self.chunks.finish_reason.is_some() {
            Ok(())
        } else {
            Err(DecodeError::Truncated {
                events: self.chunks.events,
                pending_bytes: finished.pending_bytes,
            })
        }
    }

    /// Decodes a plain JSON body received where a stream was expected.
    fn finish_raw_body(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let body = decode_response(body)?;
        self.chunks.content = body.content.unwrap_or_default();
        self.chunks.reasoning = body.reasoning.unwrap_or_default();
        self.chunks.reasoning_details = reasoning::Details::default();
        if let Some(details) = body.reasoning_details.as_deref()
            && let Ok(serde_json::Value::Array(blocks)) = serde_json::from_str(details)
        {
            for block in blocks {
                if let serde_json::Value::Object(block) = block {
                    self.chunks.reasoning_details.push(block);
                }
            }
        }
        self.chunks.finish_reason = body.finish_reason;
        self.chunks.usage = body.usage;
        self.chunks.tools.clear();
        for (index, call) in (0u32..).zip(body.tool_calls) {
            let slot = ToolSlot {
                index,
                id: call.id,
                name: call.function.name,
                arguments: call.function.arguments,
            };
            let at = self.chunks.tools.len();
            insert_tool(&mut self.chunks.tools, at, slot)?;
        }
        self.state = State::Done;
        Ok(())
    }

    /// One chunk through the decoder's own path (the fast one first), for
    /// the fast path's differential checks.
    pub(crate) fn apply_chunk(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        self.chunks.apply_chunk(data, sink)
    }

    /// The general (serde) chunk path alone, for the fast path's
    /// differential checks.
    pub(crate) fn apply_chunk_serde(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        self.chunks.apply_chunk_serde(data, sink)
    }

    fn into_completion(self) -> Completion {
        // A call the provider sent without id keeps an empty one; the agent
        // loop names it uniquely for the conversation (SPEC L7).
        let chunks = self.chunks;
        let tool_calls = chunks
            .tools
            .into_iter()
            .map(|slot| ToolCall {
                id: slot.id,
                kind: ToolCallKind::Function,
                function: FunctionCall {
                    name: slot.name,
                    arguments: slot.arguments,
                },
            })
            .collect();
        Completion {
            content: (!chunks.content.is_empty()).then_some(chunks.content),
            tool_calls,
            reasoning: (!chunks.reasoning.is_empty()).then_some(chunks.reasoning),
            reasoning_details: chunks.reasoning_details.to_json(),
            model: None,
            finish_reason: chunks.finish_reason,
            usage: chunks.usage,
        }
    }
}

impl FrameHandler for Chunks {
    fn event(
        &mut self,
        name: &str,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        if name == "error" {
            return Err(error_event(data));
        }
        self.handle_data(data, sink)
    }
}

impl Chunks {
    fn handle_data(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            return Ok(Some(SseStatus::Done));
        }
        if trimmed.is_empty() {
            return Ok(None);
        }
        self.apply_chunk(data, sink)
    }

    /// Decodes one `chat.completion.chunk` and applies it.
    fn apply_chunk(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        // Nearly every chunk carries one content delta or one tool call's
        // fragment, and each answer ends with a finish chunk.
        let start = self.content.len();
        let mut found = fast::FastChunk::default();
        match fast::chunk(data, &mut self.content, &mut found) {
            Some(()) => self.apply_fast(start, &found, sink),
            None => self.apply_chunk_serde(data, sink),
        }
    }

    /// Applies what the fast path read, in the serde path's order: the
    /// text (appended from `start` on), the tool-call fragments, the finish
    /// reason, then progress if nothing was shown.
    fn apply_fast(
        &mut self,
        start: usize,
        chunk: &fast::FastChunk<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        self.events = self.events.saturating_add(1);
        let shown = match self.content.get(start..) {
            Some(text) if !text.is_empty() => {
                if sink.on_text(text) == Flow::Stop {
                    return Ok(Some(SseStatus::Stopped));
                }
                true
            }
            _ => false,
        };
        for call in &chunk.tool_calls {
            self.apply_tool_delta(call)?;
        }
        if let Some(reason) = chunk.finish_reason {
            self.finish_reason = Some(FinishReason::parse(reason));
        }
        if !shown && sink.on_progress() == Flow::Stop {
            return Ok(Some(SseStatus::Stopped));
        }
        Ok(None)
    }

    /// The general path: any chunk serde can read.
    pub(crate) fn apply_chunk_serde(
        &mut self,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        let chunk: Chunk<'_> = serde_json::from_slice(data).map_err(|e| DecodeError::json(&e))?;
        if chunk.error.is_some() {
            return Err(provider_error(data));
        }
        self.events = self.events.saturating_add(1);
        let mut shown = false;
        if let Some(FirstChoice(Some(choice))) = chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(Text(r)) = delta.reasoning_content.or(delta.reasoning)
                    && !r.is_empty()
                {
                    shown = true;
                    self.reasoning.push_str(&r);
                    if sink.on_reasoning(&r) == Flow::Stop {
                        return Ok(Some(SseStatus::Stopped));
                    }
                }
                for Text(text) in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        shown = true;
                        self.content.push_str(&text);
                        if sink.on_text(&text) == Flow::Stop {
                            return Ok(Some(SseStatus::Stopped));
                        }
                    }
                }
                if let Some(details) = delta.reasoning_details {
                    self.reasoning_details.merge(details);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.apply_tool_delta(&call.into())?;
                }
            }
            if let Some(Text(reason)) = choice.finish_reason
                && !reason.is_empty()
            {
                self.finish_reason = Some(FinishReason::parse(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        if !shown && sink.on_progress() == Flow::Stop {
            return Ok(Some(SseStatus::Stopped));
        }
        Ok(None)
    }

    /// Joins one tool-call fragment into its slot.
    fn apply_tool_delta(&mut self, call: &ToolDelta<'_>) -> Result<(), DecodeError> {
        let id = call.id.as_deref().filter(|id| !id.is_empty());
        let name = call.name.as_deref().filter(|n| !n.is_empty());
        let found = match call.index {
            Some(index) => self.tools.iter().position(|s| s.index == index),
            // `index` is required by the spec but some OpenAI-compatible
            // servers omit it: a new id (or a second name) opens a new call,
            // anything else continues the last one.
            None => match (id, self.tools.last()) {
                (Some(id), _) => self.tools.iter().position(|s| s.id == id),
                (None, Some(last)) if name.is_some() && !last.name.is_empty() => None,
                (None, Some(_)) => self.tools.len().checked_sub(1),
                (None, None) => None,
            },
        };
        let at = match found {
            Some(at) => at,
            None => {
                let index = call
                    .index
                    .unwrap_or_else(|| self.tools.last().map_or(0, |s| s.index.saturating_add(1)));
                let at = self
                    .tools
                    .iter()
                    .position(|s| s.index > index)
                    .unwrap_or(self.tools.len());
                let slot = ToolSlot {
                    index,
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                };
                insert_tool(&mut self.tools, at, slot)?;
                at
            }
        };
        let Some(slot) = self.tools.get_mut(at) else {
            return Ok(());
        };
        if let (Some(id), true) = (id, slot.id.is_empty()) {
            slot.id.push_str(id);
        }
        if let (Some(name), true) = (name, slot.name.is_empty()) {
            slot.name.push_str(name);
        }
        if let Some(args) = &call.arguments {
            slot.arguments.push_str(args);
        }
        Ok(())
    }
}

/// Reads `reader` to its end (or to `[DONE]`, or until the sink stops) and
/// decodes the stream.
///
/// `Ok` with the partial completion when the sink said [`Flow::Stop`] (an
/// interrupt). Reader errors of kind `Interrupted` are retried.
#[expect(
    clippy::result_large_err,
    reason = "the partial completion is the point of the error, and the path is cold"
)]
pub fn decode_stream<R: embedded_io::Read>(
    reader: &mut R,
    sink: &mut dyn StreamSink,
) -> Result<Completion, StreamError<R::Error>> {
    use embedded_io::Error as _;
    let mut decoder = SseDecoder::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == embedded_io::ErrorKind::Interrupted => continue,
            Err(error) => {
                return Err(StreamError::Io {
                    error,
                    partial: decoder.into_completion(),
                });
            }
        };
        // A reader claiming more than the buffer is broken; use what fits.
        let read = buf.get(..n).unwrap_or(&buf);
        match decoder.feed(read, sink) {
            Ok(SseStatus::NeedMore) => {}
            Ok(SseStatus::Done) => break,
            Ok(SseStatus::Stopped) => return Ok(decoder.into_completion()),
            Err(error) => {
                return Err(StreamError::Decode {
                    error,
                    partial: decoder.into_completion(),
                });
            }
        }
    }
    match decoder.finish_in_place() {
        Ok(()) => Ok(decoder.into_completion()),
        Err(error) => Err(StreamError::Decode {
            error,
            partial: decoder.into_completion(),
        }),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| String::from(s))
}

/// A slot as a call; a missing id stays empty (see `into_completion`).
fn slot_to_call(slot: &ToolSlot) -> ToolCall {
    ToolCall {
        id: slot.id.clone(),
        kind: ToolCallKind::Function,
        function: FunctionCall {
            name: slot.name.clone(),
            arguments: slot.arguments.clone(),
        },
    }
}

/// The error carried by an `event: error` event.
fn error_event(data: &[u8]) -> DecodeError {
    let message = decode_error_body(data)
        .unwrap_or_else(|| String::from_utf8_lossy(data.trim_ascii()).into_owned());
    DecodeError::Provider { message }
}

/// A string that borrows from the chunk when it has no escapes.
///
/// serde borrows `Cow<str>` only as a bare field type, not inside `Option`,
/// hence this wrapper.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(String::from(v))))
            }
        }
        deserializer.deserialize_str(V(PhantomData))
    }
}

/// `choices`, keeping only the first element (the encoder never asks for
/// `n > 1`) without allocating a vector per chunk.
struct FirstChoice<'a>(Option<ChunkChoice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<ChunkChoice<'a>>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
        }
        deserializer.deserialize_seq(V(PhantomData))
    }
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<FirstChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    refusal: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Text<'a>>,
    /// OpenRouter's structured reasoning pieces (rare: parsed as values).
    #[serde(default)]
    reasoning_details: Option<serde_json::Value>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

impl<'a> From<ToolCallDelta<'a>> for ToolDelta<'a> {
    fn from(call: ToolCallDelta<'a>) -> Self {
        let (name, arguments) = call.function.map_or((None, None), |f| {
            (f.name.map(|t| t.0), f.arguments.map(|t| t.0))
        });
        ToolDelta {
            index: call.index,
            id: call.id.map(|t| t.0),
            name,
            arguments,
        }
    }
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    arguments: Option<Text<'a>>,
}

#[cfg(test)]
mod tests;
