//! The factory's per-session tool state (split from `app.rs`).
#![allow(clippy::unwrap_used)]
use super::*;
use hermes_runtime::config::{Environment, Overrides, load};

fn factory() -> (tempfile::TempDir, RuntimeAgentFactory) {
    let home = tempfile::tempdir().unwrap();
    let env = Environment::from_pairs([("HERMES_HOME", home.path().display().to_string())]);
    let overrides = Overrides {
        workdir: Some(home.path().to_owned()),
        ..Overrides::default()
    };
    let settings = load(&overrides, &env).unwrap();
    let factory = RuntimeAgentFactory::new(&settings, None).unwrap();
    (home, factory)
}

#[test]
fn todo_list_survives_agent_rebuilds_and_is_fresh_per_session() {
    let (_home, f) = factory();
    let a = f.todo_for("s1");
    // A rebuilt (evicted, /model) agent of the same session gets the same list.
    f.build("s1", "m", "prompt").unwrap();
    assert!(Arc::ptr_eq(&a, &f.todo_for("s1")));
    assert!(
        !Arc::ptr_eq(&a, &f.todo_for("s2")),
        "a new session starts empty"
    );
}

#[test]
fn todo_lists_are_bounded() {
    let (_home, f) = factory();
    let first = f.todo_for("s0");
    for i in 1..=TODO_LISTS_KEPT {
        f.todo_for(&format!("s{i}"));
    }
    assert_eq!(f.todo_lists.lock().unwrap().len(), TODO_LISTS_KEPT);
    assert!(
        !Arc::ptr_eq(&first, &f.todo_for("s0")),
        "the oldest was dropped"
    );
}
