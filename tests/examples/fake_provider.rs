//! A scripted OpenAI-compatible provider on 127.0.0.1 for measurements and
//! manual trials: `cargo run -p hermes-tests --example fake_provider -- 20`
//! prints its base URL, then answers every conversation with 20 tool turns
//! (`todo` list calls) followed by a text answer.
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
            Reply::tool(&format!("call_{done}"), "todo", r#"{"action":"list"}"#)
        } else {
            Reply::text(format!("Done after {turns} tool turns."))
        }
    });
    let provider = FakeProvider::start_with(Vec::new(), None, Some(responder))?;
    println!("{}", provider.base_url());
    // Serve until killed.
    loop {
        std::thread::park();
    }
}
