//! The `memory` tool (add, replace, remove, errors) and the `todo` list
//! (one per session, kept across registry rebuilds).

use std::sync::Arc;

use serde_json::json;

use super::support::Fx;

#[test]
fn memory_add_replace_remove() {
    let fx = Fx::new();
    let out = fx.ok(
        "memory",
        json!({"action": "add", "content": "User prefers tabs."}),
    );
    assert!(
        out.contains("Added the entry in MEMORY.md (1 entries"),
        "{out}"
    );
    fx.ok(
        "memory",
        json!({"action": "add", "content": "Build with `make ci`.\nTests need docker."}),
    );
    let file = fx.home.path().join("MEMORY.md");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "User prefers tabs.\n§\nBuild with `make ci`.\nTests need docker.\n"
    );
    let out = fx.ok(
        "memory",
        json!({"action": "replace", "old_text": "tabs", "content": "User prefers spaces."}),
    );
    assert!(out.contains("Replaced"), "{out}");
    fx.ok("memory", json!({"action": "remove", "old_text": "docker"}));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "User prefers spaces.\n"
    );
    // No temp files left behind by the atomic writes.
    let names: Vec<String> = std::fs::read_dir(fx.home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["MEMORY.md"]);

    fx.ok(
        "memory",
        json!({"action": "add", "target": "user", "content": "Name: Ada."}),
    );
    assert_eq!(
        std::fs::read_to_string(fx.home.path().join("USER.md")).unwrap(),
        "Name: Ada.\n"
    );
}

#[test]
fn memory_errors() {
    let fx = Fx::new();
    fx.ok("memory", json!({"action": "add", "content": "alpha one"}));
    fx.ok("memory", json!({"action": "add", "content": "alpha two"}));
    let m = fx.err("memory", json!({"action": "remove", "old_text": "alpha"}));
    assert!(m.contains("matches 2 entries"), "{m}");
    let m = fx.err("memory", json!({"action": "remove", "old_text": "gamma"}));
    assert!(m.contains("no entry in MEMORY.md contains 'gamma'"), "{m}");
    let m = fx.err("memory", json!({"action": "replace", "old_text": "one"}));
    assert!(m.contains("'content' is required"), "{m}");
    let m = fx.err("memory", json!({"action": "add", "content": "a\n§\nb"}));
    assert!(m.contains("separates entries"), "{m}");
    let m = fx.err("memory", json!({"action": "add"}));
    assert!(m.contains("content"), "{m}");
    let before = std::fs::read_to_string(fx.home.path().join("MEMORY.md")).unwrap();
    let big = "x".repeat(5000);
    fx.ok("memory", json!({"action": "add", "content": big}));
    let m = fx.err(
        "memory",
        json!({"action": "add", "content": "y".repeat(5000)}),
    );
    assert!(m.contains("MEMORY.md is full"), "{m}");
    assert!(m.contains("8192"), "{m}");
    // The failed add changed nothing.
    let after = std::fs::read_to_string(fx.home.path().join("MEMORY.md")).unwrap();
    assert_eq!(after, format!("{}§\n{}\n", before, "x".repeat(5000)));
}

#[test]
fn todo_list_per_session() {
    let fx = Fx::new();
    assert_eq!(
        fx.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
    let out = fx.ok(
        "todo",
        json!({"action": "add", "items": ["read code", "write tests", "ship"]}),
    );
    assert_eq!(
        out,
        "Todo (0/3 done):\n[ ] 1. read code\n[ ] 2. write tests\n[ ] 3. ship"
    );
    fx.ok(
        "todo",
        json!({"action": "update", "id": 1, "status": "completed"}),
    );
    let out = fx.ok(
        "todo",
        json!({"action": "update", "id": 2, "status": "in_progress", "text": "write more tests"}),
    );
    assert_eq!(
        out,
        "Todo (1/3 done):\n[x] 1. read code\n[~] 2. write more tests\n[ ] 3. ship"
    );
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": 7, "status": "completed"}),
    );
    assert!(
        m.contains("no task with id 7") && m.contains("1, 2, 3"),
        "{m}"
    );
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": 1, "status": "done"}),
    );
    assert!(m.contains("status"), "{m}");
    let m = fx.err("todo", json!({"action": "add", "items": []}));
    assert!(m.contains("items"), "{m}");

    // Another session's registry has its own list.
    let other = Fx::new();
    assert_eq!(
        other.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
    assert_eq!(
        fx.ok("todo", json!({"action": "clear"})),
        "Todo list is empty."
    );
}

#[test]
fn todo_list_follows_the_session_across_registry_rebuilds() {
    let state = Arc::new(hermes_runtime::tools::TodoState::new());
    let shared = state.clone();
    let first = Fx::with(move |e| e.todo_state = Some(shared), Some(&["todo"]));
    first.ok("todo", json!({"action": "add", "items": ["plan", "do"]}));
    first.ok(
        "todo",
        json!({"action": "update", "id": 1, "status": "completed"}),
    );
    drop(first); // the gateway evicted the agent and its registry

    let shared = state.clone();
    let rebuilt = Fx::with(move |e| e.todo_state = Some(shared), Some(&["todo"]));
    assert_eq!(
        rebuilt.ok("todo", json!({"action": "list"})),
        "Todo (1/2 done):\n[x] 1. plan\n[ ] 2. do"
    );

    // A new session (/new) gets a new state and starts empty.
    let fresh = Arc::new(hermes_runtime::tools::TodoState::new());
    let after_new = Fx::with(move |e| e.todo_state = Some(fresh), Some(&["todo"]));
    assert_eq!(
        after_new.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
}
