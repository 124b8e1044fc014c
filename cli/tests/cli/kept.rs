//! SPEC Y6 in the CLI, end to end: a 2 MB command output is kept in the
//! session's folder (`$HERMES_HOME/tool-output/<session id>/`) and read
//! back in ranges; `session_search` finds an earlier CLI session.

use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::support::{Env, stderr, stdout};

fn last_tool_result(req: &Value) -> Option<String> {
    let last = req["messages"].as_array()?.last()?;
    (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or("").to_owned())
}

#[test]
fn a_two_megabyte_output_is_kept_in_the_sessions_folder_and_read_in_ranges() {
    let env = Env::new();
    let responder = Arc::new(|req: &Value| match last_tool_result(req) {
        None => Reply::tool("c1", "terminal", r#"{"command": "seq 1 320000"}"#),
        Some(out) if out.contains(" is saved in ") => {
            let start = out.find(" is saved in ").unwrap() + " is saved in ".len();
            let rest = &out[start..];
            let path = &rest[..rest.find(": read any part").unwrap()];
            Reply::tool(
                "c2",
                "read_file",
                &serde_json::json!({"path": path, "offset": 150000, "limit": 2}).to_string(),
            )
        }
        Some(out) => Reply::text(format!("READ: {out}")),
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "count a lot"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("150000|150000\n150001|150001\n"), "{out}");
    assert!(!out.contains("150002|"), "{out}");
    assert!(out.contains("of 320000"), "the whole output: {out}");
    let ids = env.session_ids();
    assert_eq!(ids.len(), 1);
    let folder = env.home.path().join("tool-output").join(&ids[0]);
    let kept: Vec<_> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::metadata(&kept[0]).unwrap().len(), 2_128_895);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
}

#[test]
fn session_search_finds_an_earlier_cli_session() {
    let env = Env::new();
    let first = FakeProvider::start(vec![Reply::text("Noted.")]).unwrap();
    let o = env.run(
        &first.base_url(),
        &["-z", "the okapi77 plan is on the fridge"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let old = env.session_ids();
    assert_eq!(old.len(), 1);

    let responder = Arc::new(|req: &Value| match last_tool_result(req) {
        None => Reply::tool("c1", "session_search", r#"{"query": "okapi77"}"#),
        Some(out) => Reply::text(format!("FOUND: {out}")),
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let o = env.run(&provider.base_url(), &["-z", "where is the okapi77 plan?"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("FOUND: 1 earlier session mentions"), "{out}");
    assert!(out.contains(&format!("Session {}", old[0])), "{out}");
    assert!(out.contains("the [okapi77] plan is on the fridge"), "{out}");
}
