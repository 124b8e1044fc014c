//! Server-sent-event framing, shared by the stream decoders of every wire
//! format (OpenAI chunks in [`super::sse`], Anthropic events in
//! [`super::anthropic`]).
//!
//! [`SseFramer`] is a push parser of the SSE line protocol (plus what real
//! servers do): it splits whatever bytes it is fed into lines (`\n`, `\r\n`
//! or `\r`, a `\r\n` split across feeds is one line end, a UTF-8 BOM before
//! the first line is skipped), joins an event's `data:` lines with `\n`, and
//! hands each complete event — at its blank line, or, from servers that never
//! send blank lines, when a new `data:` line arrives while the pending data
//! already is one complete JSON value — to a [`FrameHandler`]. Comment lines
//! (`:` keep-alives) become [`StreamSink::on_progress`]. A body whose first
//! line opens a JSON value is not SSE at all (a server that ignored
//! `stream: true`, or an error object): its lines are kept and handed over
//! whole by [`SseFramer::finish`].
//!
//! **Bounded memory:** one line, one event's data and a plain body are each
//! capped at `max_event_bytes`; the result does not depend on how the bytes
//! were split between feeds.

// Numbers here come from the outside (a provider, a platform, a header):
// arithmetic on them must be checked or saturating, never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

use alloc::vec::Vec;

use serde::de::IgnoredAny;

use super::{DecodeError, fast};
use crate::model::{Flow, StreamSink};

/// Default cap on one line or one event (16 MiB): far above any real chunk,
/// low enough that a server that never sends a line end cannot exhaust memory.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How many parallel tool calls one completion may open.
pub const MAX_TOOL_CALLS: usize = 64;

/// What a stream decoder's `feed` saw ([`super::SseDecoder::feed`],
/// [`super::anthropic::MessagesStreamDecoder::feed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseStatus {
    /// All fed bytes were consumed; the stream is not over.
    NeedMore,
    /// `data: [DONE]` arrived: the stream is complete, stop reading.
    Done,
    /// The sink returned [`Flow::Stop`]: stop reading (an interrupt).
    Stopped,
}

/// Longest `event:` name kept; longer names are handed over as empty.
const EVENT_NAME_CAP: usize = 24;

/// Largest pending data checked for completeness when a blank line is missing.
const LENIENT_CHECK_MAX: usize = 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Receives complete events from an [`SseFramer`].
pub(crate) trait FrameHandler {
    /// One event: its `event:` name (empty when there was none, or it was
    /// too long to be one we know) and its `data:` lines joined with `\n`.
    /// `Some(status)` ends the feed (the stream is done, or the sink
    /// stopped it).
    fn event(
        &mut self,
        name: &str,
        data: &[u8],
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError>;
}

/// What was left when the stream ended.
pub(crate) struct Finished {
    /// What the last event (completed by the end of the stream) returned.
    pub(crate) status: Option<SseStatus>,
    /// The whole body, when the stream was a plain JSON document.
    pub(crate) raw_body: Option<Vec<u8>>,
    /// Bytes of an unfinished line or event at the end.
    pub(crate) pending_bytes: usize,
}

/// The framing state of one stream. See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct SseFramer {
    /// An unterminated line carried over from the previous feed.
    line: Vec<u8>,
    /// The previous feed ended in `\r`: a `\n` starting the next one belongs to it.
    skip_lf: bool,
    /// No line processed yet (a BOM may precede it).
    at_start: bool,
    /// The first line opened a plain JSON document instead of SSE fields.
    /// Every line then goes to `data`, handed over whole at the end.
    raw_body: bool,
    /// The joined `data:` lines of the pending event.
    data: Vec<u8>,
    /// The pending event has at least one `data:` line (possibly empty).
    has_data: bool,
    /// The pending event's `event:` name.
    event: heapless::String<EVENT_NAME_CAP>,
    max_event_bytes: usize,
}

impl SseFramer {
    pub(crate) fn new(max_event_bytes: usize) -> Self {
        SseFramer {
            line: Vec::new(),
            skip_lf: false,
            at_start: true,
            raw_body: false,
            data: Vec::new(),
            has_data: false,
            event: heapless::String::new(),
            max_event_bytes,
        }
    }

    /// Bytes held for an unfinished line or event.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.line.len().saturating_add(self.data.len())
    }

    fn too_large(&self) -> DecodeError {
        DecodeError::TooLarge {
            limit: self.max_event_bytes,
        }
    }

    /// Splits `bytes` into lines and processes them; buffers the tail.
    pub(crate) fn feed<H: FrameHandler>(
        &mut self,
        mut bytes: &[u8],
        handler: &mut H,
        sink: &mut dyn StreamSink,
    ) -> Result<SseStatus, DecodeError> {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            let Some(pos) = fast::find_line_end(bytes) else {
                if self.line.len().saturating_add(bytes.len()) > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.line.extend_from_slice(bytes);
                return Ok(SseStatus::NeedMore);
            };
            let (head, tail) = bytes.split_at_checked(pos).unwrap_or((bytes, &[]));
            let (rest, cr) = match tail {
                [b'\r', b'\n', rest @ ..] => (rest, false),
                [b'\r', rest @ ..] => (rest, true),
                [_, rest @ ..] => (rest, false),
                [] => (tail, false),
            };
            // A `\r` that ends this feed may be the first half of `\r\n`.
            if cr && rest.is_empty() {
                self.skip_lf = true;
            }
            bytes = rest;
            let status = if self.line.is_empty() {
                // The same cap as a line carried over from an earlier feed:
                // the result must not depend on where the bytes were split.
                if head.len() > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.process_line(head, handler, sink)?
            } else {
                if self.line.len().saturating_add(head.len()) > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.line.extend_from_slice(head);
                let line = core::mem::take(&mut self.line);
                let status = self.process_line(&line, handler, sink);
                // Keep the allocation for the next carried-over line.
                self.line = line;
                self.line.clear();
                status?
            };
            if let Some(status) = status {
                return Ok(status);
            }
        }
        Ok(SseStatus::NeedMore)
    }

    /// The stream ended (EOF): processes a last line without its line end
    /// and a last complete event without its blank line. Whatever arrives
    /// here was never shown to a sink before; `sink` should be one that
    /// cannot stop (a `NullSink`), since the text lands in the completion
    /// anyway.
    pub(crate) fn finish<H: FrameHandler>(
        &mut self,
        handler: &mut H,
        sink: &mut dyn StreamSink,
    ) -> Result<Finished, DecodeError> {
        let pending_bytes = self.pending_bytes();
        let mut status = None;
        if !self.line.is_empty() {
            let line = core::mem::take(&mut self.line);
            status = self.process_line(&line, handler, sink)?;
        }
        if self.raw_body {
            return Ok(Finished {
                status,
                raw_body: Some(core::mem::take(&mut self.data)),
                pending_bytes,
            });
        }
        if status.is_none() && self.has_data && is_complete(&self.data) {
            status = self.dispatch(handler, sink)?;
        }
        Ok(Finished {
            status,
            raw_body: None,
            pending_bytes,
        })
    }

    /// One complete line, without its line end. `Some(status)` ends the feed.
    fn process_line<H: FrameHandler>(
        &mut self,
        line: &[u8],
        handler: &mut H,
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        let line = if self.at_start {
            self.at_start = false;
            let line = line.strip_prefix(BOM).unwrap_or(line);
            self.raw_body = matches!(line.first(), Some(b'{' | b'['));
            line
        } else {
            line
        };
        if self.raw_body {
            // `data` holds the lines so far, each with its `\n`: this is the
            // length of the body's lines joined, capped like an event.
            if self.data.len().saturating_add(line.len()) > self.max_event_bytes {
                return Err(self.too_large());
            }
            self.data.extend_from_slice(line);
            self.data.push(b'\n');
            return Ok(None);
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => {
                // A comment: servers send these as keep-alives.
                return Ok(match sink.on_progress() {
                    Flow::Continue => None,
                    Flow::Stop => Some(SseStatus::Stopped),
                });
            }
            Some(colon) => {
                let (field, value) = line.split_at_checked(colon).unwrap_or((line, &[]));
                let value = value.get(1..).unwrap_or(&[]);
                (field, value.strip_prefix(b" ").unwrap_or(value))
            }
            None if line.is_empty() => return self.dispatch(handler, sink),
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    // No blank line between events (seen in the wild): a
                    // complete pending value is its own event.
                    if is_complete(&self.data) {
                        if let Some(status) = self.dispatch(handler, sink)? {
                            return Ok(Some(status));
                        }
                    } else {
                        self.data.push(b'\n');
                    }
                }
                if self.data.len().saturating_add(value.len()) > self.max_event_bytes {
                    return Err(self.too_large());
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                let name = core::str::from_utf8(value).unwrap_or("");
                // Too long a name is none we know: leave it empty.
                if self.event.push_str(name).is_err() {
                    self.event.clear();
                }
            }
            // `id`, `retry` and unknown fields carry nothing for us.
            _ => {}
        }
        Ok(None)
    }

    /// Dispatches the pending event (at a blank line).
    fn dispatch<H: FrameHandler>(
        &mut self,
        handler: &mut H,
        sink: &mut dyn StreamSink,
    ) -> Result<Option<SseStatus>, DecodeError> {
        let name = core::mem::take(&mut self.event);
        if !self.has_data {
            return Ok(None);
        }
        self.has_data = false;
        let data = core::mem::take(&mut self.data);
        let result = handler.event(&name, &data, sink);
        // Keep the allocation for the next event.
        self.data = data;
        self.data.clear();
        result
    }
}

/// Whether pending event data is a whole event already (`[DONE]` or one
/// complete JSON object), for servers that omit the blank line.
///
/// Only data ending in `}` and below [`LENIENT_CHECK_MAX`] is parsed, so a
/// legitimate many-line event does not cost a parse per line.
fn is_complete(data: &[u8]) -> bool {
    let trimmed = data.trim_ascii();
    trimmed == b"[DONE]"
        || (trimmed.len() <= LENIENT_CHECK_MAX
            && trimmed.last() == Some(&b'}')
            && serde_json::from_slice::<IgnoredAny>(trimmed).is_ok())
}
