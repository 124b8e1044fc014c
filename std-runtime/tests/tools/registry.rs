//! The registry: which toolsets it builds, what it refuses, and argument
//! errors (bad fields, numbers at the extremes) that name the field.

use hermes_runtime::tools::{TOOLSETS, ToolEnv, ToolsError, build_registry};
use serde_json::json;
use tempfile::TempDir;

use super::support::Fx;
use super::web::web_fx;

#[test]
fn registry_holds_every_toolset_it_can_support() {
    let fx = Fx::new();
    let names: Vec<&str> = fx.reg.names().collect();
    // No delegate model: delegate is left out (web needs no async bridge).
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "patch",
            "search_files",
            "terminal",
            "web_fetch",
            "web_search",
            "memory",
            "todo",
            "skills_list",
            "skill_view",
            "skill_manage"
        ]
    );
    for (set, tools) in TOOLSETS {
        for t in *tools {
            // No delegate model here; `cronjob` is registered by the
            // front-ends, which hold the store (see `cronjob::offered`);
            // `session_search` needs the store too (`ToolEnv::session_search`);
            // `send_file` and `send_message` are the front-ends' as well
            // (they know the chat); `vision` needs a model that sees images
            // (`ToolEnv::vision`); `clarify` needs someone to answer (the
            // front-end's `Clarifier`).
            if ![
                "delegate",
                "cronjob",
                "session_search",
                "send_file",
                "send_message",
                "vision",
                "clarify",
            ]
            .contains(set)
            {
                assert!(names.contains(t), "{t} of {set} missing");
            }
        }
    }
    for spec in fx.reg.specs() {
        assert_eq!(spec.schema()["type"], "object", "{}", spec.name);
        assert!(!spec.description.is_empty());
    }
}

#[test]
fn the_front_ends_toolsets_may_be_named_alone() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path(), work.path());
    for set in ["cronjob", "send_file", "send_message"] {
        let reg = build_registry(&env, Some(&[set.into()])).unwrap();
        assert!(reg.specs().is_empty(), "{set}: the front-end registers it");
    }
}

#[test]
fn unknown_toolset_is_an_error_listing_valid_ones() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path(), work.path());
    let err = build_registry(&env, Some(&["file".into(), "browser".into()])).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ToolsError::UnknownToolset { .. }));
    assert!(msg.contains("browser"), "{msg}");
    assert!(
        msg.contains("file, terminal, web, memory, todo, skills, delegate"),
        "{msg}"
    );
}

#[test]
fn explicit_delegate_without_model_is_an_error_and_web_needs_no_bridge() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path(), work.path());
    let err = build_registry(&env, Some(&["delegate".into()])).unwrap_err();
    assert!(matches!(err, ToolsError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("delegate"), "{err}");
    // web_fetch is a blocking exchange on the shared HTTP agent: no async
    // runtime needed.
    let registry = build_registry(&env, Some(&["web".into()])).unwrap();
    assert!(registry.get("web_fetch").is_some());
}

#[test]
fn missing_workdir_is_an_error() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path().join("nope"), work.path());
    let err = build_registry(&env, None).unwrap_err();
    assert!(matches!(err, ToolsError::Workdir { .. }), "{err}");
}

#[test]
fn selected_toolsets_only() {
    let fx = Fx::with(|_| {}, Some(&["todo", "memory", "todo"]));
    let names: Vec<&str> = fx.reg.names().collect();
    assert_eq!(names, ["todo", "memory"]);
}

#[test]
fn bad_arguments_name_the_field() {
    let fx = Fx::new();
    let m = fx.err("read_file", json!({}));
    assert!(m.contains("path"), "{m}");
    let m = fx.err("read_file", json!({"path": "a", "offset": "ten"}));
    assert!(m.contains("offset"), "{m}");
    let m = fx.err("terminal", json!({"command": 5}));
    assert!(m.contains("command"), "{m}");
    let m = fx.err(
        "search_files",
        json!({"pattern": "x", "target": "everything"}),
    );
    assert!(m.contains("target"), "{m}");
    let m = fx.err("memory", json!({"action": "forget"}));
    assert!(m.contains("action"), "{m}");
}

#[test]
fn model_numbers_at_the_extremes_are_errors_not_panics() {
    let fx = Fx::new();
    let m = fx.err("terminal", json!({"command": "true", "timeout": u64::MAX}));
    assert!(m.contains("between 1 and 600"), "{m}");
    let m = fx.err("terminal", json!({"command": "true", "timeout": -1}));
    assert!(m.contains("timeout"), "{m}");
    let m = fx.err("search_files", json!({"pattern": "x", "limit": u64::MAX}));
    assert!(m.contains("between 1 and 1000"), "{m}");
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": u64::MAX, "status": "completed"}),
    );
    assert!(m.contains("id"), "{m}");
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": u32::MAX, "status": "completed"}),
    );
    assert!(m.contains("no task with id"), "{m}");

    let web = web_fx();
    let m = web.err(
        "web_fetch",
        json!({"url": "http://127.0.0.1:9/", "max_bytes": u64::MAX}),
    );
    assert!(m.contains("max_bytes"), "{m}");
}

#[test]
fn the_tools_that_only_read_say_so() {
    let fx = Fx::new();
    for name in ["read_file", "search_files", "web_fetch", "web_search"] {
        if fx.reg.get(name).is_some() {
            assert!(fx.reg.is_read_only(name), "{name}");
        }
    }
    assert!(fx.reg.get("read_file").is_some());
    for name in [
        "write_file",
        "patch",
        "terminal",
        "todo",
        "memory",
        "delegate_task",
    ] {
        assert!(!fx.reg.is_read_only(name), "{name}");
    }
}
