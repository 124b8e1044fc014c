//! Throughput of the OpenAI wire codec, the per-call cost every transport pays.
//!
//! - `encode_request`: a 100-message history with tool calls and results,
//!   eight tool definitions and a 4 KiB system prompt (target ≥ 500 MB/s).
//! - `sse_decode`: a long realistic `chat.completion.chunk` stream — short
//!   content deltas in full OpenAI envelopes (with escapes and multi-byte
//!   text), two parallel tool calls streamed in small argument pieces, a
//!   usage chunk — fed in 8 KiB reads (target ≥ 300 MB/s).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hermes_core::codec::anthropic::{MessagesOptions, encode_messages_request};
use hermes_core::codec::{
    CacheControl, ReasoningEcho, RequestOptions, SseDecoder, SseStatus, decode_stream,
    encode_request,
};
use hermes_core::{
    ChatRequest, EntryMeta, Flow, LedgerEntry, Message, StreamSink, ToolCall, ToolSpec, Usage,
};

fn tools() -> Vec<ToolSpec> {
    (0..8)
        .map(|i| {
            ToolSpec::new(
                format!("tool_{i}"),
                "Does one useful thing to the files in the working directory, carefully.",
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path, relative to the working directory"},
                        "pattern": {"type": "string", "description": "A regular expression"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1000}
                    },
                    "required": ["path"]
                }),
            )
        })
        .collect()
}

/// 20 turns of: user, assistant with two tool calls, two results, answer.
fn history() -> Vec<LedgerEntry> {
    let meta = EntryMeta {
        reasoning: Some("internal reasoning that never reaches the wire".into()),
        usage: Some(Usage {
            prompt_tokens: 1000,
            completion_tokens: 100,
            total_tokens: 1100,
            ..Usage::default()
        }),
        timestamp_ms: 1_732_000_000_000,
        finish_reason: None,
        interrupted: false,
        compaction: None,
        ..EntryMeta::default()
    };
    let file =
        "fn main() {\n    println!(\"héllo 世界\");\n    let x = vec![1, 2, 3];\n}\n".repeat(12);
    let mut entries = Vec::new();
    for turn in 0..20 {
        entries.push(LedgerEntry::new(Message::user(format!(
            "Turn {turn}: please read src/main.rs and search for \"main\" in src/, then explain what you find."
        ))));
        entries.push(LedgerEntry {
            message: Message::Assistant {
                content: Some("Let me look at the file and search the tree.".into()),
                tool_calls: vec![
                    ToolCall::new(
                        format!("call_{turn}_a"),
                        "tool_0",
                        r#"{"path":"src/main.rs"}"#,
                    ),
                    ToolCall::new(
                        format!("call_{turn}_b"),
                        "tool_1",
                        r#"{"path":"src","pattern":"fn main","limit":50}"#,
                    ),
                ],
            },
            meta: meta.clone(),
        });
        entries.push(LedgerEntry::new(Message::tool(
            format!("call_{turn}_a"),
            file.clone(),
        )));
        entries.push(LedgerEntry::new(Message::tool(
            format!("call_{turn}_b"),
            "src/main.rs:1: fn main() {\nsrc/bin/cli.rs:3: fn main() {\n",
        )));
        entries.push(LedgerEntry {
            message: Message::assistant(
                "The entry point is `main` in src/main.rs; it prints a greeting and builds a small vector. ".repeat(3),
            ),
            meta: meta.clone(),
        });
    }
    entries
}

fn bench_encode(c: &mut Criterion) {
    let entries = history();
    assert_eq!(entries.len(), 100);
    let tools = tools();
    let system = "You are Hermes, a careful coding agent. ".repeat(100);
    let req = ChatRequest {
        system_prompt: &system,
        messages: &entries,
        tools: &tools,
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    let opts = RequestOptions {
        model: "openai/gpt-4o-mini",
        stream: true,
        max_tokens: Some(4096),
        temperature: Some(0.2),
        include_usage: true,
        ..RequestOptions::new("")
    };
    let mut out = Vec::new();
    encode_request(&opts, &req, &mut out).unwrap();
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Bytes(out.len() as u64));
    group.bench_function(format!("encode_request/100_messages/{}B", out.len()), |b| {
        b.iter(|| {
            out.clear();
            encode_request(black_box(&opts), black_box(&req), &mut out).unwrap();
            black_box(out.len())
        })
    });
    // The same history for a Claude model (cache breakpoints) whose
    // provider wants reasoning back in tool turns: the decorations.
    let decorated = RequestOptions {
        model: "anthropic/claude-sonnet-4",
        cache: Some(CacheControl::default()),
        reasoning_echo: ReasoningEcho::ReasoningContent,
        ..opts
    };
    out.clear();
    encode_request(&decorated, &req, &mut out).unwrap();
    group.throughput(Throughput::Bytes(out.len() as u64));
    group.bench_function(
        format!("encode_request/100_messages_cache_echo/{}B", out.len()),
        |b| {
            b.iter(|| {
                out.clear();
                encode_request(black_box(&decorated), black_box(&req), &mut out).unwrap();
                black_box(out.len())
            })
        },
    );
    // The Anthropic Messages encoder on the same history.
    let messages = MessagesOptions {
        stream: true,
        cache: Some(CacheControl::default()),
        ..MessagesOptions::new("claude-sonnet-4-5")
    };
    out.clear();
    encode_messages_request(&messages, &req, &mut out).unwrap();
    group.throughput(Throughput::Bytes(out.len() as u64));
    group.bench_function(
        format!("encode_messages_request/100_messages/{}B", out.len()),
        |b| {
            b.iter(|| {
                out.clear();
                encode_messages_request(black_box(&messages), black_box(&req), &mut out).unwrap();
                black_box(out.len())
            })
        },
    );
    group.finish();
}

const ENVELOPE_HEAD: &str = r#"data: {"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":"#;
const ENVELOPE_TAIL: &str = r#","logprobs":null,"finish_reason":null}],"usage":null}"#;

/// About 2000 content deltas plus a tool-call phase, ~0.5 MB.
fn long_stream() -> String {
    let words = [
        "The",
        " quick",
        " brown",
        " fox",
        " jumps",
        " over",
        " the",
        " lazy",
        " dog",
        ".",
        "\\n",
        " Héllo",
        " 世界",
        " 🚀",
        " \\\"quoted\\\"",
        " code:",
        " `fn",
        " main()`",
        ",",
        " and",
    ];
    let mut s = String::from(": OPENROUTER PROCESSING\n\n");
    s.push_str(ENVELOPE_HEAD);
    s.push_str(r#"{"role":"assistant","content":"","refusal":null}"#);
    s.push_str(ENVELOPE_TAIL);
    s.push_str("\n\n");
    for i in 0..2000 {
        if i % 400 == 399 {
            s.push_str(": keep-alive\n\n");
        }
        write!(
            s,
            "{ENVELOPE_HEAD}{{\"content\":\"{}\"}}{ENVELOPE_TAIL}\n\n",
            words[i % words.len()]
        )
        .unwrap();
    }
    for (index, id, name) in [
        (0, "call_Qx1", "read_file"),
        (1, "call_Zy2", "search_files"),
    ] {
        write!(
            s,
            "{ENVELOPE_HEAD}{{\"tool_calls\":[{{\"index\":{index},\"id\":\"{id}\",\"type\":\"function\",\"function\":{{\"name\":\"{name}\",\"arguments\":\"\"}}}}]}}{ENVELOPE_TAIL}\n\n"
        )
        .unwrap();
        for piece in [
            "{\\\"pa",
            "th\\\": \\\"src/",
            "main.rs\\\", \\\"li",
            "mit\\\": 50}",
        ] {
            write!(
                s,
                "{ENVELOPE_HEAD}{{\"tool_calls\":[{{\"index\":{index},\"function\":{{\"arguments\":\"{piece}\"}}}}]}}{ENVELOPE_TAIL}\n\n"
            )
            .unwrap();
        }
    }
    s.push_str(r#"data: {"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#);
    s.push_str("\n\n");
    s.push_str(r#"data: {"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":1204,"completion_tokens":2057,"total_tokens":3261,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#);
    s.push_str("\n\ndata: [DONE]\n\n");
    s
}

/// One tool call whose arguments (a file of ≈ 4 KB to write) arrive a few
/// characters per chunk, as OpenAI-compatible servers stream them.
fn tool_arguments_stream() -> String {
    let mut s = String::new();
    write!(
        s,
        "{ENVELOPE_HEAD}{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\"index\":0,\"id\":\"call_W1\",\"type\":\"function\",\"function\":{{\"name\":\"write_file\",\"arguments\":\"\"}}}}]}}{ENVELOPE_TAIL}\n\n"
    )
    .unwrap();
    let pieces = ["{\\\"path\\\": \\\"notes.md\\\", \\\"content\\\": \\\""]
        .into_iter()
        .chain(
            std::iter::repeat_n(
                [
                    "# Plan", "\\\\n", "- read", " the", " logs", "\\\\n", "- fix", " it", "\\\\n",
                ],
                120,
            )
            .flatten(),
        )
        .chain(["\\\"}"]);
    for piece in pieces {
        write!(
            s,
            "{ENVELOPE_HEAD}{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{piece}\"}}}}]}}{ENVELOPE_TAIL}\n\n"
        )
        .unwrap();
    }
    s.push_str(r#"data: {"id":"chatcmpl-AbC123xyz","object":"chat.completion.chunk","created":1732000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#);
    s.push_str("\n\ndata: [DONE]\n\n");
    s
}

/// Counts what a terminal would print.
struct CountingSink {
    bytes: usize,
}

impl StreamSink for CountingSink {
    fn on_text(&mut self, text: &str) -> Flow {
        self.bytes += text.len();
        Flow::Continue
    }
}

fn bench_sse(c: &mut Criterion) {
    let stream = long_stream();
    let bytes = stream.as_bytes();
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function(format!("sse_decode/feed_8KiB/{}B", bytes.len()), |b| {
        b.iter(|| {
            let mut decoder = SseDecoder::new();
            let mut sink = CountingSink { bytes: 0 };
            for piece in black_box(bytes).chunks(8 * 1024) {
                if decoder.feed(piece, &mut sink).unwrap() == SseStatus::Done {
                    break;
                }
            }
            let completion = decoder.finish().unwrap();
            assert_eq!(completion.tool_calls.len(), 2);
            black_box((completion, sink.bytes))
        })
    });
    group.bench_function(format!("sse_decode/decode_stream/{}B", bytes.len()), |b| {
        b.iter(|| {
            let mut reader: &[u8] = black_box(bytes);
            let mut sink = CountingSink { bytes: 0 };
            let completion = decode_stream(&mut reader, &mut sink).unwrap();
            black_box((completion, sink.bytes))
        })
    });
    group.finish();

    let stream = tool_arguments_stream();
    let bytes = stream.as_bytes();
    let call = decode_stream(&mut &*bytes, &mut CountingSink { bytes: 0 })
        .unwrap()
        .tool_calls
        .remove(0);
    let arguments: serde_json::Value = serde_json::from_str(&call.function.arguments).unwrap();
    assert_eq!(arguments["content"].as_str().unwrap().len(), 120 * 32);
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function(format!("sse_decode/tool_arguments/{}B", bytes.len()), |b| {
        b.iter(|| {
            let mut reader: &[u8] = black_box(bytes);
            let completion = decode_stream(&mut reader, &mut CountingSink { bytes: 0 }).unwrap();
            assert_eq!(completion.tool_calls.len(), 1);
            black_box(completion)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_encode, bench_sse
}
criterion_main!(benches);
