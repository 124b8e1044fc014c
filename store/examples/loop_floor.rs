//! The floor of a one-shot: what any program must pay that asks a provider
//! over a socket and keeps its conversation in SQLite, and nothing more.
//! `scripts/peer-bench.sh` runs it beside `hermes` and hermes-agent, as
//! `hermes` is run, so that each sitting says how near the floor `hermes`
//! is and what ratio against hermes-agent the floor itself reaches
//! (BENCHMARKS.md "Per iteration").
//!
//! It opens a WAL database in `$HERMES_HOME` (`synchronous = NORMAL`, the
//! store's default; two small tables), stores the user message, then per
//! turn sends one streamed chat request to `$HERMES_BASE_URL` (plain HTTP
//! on one keep-alive `TcpStream`, the conversation so far in the body),
//! reads the answer to its last chunk, and stores the answer — and, when
//! it asked for a tool, a fixed tool result — in one transaction. It stops
//! at an answer without a tool call and prints its length. No
//! configuration, prompt, tool, TLS, async runtime, HTTP library or JSON
//! parser; its buffers are kept from turn to turn. Arguments are ignored,
//! so it takes `hermes`'s command line.
//!
//! Built as the packages are (it shares their profile and SQLite build):
//! `cargo build --release --target x86_64-unknown-linux-musl -p hermes-store
//! --example loop_floor`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Sends `body` as a chat request and reads the whole chunked answer into
/// `answer` (`request` and `answer` are the caller's, kept between turns).
fn exchange<'a>(
    stream: &mut TcpStream,
    addr: &str,
    body: &str,
    request: &mut Vec<u8>,
    answer: &'a mut Vec<u8>,
) -> &'a str {
    request.clear();
    write!(
        request,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    request.extend_from_slice(body.as_bytes());
    stream.write_all(request).unwrap();
    answer.clear();
    while !answer.ends_with(b"\r\n0\r\n\r\n") {
        let at = answer.len();
        answer.resize(at + 32 * 1024, 0);
        let n = stream.read(&mut answer[at..]).unwrap();
        assert!(n > 0, "the provider closed the connection mid-answer");
        answer.truncate(at + n);
    }
    std::str::from_utf8(answer).expect("a UTF-8 answer")
}

fn main() {
    let home = std::env::var("HERMES_HOME").expect("HERMES_HOME");
    let base = std::env::var("HERMES_BASE_URL").expect("HERMES_BASE_URL");
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_owned();

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
    tx.execute(
        "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, 0, 'user', 'hi')",
        [&session],
    )
    .unwrap();
    tx.commit().unwrap();

    let mut stream = TcpStream::connect(&addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut messages = String::with_capacity(64 * 1024);
    messages.push_str(r#"{"role":"system","content":"x"},{"role":"user","content":"hi"}"#);
    let mut body = String::with_capacity(64 * 1024);
    let (mut request, mut received) =
        (Vec::with_capacity(64 * 1024), Vec::with_capacity(64 * 1024));
    let mut seq = 1;
    loop {
        body.clear();
        write!(
            body,
            r#"{{"model":"fake","stream":true,"messages":[{messages}]}}"#
        )
        .unwrap();
        let answer = exchange(&mut stream, &addr, &body, &mut request, &mut received);
        let asked_for_tool = answer.contains("tool_calls");
        let tx = conn.unchecked_transaction().unwrap();
        tx.execute(
            "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, ?2, 'assistant', ?3)",
            rusqlite::params![&session, seq, answer],
        )
        .unwrap();
        seq += 1;
        if asked_for_tool {
            // What the fake provider counts turns by: one more tool result.
            write!(
                messages,
                r#",{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{seq}","type":"function","function":{{"name":"todo","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"call_{seq}","content":"added"}}"#
            )
            .unwrap();
            tx.execute(
                "INSERT INTO messages (session_id, seq, role, content) VALUES (?1, ?2, 'tool', 'added')",
                rusqlite::params![&session, seq],
            )
            .unwrap();
            seq += 1;
        }
        tx.commit().unwrap();
        if !asked_for_tool {
            println!("{}", answer.len());
            return;
        }
    }
}
