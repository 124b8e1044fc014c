//! A scripted OpenAI-compatible provider on 127.0.0.1 for measurements and
//! manual trials: `cargo run -p hermes-tests --example fake_provider -- 20`
//! prints its base URL, then answers every conversation with 20 tool turns
//! (`todo` calls, each adding a new item: 20 identical calls would be
//! stopped by the repeat guard, SPEC Y6) followed by a text answer.
//!
//! With a second argument, a file path, it keeps the number of requests it
//! received so far (chat requests and metadata probes alike) in that file.
//!
//! With `--todo-schema=hermes-agent` (anywhere among the arguments) the
//! `todo` calls take the form the Python hermes-agent's `todo` tool reads
//! (`{"todos":[{"id","content","status"}],"merge":true}`, which adds an item
//! there; its tool ignores `action`/`items` and only reads the list back), for
//! `scripts/peer-bench.sh`. The default form is this hermes's.
//!
//! With `--first-request=PATH` it writes the first chat request it answers
//! (as JSON) to PATH, so that `scripts/peer-bench.sh`'s plain program can
//! send what `hermes` sent.
//!
//! Each answer follows from the request itself (how many tool results the
//! conversation already holds), so conversations can come as fast and as
//! many as they like: no queue to refill, no run that finds it empty.

use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

/// How the `todo` calls spell "add an item".
#[derive(Clone, Copy)]
enum TodoSchema {
    /// This hermes's `todo` tool: `{"action":"add","items":[...]}`.
    Hermes,
    /// hermes-agent's: the items to write, merged into the list by id.
    HermesAgent,
}

fn todo_args(schema: TodoSchema, done: usize) -> String {
    match schema {
        TodoSchema::Hermes => format!(r#"{{"action":"add","items":["task {done}"]}}"#),
        TodoSchema::HermesAgent => format!(
            r#"{{"todos":[{{"id":"task-{done}","content":"task {done}","status":"pending"}}],"merge":true}}"#
        ),
    }
}

fn main() -> std::io::Result<()> {
    let mut schema = TodoSchema::Hermes;
    let mut positional = Vec::new();
    let mut first_request = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--todo-schema=hermes-agent" => schema = TodoSchema::HermesAgent,
            "--todo-schema=hermes" => schema = TodoSchema::Hermes,
            _ => match arg.strip_prefix("--first-request=") {
                Some(path) => first_request = Some(path.to_owned()),
                None => positional.push(arg),
            },
        }
    }
    let first_request = std::sync::Mutex::new(first_request);
    let turns: usize = positional
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let responder = Arc::new(move |request: &Value| {
        // Taken, so only the first request is written.
        let path = first_request.lock().ok().and_then(|mut p| p.take());
        if let Some(path) = path
            && let Err(e) = std::fs::write(&path, request.to_string())
        {
            eprintln!("fake_provider: writing {path}: {e}");
        }
        let done = request["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        if done < turns {
            Reply::tool(&format!("call_{done}"), "todo", &todo_args(schema, done))
        } else {
            Reply::text(format!("Done after {turns} tool turns."))
        }
    });
    let provider = FakeProvider::start_with(Vec::new(), None, Some(responder))?;
    println!("{}", provider.base_url());
    let count_file = positional.get(1).cloned();
    // Serve until killed.
    let mut written = usize::MAX;
    loop {
        match &count_file {
            Some(path) => {
                let seen = provider.auth_headers().len();
                if seen != written {
                    // Written beside and renamed over, so a reader never
                    // sees the file empty halfway through a rewrite.
                    let partial = format!("{path}.partial");
                    std::fs::write(&partial, format!("{seen}\n"))?;
                    std::fs::rename(&partial, path)?;
                    written = seen;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            None => std::thread::park(),
        }
    }
}
