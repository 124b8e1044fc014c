//! Long conversations through a small context window (SPEC X1): every
//! turn answered, originals kept, `/compress` and the context line of
//! `/status` in the REPL.

use std::sync::Arc;

use hermes_core::context::summary::SUMMARIZER_PROMPT;
use hermes_tests::{Advertise, FakeProvider, Overflow, Reply, Responder, Window};
use serde_json::Value;

use super::support::*;

/// The model of the context tests: a summary for the summariser, `answer N`
/// for `turn N`.
fn turn_responder() -> Responder {
    Arc::new(|request: &Value| {
        if system_prompt(request) == SUMMARIZER_PROMPT {
            return Reply::text("Goal: numbered turns, each answered so far.");
        }
        let last = request["messages"].as_array().unwrap().last().unwrap();
        let text = last["content"].as_str().unwrap_or("");
        // The last `turn N` (a summary may stand before it).
        let n: String = text
            .rfind("turn ")
            .map(|at| {
                text[at + 5..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect()
            })
            .unwrap_or_else(|| "?".into());
        Reply::text(format!("answer {n}: {}", "sure ".repeat(80)))
    })
}

fn turn(n: usize) -> String {
    format!(
        "turn {n}: marker{n}x {}",
        "please remember this ".repeat(40)
    )
}

/// A provider whose window holds the system prompt and about four turns.
const SMALL_WINDOW: u64 = 6_000;

fn small_window_provider() -> FakeProvider {
    FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: SMALL_WINDOW,
            overflow: Overflow::OpenAi,
            advertise: Advertise::ModelsContextLength,
        }),
        Some(turn_responder()),
    )
    .unwrap()
}

#[test]
fn continue_through_a_small_window_answers_every_turn_and_keeps_the_originals() {
    let env = Env::new();
    let provider = small_window_provider();
    let url = provider.base_url();
    for n in 1..=12 {
        let text = turn(n);
        let mut args = vec!["--toolsets", "todo"];
        if n == 1 {
            args.extend(["-z", text.as_str()]);
        } else {
            args.extend(["chat", "--continue", "-q", text.as_str()]);
        }
        let o = env.run(&url, &args);
        assert_eq!(o.status.code(), Some(0), "turn {n}: {}", stderr(&o));
        assert!(
            stdout(&o).starts_with(&format!("answer {n}:")),
            "turn {n}: {}",
            stdout(&o)
        );
    }
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert!(provider.refused().is_empty(), "{:?}", provider.refused());
    let requests = provider.requests();
    let conversation: Vec<&Value> = requests
        .iter()
        .filter(|r| system_prompt(r) != SUMMARIZER_PROMPT)
        .collect();
    assert_eq!(conversation.len(), 12);
    let first = system_prompt(conversation[0]);
    assert!(
        conversation.iter().all(|r| system_prompt(r) == first),
        "the system prompt never changes"
    );
    assert!(
        conversation.len() < requests.len(),
        "compaction summaries were requested"
    );
    // The twelfth request is the compacted view: the head (turn 1), a
    // summary in place of the early turns, then recent turns.
    let last = conversation[11].to_string();
    assert!(
        last.contains("marker1x") && last.contains("[Context summary]"),
        "{last}"
    );
    assert!(!last.contains("marker2x"), "turn 2 was summarised: {last}");

    // Early turns stay findable and exportable.
    let o = env.run(&url, &["sessions", "search", "marker1x"]);
    assert_eq!(o.status.code(), Some(0));
    let hit = stdout(&o);
    assert!(hit.contains("#0 user"), "{hit}");
    let id = hit.split_whitespace().next().unwrap().to_owned();
    let o = env.run(&url, &["sessions", "export", &id, "--format", "jsonl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let users = lines
        .iter()
        .filter(|l| l["type"] == "message" && l["role"] == "user")
        .count();
    assert_eq!(users, 12, "every original user message is exported");
    assert!(lines.iter().any(|l| l["type"] == "compaction"));

    // doctor names the window and where it came from.
    let o = env.run(&url, &["doctor"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("context window {SMALL_WINDOW} tokens (from provider metadata: GET {url}/models context_length)")),
        "{out}"
    );
}

#[test]
fn a_message_bigger_than_the_window_is_refused_clearly_and_the_next_turn_works() {
    let env = Env::new();
    let provider = small_window_provider();
    let url = provider.base_url();
    let o = env.run(&url, &["--toolsets", "todo", "-z", &turn(1)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let huge = format!("turn 2: {}", "far too much text ".repeat(2_000));
    let o = env.run(
        &url,
        &["--toolsets", "todo", "chat", "--continue", "-q", &huge],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("does not fit in the model's context window (6000 tokens)"),
        "{err}"
    );
    let o = env.run(
        &url,
        &["--toolsets", "todo", "chat", "--continue", "-q", &turn(3)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("answer 3:"), "{}", stdout(&o));
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn compress_and_status_in_the_repl() {
    let env = Env::new();
    let provider = small_window_provider();
    let url = provider.base_url();
    for n in 1..=3 {
        let text = turn(n);
        let args: Vec<&str> = if n == 1 {
            vec!["--toolsets", "todo", "-z", &text]
        } else {
            vec!["--toolsets", "todo", "chat", "--continue", "-q", &text]
        };
        assert_eq!(env.run(&url, &args).status.code(), Some(0));
    }
    let mut cmd = env.cmd(&url);
    cmd.env("NO_COLOR", "1")
        .args(["chat", "--toolsets", "todo", "--continue"]);
    let mut p = Pty::spawn(cmd, "xterm-256color");
    p.expect("Resumed");
    p.expect("› ");
    p.send_line("/status");
    p.expect("context: ");
    p.expect(" / 6000 tokens (");
    p.expect("window from: provider metadata");
    p.send_line("/compress the marker words");
    p.expect("Compressed: ");
    p.expect("older messages became one summary");
    p.expect("tokens of 6000");
    p.send_line("/exit");
    p.eof();
    let summary = provider
        .requests()
        .into_iter()
        .rev()
        .find(|r| system_prompt(r) == SUMMARIZER_PROMPT)
        .unwrap();
    assert!(
        summary["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("focus on: the marker words")
    );
    // The next turn starts from the compacted view.
    let o = env.run(
        &url,
        &["--toolsets", "todo", "chat", "--continue", "-q", &turn(4)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let last = provider.requests().pop().unwrap();
    assert!(
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[Context summary]"))),
        "{last}"
    );
}

#[test]
fn a_one_shot_on_a_warm_home_sends_only_its_chat_request() {
    let env = Env::new();
    // llama.cpp: the window is in `GET /props`, after `GET /models`.
    let provider = FakeProvider::start_with(
        vec![],
        Some(Window {
            tokens: SMALL_WINDOW,
            overflow: Overflow::LlamaCpp,
            advertise: Advertise::Props,
        }),
        Some(turn_responder()),
    )
    .unwrap();
    let url = provider.base_url();
    let o = env.run(&url, &["--toolsets", "none", "-z", "turn 1: hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let cold = provider.auth_headers().len();
    assert_eq!(cold, 3, "GET /models, GET /props, the chat request");
    for n in 2..=3 {
        let text = format!("turn {n}: hello");
        let o = env.run(&url, &["--toolsets", "none", "-z", &text]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).starts_with(&format!("answer {n}:")));
    }
    assert_eq!(
        provider.auth_headers().len(),
        cold + 2,
        "a warm one-shot sends exactly its chat request"
    );
    // The cached window is the one the provider reported, with its source.
    let store = hermes_runtime::store::Store::open(&env.home.path().join("state.db")).unwrap();
    let cached = store
        .kv_scan(hermes_runtime::context::cache::KEY_PREFIX)
        .unwrap();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(cached[0].1.contains("\"tokens\":6000"), "{cached:?}");
    assert!(
        cached[0].1.contains("\"source\":\"provider\""),
        "{cached:?}"
    );
}
