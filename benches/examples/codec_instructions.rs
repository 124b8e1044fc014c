//! Instruction counts of the wire codec, for before/after comparisons on a
//! loaded machine where criterion's times wander: run under callgrind,
//! once with 0 iterations (the set-up) and once with N, and divide the
//! difference by N.
//!
//! ```sh
//! cargo build --release -p hermes-benches --example codec_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/codec_instructions encode 200
//! ```
//!
//! Modes: `encode` (the `codec` bench's 100-message request, default
//! options), `encode-cache` (the same for a Claude model: breakpoints and
//! the reasoning echo), `anthropic` (the same history as a Messages
//! request), `sse` (its 0.5 MB stream fed in 8 KiB pieces).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use std::fmt::Write as _;
use std::hint::black_box;

use hermes_core::codec::anthropic::{MessagesOptions, encode_messages_request};
use hermes_core::codec::{
    CacheControl, ReasoningEcho, RequestOptions, SseDecoder, SseStatus, encode_request,
};
use hermes_core::{
    ChatRequest, EntryMeta, LedgerEntry, Message, NullSink, ToolCall, ToolSpec, Usage,
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
    let mut meta = EntryMeta::default();
    meta.reasoning = Some("internal reasoning that never reaches the wire".into());
    let mut usage = Usage::default();
    usage.prompt_tokens = 1000;
    usage.completion_tokens = 100;
    usage.total_tokens = 1100;
    meta.usage = Some(usage);
    meta.timestamp_ms = 1_732_000_000_000;
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

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "encode".into());
    let n: usize = args.next().map_or(100, |s| s.parse().unwrap());
    match mode.as_str() {
        "encode" | "encode-cache" | "anthropic" => {
            let entries = history();
            let tools = tools();
            let system = "You are Hermes, a careful coding agent. ".repeat(100);
            let req = ChatRequest {
                system_prompt: &system,
                messages: &entries,
                tools: &tools,
                tool_choice: hermes_core::ToolChoice::Auto,
            };
            let mut opts = RequestOptions::new("openai/gpt-4o-mini");
            opts.stream = true;
            opts.max_tokens = Some(4096);
            opts.temperature = Some(0.2);
            opts.include_usage = true;
            if mode == "encode-cache" {
                opts.model = "anthropic/claude-sonnet-4";
                opts.cache = Some(CacheControl::default());
                opts.reasoning_echo = ReasoningEcho::ReasoningContent;
            }
            let mut messages = MessagesOptions::new("claude-sonnet-4-5");
            messages.stream = true;
            messages.cache = Some(CacheControl::default());
            let mut out = Vec::new();
            for _ in 0..n {
                out.clear();
                if mode == "anthropic" {
                    encode_messages_request(black_box(&messages), black_box(&req), &mut out)
                        .unwrap();
                } else {
                    encode_request(black_box(&opts), black_box(&req), &mut out).unwrap();
                }
            }
            println!("{} bytes", out.len());
        }
        "sse" => {
            let stream = long_stream();
            for _ in 0..n {
                let mut decoder = SseDecoder::new();
                for piece in black_box(stream.as_bytes()).chunks(8 * 1024) {
                    if decoder.feed(piece, &mut NullSink).unwrap() == SseStatus::Done {
                        break;
                    }
                }
                black_box(decoder.finish().unwrap());
            }
            println!("{} bytes", stream.len());
        }
        other => panic!("unknown mode {other}"),
    }
}
