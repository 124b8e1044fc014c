//! Does `serde-json-core` pay for the small fixed frames of a stream?
//!
//! The design named `serde-json-core` (allocation-free, fixed buffers) for
//! the core. Nearly every byte of a stream is a content chunk, which the
//! core's own validating fast path already decodes without allocating; what
//! is left for a general decoder are the small "envelope" chunks: the
//! `finish_reason` chunk, the final `usage` chunk, and tool-call fragments
//! (index, id, name, a piece of escaped arguments). This bench decodes each
//! of those three frames two ways into the same information:
//!
//! - `serde_json`: the structs `core/src/codec/sse.rs` decodes today
//!   (mirrored here: borrowed `Cow` strings, a `Vec` of tool-call deltas);
//! - `serde_json_core`: `from_slice_escaped` into `heapless` structs (no
//!   heap at all; escapes decoded into a stack scratch buffer, argument
//!   pieces copied into a fixed `heapless::String`).
//!
//! Each routine also reports the heap allocations it makes (counted by the
//! bench's global allocator), printed once before the timings. Figures and
//! the decision: ARCHITECTURE.md, "serde-json-core".

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde::Deserialize;

/// Counts allocations so the bench can show which path touches the heap.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const FINISH: &[u8] = br#"{"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}"#;
const USAGE: &[u8] = br#"{"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":1532,"completion_tokens":87,"total_tokens":1619,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":0}}}"#;
const TOOL_FRAGMENT: &[u8] = br#"{"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Qx7dPz2m","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"src/m"}}]},"logprobs":null,"finish_reason":null}]}"#;

/// What a decoder must get out of a frame; both paths fill it.
#[derive(Debug, Default, PartialEq)]
struct Frame {
    finish_reason: Option<String>,
    total_tokens: Option<u32>,
    tool_index: Option<u32>,
    tool_id: Option<String>,
    tool_name: Option<String>,
    arguments: String,
}

mod today {
    //! The shapes `core/src/codec/sse.rs` deserializes with serde_json,
    //! copied with its two helpers: `Text` (a string that borrows when it
    //! has no escapes) and `FirstChoice` (no vector for `choices`).
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{self, IgnoredAny, SeqAccess, Visitor};

    use super::*;

    pub struct Text<'a>(pub Cow<'a, str>);

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

    pub struct FirstChoice<'a>(pub Option<Choice<'a>>);

    impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
        fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct V<'a>(PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = FirstChoice<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an array of choices")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                    let first = seq.next_element::<Choice<'a>>()?;
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(FirstChoice(first))
                }
            }
            deserializer.deserialize_seq(V(PhantomData))
        }
    }

    #[derive(Deserialize)]
    pub struct Chunk<'a> {
        #[serde(borrow, default)]
        pub choices: Option<FirstChoice<'a>>,
        #[serde(default)]
        pub usage: Option<Usage>,
    }
    #[derive(Deserialize)]
    pub struct Usage {
        pub total_tokens: u32,
    }
    #[derive(Deserialize)]
    pub struct Choice<'a> {
        #[serde(borrow, default)]
        pub delta: Option<Delta<'a>>,
        #[serde(borrow, default)]
        pub finish_reason: Option<Text<'a>>,
    }
    #[derive(Deserialize)]
    pub struct Delta<'a> {
        #[serde(borrow, default)]
        pub tool_calls: Option<Vec<ToolCall<'a>>>,
    }
    #[derive(Deserialize)]
    pub struct ToolCall<'a> {
        #[serde(default)]
        pub index: Option<u32>,
        #[serde(borrow, default)]
        pub id: Option<Text<'a>>,
        #[serde(borrow, default)]
        pub function: Option<Function<'a>>,
    }
    #[derive(Deserialize)]
    pub struct Function<'a> {
        #[serde(borrow, default)]
        pub name: Option<Text<'a>>,
        #[serde(borrow, default)]
        pub arguments: Option<Text<'a>>,
    }

    pub fn decode(data: &[u8], out: &mut Frame) {
        let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
        if let Some(FirstChoice(Some(choice))) = chunk.choices {
            out.finish_reason = choice.finish_reason.map(|r| r.0.into_owned());
            for call in choice.delta.and_then(|d| d.tool_calls).unwrap_or_default() {
                out.tool_index = call.index;
                out.tool_id = call.id.map(|s| s.0.into_owned());
                if let Some(f) = call.function {
                    out.tool_name = f.name.map(|s| s.0.into_owned());
                    out.arguments
                        .push_str(f.arguments.as_ref().map_or("", |a| &*a.0));
                }
            }
        }
        out.total_tokens = chunk.usage.map(|u| u.total_tokens);
    }

    /// Decoding only, as the core does before applying a chunk.
    pub fn decode_only(data: &[u8]) -> usize {
        let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
        usize::from(matches!(chunk.choices, Some(FirstChoice(Some(_)))))
            + usize::from(chunk.usage.is_some())
    }
}

mod fixed {
    //! The same frames into fixed-size structs with serde-json-core.
    use super::*;
    use heapless::{String as HString, Vec as HVec};

    #[derive(Deserialize)]
    pub struct Chunk {
        #[serde(default)]
        pub choices: HVec<Choice, 1>,
        #[serde(default)]
        pub usage: Option<Usage>,
    }
    #[derive(Deserialize)]
    pub struct Usage {
        pub total_tokens: u32,
    }
    #[derive(Deserialize)]
    pub struct Choice {
        #[serde(default)]
        pub delta: Option<Delta>,
        #[serde(default)]
        pub finish_reason: Option<HString<16>>,
    }
    #[derive(Deserialize)]
    pub struct Delta {
        #[serde(default)]
        pub tool_calls: Option<HVec<ToolCall, 4>>,
    }
    #[derive(Deserialize)]
    pub struct ToolCall {
        pub index: Option<u32>,
        #[serde(default)]
        pub id: Option<HString<64>>,
        #[serde(default)]
        pub function: Option<Function>,
    }
    #[derive(Deserialize)]
    pub struct Function {
        #[serde(default)]
        pub name: Option<HString<64>>,
        /// Argument pieces are short in practice, but not bounded by any
        /// spec: a longer one fails to decode here.
        #[serde(default)]
        pub arguments: Option<HString<256>>,
    }

    pub fn decode(data: &[u8], out: &mut Frame) {
        let mut scratch = [0u8; 256];
        let (chunk, _) = serde_json_core::from_slice_escaped::<Chunk>(data, &mut scratch).unwrap();
        if let Some(choice) = chunk.choices.into_iter().next() {
            out.finish_reason = choice.finish_reason.map(|r| r.as_str().to_owned());
            for call in choice.delta.and_then(|d| d.tool_calls).unwrap_or_default() {
                out.tool_index = call.index;
                out.tool_id = call.id.map(|s| s.as_str().to_owned());
                if let Some(f) = call.function {
                    out.tool_name = f.name.map(|s| s.as_str().to_owned());
                    out.arguments
                        .push_str(f.arguments.as_deref().unwrap_or_default());
                }
            }
        }
        out.total_tokens = chunk.usage.map(|u| u.total_tokens);
    }

    /// Decoding only, no copy into the owned `Frame`: the allocation-free
    /// path a firmware would use.
    pub fn decode_only(data: &[u8]) -> usize {
        let mut scratch = [0u8; 256];
        let (chunk, _) = serde_json_core::from_slice_escaped::<Chunk>(data, &mut scratch).unwrap();
        chunk.choices.len() + usize::from(chunk.usage.is_some())
    }
}

fn frames() -> [(&'static str, &'static [u8]); 3] {
    [
        ("finish", FINISH),
        ("usage", USAGE),
        ("tool_fragment", TOOL_FRAGMENT),
    ]
}

fn allocations(f: impl Fn()) -> usize {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    f();
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

fn bench(c: &mut Criterion) {
    for (name, data) in frames() {
        // Both paths agree before anything is timed.
        let (mut a, mut b) = (Frame::default(), Frame::default());
        today::decode(data, &mut a);
        fixed::decode(data, &mut b);
        assert_eq!(a, b, "{name}");
        // Allocations of the decode itself, without the copy into `Frame`.
        let today_allocs = allocations(|| {
            black_box(today::decode_only(data));
        });
        let fixed_allocs = allocations(|| {
            black_box(fixed::decode_only(data));
        });
        println!(
            "envelope/{name}: {} bytes; heap allocations per decode: serde_json {today_allocs}, serde_json_core {fixed_allocs}",
            data.len()
        );
    }

    let mut group = c.benchmark_group("envelope");
    for (name, data) in frames() {
        group.bench_function(format!("{name}/serde_json"), |b| {
            b.iter(|| black_box(today::decode_only(black_box(data))))
        });
        group.bench_function(format!("{name}/serde_json_core"), |b| {
            b.iter(|| black_box(fixed::decode_only(black_box(data))))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
