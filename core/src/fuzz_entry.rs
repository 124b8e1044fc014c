//! Entry points for the fuzz targets in `fuzz/` and for the proptests and
//! corpus replay in `core/tests/hostile_bytes.rs`. Not API.
//!
//! Each function takes untrusted bytes, runs a parser over them and panics
//! when one of the parser's promises breaks; the fuzzer, the proptests and
//! the committed crash inputs all drive these same functions, so a property
//! is written once.

use alloc::string::String;
use alloc::vec::Vec;

use crate::codec::anthropic::{MessagesStreamDecoder, decode_messages_response};
use crate::codec::{DEFAULT_MAX_EVENT_BYTES, SseDecoder, SseStatus, decode_stream};
use crate::codec::{DecodeError, StreamError, decode_error_body, decode_response};
use crate::model::{Completion, Flow, NullSink, StreamSink};

/// What a sink was shown, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Shown {
    calls: Vec<(u8, String)>,
    /// Stop after this many calls (`None`: never).
    stop_after: Option<usize>,
}

impl Shown {
    fn record(&mut self, kind: u8, text: &str) -> Flow {
        self.calls.push((kind, String::from(text)));
        match self.stop_after {
            Some(n) if self.calls.len() >= n => Flow::Stop,
            _ => Flow::Continue,
        }
    }
}

impl StreamSink for Shown {
    fn on_text(&mut self, text: &str) -> Flow {
        self.record(b't', text)
    }
    fn on_reasoning(&mut self, text: &str) -> Flow {
        self.record(b'r', text)
    }
    fn on_progress(&mut self) -> Flow {
        self.record(b'p', "")
    }
}

/// Everything a decode run produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    result: Result<Completion, DecodeError>,
    /// The completion so far, after the end (or the error).
    after: Completion,
    /// The text decoded before the end of the input: exactly what the sink
    /// was shown (the last line, if it lacks its line end, is decoded at
    /// the end without a sink).
    before: Option<String>,
    shown: Vec<(u8, String)>,
}

/// Feeds `body` in the pieces `cuts` gives (lengths, cycled), then finishes.
fn run_decoder(body: &[u8], cap: usize, stop_after: Option<usize>, cuts: &[usize]) -> Run {
    let mut decoder = SseDecoder::with_max_event_bytes(cap);
    let mut sink = Shown {
        calls: Vec::new(),
        stop_after,
    };
    let failed = feed_in_pieces(body, cuts, |piece| decoder.feed(piece, &mut sink));
    let before = decoder.partial().content;
    let result = match failed {
        Some(e) => {
            // The same error again on every later feed.
            assert_eq!(decoder.feed(b"data: {}\n\n", &mut NullSink), Err(e.clone()));
            Err(e)
        }
        None => decoder.finish_in_place(),
    };
    let after = decoder.partial();
    Run {
        result: result.map(|()| decoder.partial()),
        after,
        before,
        shown: sink.calls,
    }
}

/// Feeds `body` to `feed` in the pieces `cuts` gives (lengths, cycled;
/// none: whole) until the decoder is done, stopped or fails; the error.
fn feed_in_pieces(
    body: &[u8],
    cuts: &[usize],
    mut feed: impl FnMut(&[u8]) -> Result<SseStatus, DecodeError>,
) -> Option<DecodeError> {
    let mut rest = body;
    let mut k = 0;
    while !rest.is_empty() {
        let n = cuts
            .get(k % cuts.len().max(1))
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        k += 1;
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        match feed(piece) {
            Ok(SseStatus::NeedMore) => {}
            Ok(SseStatus::Done | SseStatus::Stopped) => return None,
            Err(e) => return Some(e),
        }
    }
    None
}

/// Reads in pieces of the lengths `cuts` gives (cycled).
struct PieceReader<'a> {
    rest: &'a [u8],
    cuts: &'a [usize],
    k: usize,
}

impl embedded_io::ErrorType for PieceReader<'_> {
    type Error = core::convert::Infallible;
}

impl embedded_io::Read for PieceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        let want = self
            .cuts
            .get(self.k % self.cuts.len().max(1))
            .copied()
            .unwrap_or(usize::MAX)
            .max(1);
        self.k += 1;
        let n = want.min(buf.len()).min(self.rest.len());
        let (piece, tail) = self.rest.split_at(n);
        buf[..n].copy_from_slice(piece);
        self.rest = tail;
        Ok(n)
    }
}

/// Piece lengths from a seed: mostly short, sometimes long.
fn cuts_from(seed: &[u8]) -> Vec<usize> {
    seed.iter()
        .map(|&b| match b % 4 {
            0 => usize::from(b / 4) + 1,
            1 => 1,
            2 => usize::from(b) * 7 + 1,
            _ => usize::from(b % 3) + 2,
        })
        .collect()
}

/// The SSE decoder's promise: the completion, the error and what the sink
/// was shown do not depend on how the bytes were split — whole, one byte
/// at a time, in pieces, or through [`decode_stream`] — whatever the size
/// cap, and whether or not the sink stops the stream.
///
/// Input: one byte picks the cap, one whether (and when) the sink stops,
/// eight seed the piece lengths; the rest is the stream.
pub fn sse_stream(data: &[u8]) {
    let (params, body) = data.split_at(data.len().min(10));
    let param = |i: usize| params.get(i).copied().unwrap_or(0);
    let cap = match param(0) % 4 {
        0 => 16,
        1 => 64,
        2 => 512,
        _ => DEFAULT_MAX_EVENT_BYTES,
    };
    let stop_after = (param(1) % 3 == 0).then_some(usize::from(param(1) / 3) + 1);
    let cuts = cuts_from(params.get(2..).unwrap_or(&[]));

    let whole = run_decoder(body, cap, stop_after, &[]);
    assert_eq!(
        run_decoder(body, cap, stop_after, &[1]),
        whole,
        "one byte at a time"
    );
    assert_eq!(
        run_decoder(body, cap, stop_after, &cuts),
        whole,
        "in pieces {cuts:?}"
    );

    // The reader-driven decoder: default cap, a sink that never stops.
    let mut sink = Shown::default();
    let mut reader = PieceReader {
        rest: body,
        cuts: &cuts,
        k: 0,
    };
    let streamed = decode_stream(&mut reader, &mut sink);
    let expected = run_decoder(body, DEFAULT_MAX_EVENT_BYTES, None, &[]);
    assert_eq!(
        sink.calls, expected.shown,
        "decode_stream showed other text"
    );
    match (streamed, expected.result) {
        (Ok(got), Ok(want)) => assert_eq!(got, want),
        (Err(StreamError::Decode { error, partial }), Err(want)) => {
            assert_eq!(error, want);
            assert_eq!(partial, expected.after);
        }
        (got, want) => panic!("decode_stream gave {got:?}, the decoder {want:?}"),
    }

    // What the sink was shown is the text decoded while streaming.
    let shown: String = whole
        .shown
        .iter()
        .filter(|(k, _)| *k == b't')
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(whole.before.unwrap_or_default(), shown);
}

/// The Anthropic Messages stream decoder's promise, as [`sse_stream`]'s:
/// the completion, the error, the partial completion after them and what
/// the sink was shown do not depend on how the bytes were split. The same
/// bytes as a whole (non-streamed) body never panic the body decoder.
///
/// Input: eight bytes seed the piece lengths; the rest is the stream.
pub fn anthropic_stream(data: &[u8]) {
    let (params, body) = data.split_at(data.len().min(8));
    let cuts = cuts_from(params);
    let whole = run_anthropic(body, &[]);
    assert_eq!(run_anthropic(body, &[1]), whole, "one byte at a time");
    assert_eq!(run_anthropic(body, &cuts), whole, "in pieces {cuts:?}");
    let _ = decode_messages_response(body);
}

/// [`run_decoder`] for the Anthropic stream decoder.
fn run_anthropic(body: &[u8], cuts: &[usize]) -> Run {
    let mut decoder = MessagesStreamDecoder::new();
    let mut sink = Shown::default();
    let failed = feed_in_pieces(body, cuts, |piece| decoder.feed(piece, &mut sink));
    let before = decoder.partial().content;
    let after = decoder.partial();
    let result = match failed {
        Some(e) => {
            // The same error again on every later feed.
            assert_eq!(decoder.feed(b"data: {}\n\n", &mut NullSink), Err(e.clone()));
            Err(e)
        }
        None => decoder.finish(),
    };
    Run {
        result,
        after,
        before,
        shown: sink.calls,
    }
}

/// The chunk fast path agrees with the serde path whenever it accepts a
/// chunk — the same text, tool calls, finish reason and outcome, the same
/// calls of the sink (also one that stops at the first), also after chunks
/// decoded before it — and leaves nothing behind when it declines. `true`
/// when it accepted.
pub fn sse_fast_path(data: &[u8]) -> bool {
    let mut out = String::from("pre");
    let mut found = crate::codec::fast::FastChunk::default();
    if crate::codec::fast::chunk(data, &mut out, &mut found).is_none() {
        assert_eq!(out, "pre", "a declined chunk left text behind");
        return false;
    }
    // Once on a new decoder, once after a call and some text were decoded
    // (a fragment continues the call of its index or id).
    let earlier: &[&[u8]] = &[
        br#"{"choices":[{"delta":{"content":"a","tool_calls":[{"index":0,"id":"call_0","function":{"name":"f","arguments":"{"}}]}}]}"#,
    ];
    for before in [&[][..], earlier] {
        for stop_after in [None, Some(1)] {
            let mut fast = SseDecoder::new();
            let mut slow = SseDecoder::new();
            for chunk in before {
                assert_eq!(fast.apply_chunk_serde(chunk, &mut NullSink), Ok(None));
                assert_eq!(slow.apply_chunk_serde(chunk, &mut NullSink), Ok(None));
            }
            let mut fast_sink = Shown {
                calls: Vec::new(),
                stop_after,
            };
            let mut slow_sink = Shown {
                calls: Vec::new(),
                stop_after,
            };
            let got = fast.apply_chunk(data, &mut fast_sink);
            let want = slow.apply_chunk_serde(data, &mut slow_sink);
            assert!(
                want.is_ok(),
                "fast path accepted what serde rejects: {}",
                String::from_utf8_lossy(data)
            );
            assert_eq!(got, want);
            assert_eq!(fast.partial(), slow.partial());
            assert_eq!(fast_sink.calls, slow_sink.calls);
        }
    }
    true
}

/// Non-streaming bodies: [`decode_response`] and [`decode_error_body`] never
/// panic, and a JSON body that reaches the stream decoder (a server that
/// ignored `stream: true`) decodes to the same completion.
pub fn response_body(data: &[u8]) {
    let direct = decode_response(data);
    let message = decode_error_body(data);
    if let Some(m) = &message {
        assert!(!m.is_empty());
    }
    if let Err(DecodeError::Provider { message: m }) = &direct
        && let Some(body_message) = &message
    {
        assert_eq!(m, body_message);
    }
    if !matches!(data.first(), Some(b'{' | b'[')) {
        return;
    }
    let mut decoder = SseDecoder::new();
    let streamed = match decoder.feed(data, &mut NullSink) {
        Ok(_) => decoder.finish(),
        Err(e) => Err(e),
    };
    match (&direct, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(
            core::mem::discriminant(a),
            core::mem::discriminant(b),
            "{a:?} vs {b:?}"
        ),
        (a, b) => panic!("decode_response gave {a:?}, the stream decoder {b:?}"),
    }
}

/// Text tool calls ([`crate::codec::text_calls`]): [`parse`](crate::codec::text_calls::parse)
/// never panics; what it accepts names only offered tools and carries JSON
/// objects as arguments; every prefix of an accepted message is one
/// [`may_be_call`](crate::codec::text_calls::may_be_call) holds back (so a
/// streamed call is never shown), and once `may_be_call` lets text through
/// it never holds again.
pub fn text_calls(data: &[u8]) {
    use crate::codec::text_calls::{may_be_call, parse};
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let offered = ["read_file", "terminal", "todo"];
    let parsed = parse(text, &offered);
    if let Some(p) = &parsed {
        assert!(!p.calls.is_empty());
        for call in &p.calls {
            assert!(offered.contains(&call.name.as_str()), "{}", call.name);
            let args: serde_json::Value =
                serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
            assert!(args.is_object(), "{}", call.arguments);
        }
    }
    let mut held = true;
    for (at, _) in text.char_indices().skip(1).chain([(text.len(), ' ')]) {
        let now = may_be_call(&text[..at]);
        assert!(
            held || !now,
            "held again after letting through: {:?}",
            &text[..at]
        );
        if parsed.is_some() {
            assert!(now, "a call's prefix was let through: {:?}", &text[..at]);
        }
        held = now;
    }
}
