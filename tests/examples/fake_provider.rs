//! A scripted OpenAI-compatible provider on 127.0.0.1 for measurements and
//! manual trials: `cargo run -p hermes-tests --example fake_provider -- 20`
//! prints its base URL, then answers with 20 tool turns (`todo` list calls)
//! followed by a text answer, repeating that script for every conversation.

use std::time::Duration;

use hermes_tests::{FakeProvider, Reply};

fn main() -> std::io::Result<()> {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let script = || {
        let mut s: Vec<Reply> = (0..turns)
            .map(|i| Reply::tool(&format!("call_{i}"), "todo", r#"{"action":"list"}"#))
            .collect();
        s.push(Reply::text(format!("Done after {turns} tool turns.")));
        s
    };
    let provider = FakeProvider::start(Vec::new())?;
    println!("{}", provider.base_url());
    let mut pushed = 0;
    loop {
        // Keep at least one whole conversation queued.
        if pushed - provider.requests().len() < turns + 1 {
            for r in script() {
                provider.push(r);
                pushed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
