//! The optional toolsets (cargo features `web`, `delegate`, `mcp`) in whichever
//! build runs this: built in, they work; left out, asking for them by name
//! is refused with an error that names the feature, and the default toolset
//! list leaves them out silently. CI runs it both ways (`.ci/run`: the
//! workspace tests, then `--no-default-features`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_runtime::tools::{ToolEnv, ToolsError, build_registry};

fn env() -> (tempfile::TempDir, ToolEnv) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let env = ToolEnv::new(work, home);
    (dir, env)
}

#[test]
fn a_toolset_left_out_of_the_build_is_refused_by_name() {
    let (_dir, env) = env();
    let web = build_registry(&env, Some(&["web".into()]));
    if cfg!(feature = "web") {
        let reg = web.unwrap();
        assert!(reg.names().any(|n| n == "web_fetch"));
    } else {
        match web {
            Err(ToolsError::Unavailable { toolset, reason }) => {
                assert_eq!(toolset, "web");
                assert_eq!(reason, "this hermes was built without the `web` feature");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(reg) => panic!("web was not refused: {:?}", reg.names().collect::<Vec<_>>()),
        }
    }
    // Without a model for sub-agents `delegate` is unavailable either way,
    // for a different reason.
    let Err(ToolsError::Unavailable { toolset, reason }) =
        build_registry(&env, Some(&["delegate".into()]))
    else {
        panic!("delegate without a model was not refused");
    };
    assert_eq!(toolset, "delegate");
    if cfg!(feature = "delegate") {
        assert_eq!(reason, "no model for sub-agents was provided");
    } else {
        assert_eq!(
            reason,
            "this hermes was built without the `delegate` feature"
        );
    }
}

#[test]
fn mcp_left_out_of_the_build_is_refused_by_name() {
    let (_dir, env) = env();
    let Err(ToolsError::Unavailable { toolset, reason }) =
        build_registry(&env, Some(&["mcp".into()]))
    else {
        panic!("mcp without servers was not refused");
    };
    assert_eq!(toolset, "mcp");
    if cfg!(feature = "mcp") {
        assert_eq!(
            reason,
            "no MCP server is configured (add [mcp.servers.NAME] to config.toml)"
        );
    } else {
        assert_eq!(reason, "this hermes was built without the `mcp` feature");
    }
}

#[test]
fn the_default_toolsets_are_the_ones_built_in() {
    let (_dir, env) = env();
    let reg = build_registry(&env, None).unwrap();
    let names: Vec<&str> = reg.names().collect();
    assert_eq!(
        names.contains(&"web_fetch"),
        cfg!(feature = "web"),
        "{names:?}"
    );
    for always in [
        "read_file",
        "write_file",
        "patch",
        "search_files",
        "terminal",
        "memory",
        "todo",
    ] {
        assert!(names.contains(&always), "{always} missing from {names:?}");
    }
}
