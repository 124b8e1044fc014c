//! A scripted OpenAI-compatible provider on 127.0.0.1 for measurements and
//! manual trials: `cargo run -p hermes-tests --example fake_provider -- 20`
//! prints its base URL, then answers every conversation with 20 tool turns
//! (`todo` calls, each adding a new item: 20 identical calls would be
//! stopped by the repeat guard, SPEC Y6) followed by a text answer.
//!
//! With a second argument, a file path, it keeps the number of requests it
//! received so far (chat requests and metadata probes alike) in that file.
//!
//! Each answer follows from the request itself (how many tool results the
//! conversation already holds), so conversations can come as fast and as
//! many as they like: no queue to refill, no run that finds it empty.

use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

fn main() -> std::io::Result<()> {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let responder = Arc::new(move |request: &Value| {
        let done = request["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        if done < turns {
            let args = format!(r#"{{"action":"add","items":["task {done}"]}}"#);
            Reply::tool(&format!("call_{done}"), "todo", &args)
        } else {
            Reply::text(format!("Done after {turns} tool turns."))
        }
    });
    let provider = FakeProvider::start_with(Vec::new(), None, Some(responder))?;
    println!("{}", provider.base_url());
    let count_file = std::env::args().nth(2);
    // Serve until killed.
    let mut written = usize::MAX;
    loop {
        match &count_file {
            Some(path) => {
                let seen = provider.auth_headers().len();
                if seen != written {
                    std::fs::write(path, format!("{seen}\n"))?;
                    written = seen;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            None => std::thread::park(),
        }
    }
}
