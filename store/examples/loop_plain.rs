//! A plain one-shot on the design's own packages: ureq for HTTP, serde_json
//! for the wire, rusqlite for the store, used the way their documentation
//! shows. Not a floor (`loop_floor` is that): a reference for what the
//! same packages cost without `hermes`'s work on the hot path (the stream
//! skim, the kept request encoding, the allocator, the pooled connection's
//! one probe). `scripts/peer-bench.sh` runs it beside `hermes`, the floor
//! and hermes-agent (BENCHMARKS.md "Per iteration").
//!
//! Per turn it serialises the whole request with serde_json (typed
//! messages; the tools as the captured text), posts it with one ureq agent
//! (keep-alive pool, ureq's own transport), reads the stream line by line
//! and deserialises every chunk into typed structs, runs the `todo` call
//! the provider asks for (its arguments deserialised, the list answered as
//! text), and stores the answer and the tool result in one transaction
//! (WAL, `synchronous = NORMAL`). It stops at an answer without a tool call
//! and prints it. Its allocations go to the C library's `malloc` (musl's,
//! in the static build), as a program's do by default.
//!
//! With `HERMES_FLOOR_REQUEST` naming a chat request `hermes` sent (JSON,
//! as `fake_provider --first-request` writes it), it starts from that
//! request's messages and sends its tools, so it sends what `hermes` sends;
//! otherwise a one-line prompt and no tools. Arguments are ignored, so it
//! takes `hermes`'s command line. Built as the packages are:
//! `cargo build --release --target x86_64-unknown-linux-musl -p hermes-store
//! --example loop_plain`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

#[derive(Serialize, Deserialize, Clone)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Default)]
struct ToolCall {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    function: Function,
}

#[derive(Serialize, Deserialize, Clone, Default)]
struct Function {
    name: String,
    arguments: String,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    stream: bool,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
}

/// What a request file is read for.
#[derive(Deserialize)]
struct Captured {
    messages: Vec<Message>,
    #[serde(default)]
    tools: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct TodoArgs {
    #[serde(default)]
    items: Vec<String>,
}

/// Posts `body` and folds the streamed answer into one assistant message.
fn exchange(agent: &ureq::Agent, url: &str, body: &[u8]) -> Message {
    let mut response = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    let mut content = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let reader = std::io::BufReader::new(response.body_mut().as_reader());
    for line in reader.lines() {
        let line = line.unwrap();
        // Read to the body's end, past `[DONE]`: only a body read whole
        // hands its connection back to the pool.
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let chunk: Chunk = serde_json::from_str(data).unwrap();
        for choice in chunk.choices {
            if let Some(text) = choice.delta.content {
                content.push_str(&text);
            }
            for delta in choice.delta.tool_calls.unwrap_or_default() {
                if calls.len() <= delta.index {
                    calls.resize(delta.index + 1, ToolCall::default());
                }
                let call = &mut calls[delta.index];
                if let Some(id) = delta.id {
                    call.id = id;
                    call.kind = "function".to_owned();
                }
                if let Some(f) = delta.function {
                    call.function.name.push_str(f.name.as_deref().unwrap_or(""));
                    call.function
                        .arguments
                        .push_str(f.arguments.as_deref().unwrap_or(""));
                }
            }
        }
    }
    Message {
        role: "assistant".to_owned(),
        content: (!content.is_empty()).then_some(content),
        tool_calls: (!calls.is_empty()).then_some(calls),
        tool_call_id: None,
    }
}

fn main() {
    let home = std::env::var("HERMES_HOME").expect("HERMES_HOME");
    let base = std::env::var("HERMES_BASE_URL").expect("HERMES_BASE_URL");
    let url = format!("{}/chat/completions", base.trim_end_matches('/'));
    let (mut messages, tools) = match std::env::var("HERMES_FLOOR_REQUEST") {
        Ok(path) => {
            let text = std::fs::read_to_string(path).unwrap();
            let captured: Captured = serde_json::from_str(&text).unwrap();
            (captured.messages, captured.tools)
        }
        Err(_) => {
            let line = |role: &str, text: &str| Message {
                role: role.to_owned(),
                content: Some(text.to_owned()),
                tool_calls: None,
                tool_call_id: None,
            };
            (vec![line("system", "x"), line("user", "hi")], None)
        }
    };

    let conn = rusqlite::Connection::open(format!("{home}/floor.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "wal").unwrap();
    conn.pragma_update(None, "synchronous", "normal").unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created INTEGER);
         CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, session_id TEXT,
             seq INTEGER, role TEXT, content TEXT, UNIQUE (session_id, seq));",
    )
    .unwrap();
    let session = format!("s{}", std::process::id());
    let tx = conn.unchecked_transaction().unwrap();
    tx.execute("INSERT INTO sessions VALUES (?1, 0)", [&session])
        .unwrap();
    for (seq, message) in messages.iter().enumerate() {
        tx.execute(
            "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![&session, seq as i64, message.role, message.content],
        )
        .unwrap();
    }
    tx.commit().unwrap();

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut todo: Vec<String> = Vec::new();
    let mut body = Vec::with_capacity(64 * 1024);
    loop {
        body.clear();
        let request = Request {
            model: "fake",
            stream: true,
            messages: &messages,
            tools: tools.as_deref(),
        };
        serde_json::to_writer(&mut body, &request).unwrap();
        let answer = exchange(&agent, &url, &body);
        let tx = conn.unchecked_transaction().unwrap();
        let stored = serde_json::to_string(&answer).unwrap();
        tx.execute(
            "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, ?2, 'assistant', ?3)",
            rusqlite::params![&session, messages.len() as i64, stored],
        )
        .unwrap();
        let calls = answer.tool_calls.clone().unwrap_or_default();
        messages.push(answer);
        for call in &calls {
            let args: TodoArgs = serde_json::from_str(&call.function.arguments).unwrap();
            todo.extend(args.items);
            let mut list = String::new();
            for (i, item) in todo.iter().enumerate() {
                list.push_str(&format!("{}. [ ] {item}\n", i + 1));
            }
            tx.execute(
                "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, ?2, 'tool', ?3)",
                rusqlite::params![&session, messages.len() as i64, list],
            )
            .unwrap();
            messages.push(Message {
                role: "tool".to_owned(),
                content: Some(list),
                tool_calls: None,
                tool_call_id: Some(call.id.clone()),
            });
        }
        tx.commit().unwrap();
        if calls.is_empty() {
            let last = messages.last().and_then(|m| m.content.as_deref());
            println!("{}", last.unwrap_or(""));
            return;
        }
    }
}
