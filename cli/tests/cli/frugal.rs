//! SPEC Y6 end to end: the real binary against a loopback provider that
//! behaves like a small local model stuck in a loop, but honours
//! `tool_choice: "none"`.

use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::support::{Env, stderr, stdout};

/// Answers text when tools are off, else asks for `call(n)` where `n` is
/// the number of messages in the request (so every call id is new).
fn looping_provider(call: fn(usize) -> (String, String)) -> FakeProvider {
    let responder = Arc::new(move |req: &Value| {
        if req["tool_choice"] == "none" {
            return Reply::text("Here is what I found before stopping.");
        }
        let n = req["messages"].as_array().map_or(0, Vec::len);
        let (name, args) = call(n);
        Reply::tool(&format!("call_{n}"), &name, &args)
    });
    FakeProvider::start_with(vec![], None, Some(responder)).unwrap()
}

#[test]
fn a_model_listing_its_todos_forever_is_stopped_and_answers() {
    let env = Env::new();
    let provider = looping_provider(|_| ("todo".into(), r#"{"action":"list"}"#.into()));
    // Only the tool the model calls: the request count below must not
    // depend on how many tools are on by default (a longer tool list
    // compacts the fake's small window one call earlier).
    let o = env.run(
        &provider.base_url(),
        &["-z", "plan my day", "--toolsets", "todo"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "Here is what I found before stopping.");
    let err = stderr(&o);
    assert_eq!(err.matches("stopped a loop").count(), 1, "{err}");
    assert!(err.contains("todo was called 5 times"), "{err}");
    let requests = provider.requests();
    assert!(requests.len() <= 10, "{} model calls", requests.len());
    assert_eq!(requests.len(), 6);
    assert_eq!(requests[5]["tool_choice"], "none");
    assert!(requests[..5].iter().all(|r| r.get("tool_choice").is_none()));
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn the_repeat_guard_can_be_turned_off() {
    let env = Env::new();
    env.write_home(
        "config.toml",
        "[agent]\nrepeat_guard = false\nmax_iterations = 8\n",
    );
    let provider = looping_provider(|_| ("todo".into(), r#"{"action":"list"}"#.into()));
    let o = env.run(&provider.base_url(), &["-z", "plan my day"]);
    assert!(!stderr(&o).contains("stopped a loop"), "{}", stderr(&o));
    // Only the wallet's last call goes without tools.
    let requests = provider.requests();
    assert_eq!(requests.len(), 8);
    assert_eq!(requests[7]["tool_choice"], "none");
    assert!(requests[..7].iter().all(|r| r.get("tool_choice").is_none()));
}

#[test]
fn a_bad_repeat_guard_setting_is_refused() {
    let env = Env::new();
    env.write_home(
        "config.toml",
        "[agent]\nrepeat_guard = { warn_after = 4, stop_after = 2 }\n",
    );
    let provider = FakeProvider::start(vec![]).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "hi"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("repeat_guard"), "{}", stderr(&o));
    assert!(provider.requests().is_empty());
}

#[test]
fn at_the_cap_a_last_call_without_tools_answers_on_stdout() {
    let env = Env::new();
    // Ever-new calls: every `add` changes the list.
    let provider = looping_provider(|n| {
        (
            "todo".into(),
            format!(r#"{{"action":"add","items":["step {n}"]}}"#),
        )
    });
    let o = env.run(
        &provider.base_url(),
        &[
            "-z",
            "plan everything",
            "--max-iterations",
            "6",
            "--toolsets",
            "todo",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "Here is what I found before stopping.");
    let err = stderr(&o);
    assert!(
        err.contains("maximum iteration count (6 model calls)"),
        "{err}"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 6);
    assert_eq!(requests[5]["tool_choice"], "none");
    assert!(requests[..5].iter().all(|r| r.get("tool_choice").is_none()));
    // The model was told, in the last tool result it read.
    let last = requests[5]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("the iteration budget is spent"),
        "{last}"
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}
