//! A hermes-agent home at `$HERMES_HOME` (issue 45, item 0): made by the
//! real hermes-agent package (`tests/python/hermes_agent_home.py`, run with
//! `HERMES_AGENT_PYTHON`, the venv `.ci/run` creates), recognised, named in
//! one paragraph with the two ways on, and left byte for byte as it was.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::support::{Env, stderr};

/// The interpreter of a venv with `hermes-agent` installed, or `None` (the
/// test is skipped in the fast tier, `hermes_tests::tier`).
pub fn hermes_agent_python() -> Option<String> {
    use hermes_tests::tier::{Component, require};
    require(&[Component::HermesAgentPython])
        .then(|| std::env::var("HERMES_AGENT_PYTHON").unwrap_or_default())
}

/// Makes a hermes-agent home in `home` with the real package: its agent
/// loop talks to a [`FakeProvider`] scripted here — in the first
/// conversation it calls its `memory` tool twice and `skill_manage` once,
/// the second (a Telegram chat) is answered in text.
pub fn make_hermes_agent_home(python: &str, home: &Path) {
    let responder = Arc::new(|req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let first_user = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        if first_user.contains("derailleur") {
            return Reply::text("A derailleur moves the chain from one sprocket to the next.");
        }
        let skill = "---\nname: tyre-pressure\ndescription: Check and set bicycle tyre pressure.\n\
                     ---\n\n# Tyre pressure\n\n1. Read the range on the tyre wall.\n\
                     2. Pump to the middle of it.\n";
        match messages.iter().filter(|m| m["role"] == "tool").count() {
            0 => Reply::tool(
                "call_mem1",
                "memory",
                r#"{"action": "add", "target": "memory", "content": "The user's bicycle has 11 gears."}"#,
            ),
            1 => Reply::tool(
                "call_mem2",
                "memory",
                r#"{"action": "add", "target": "user", "content": "Prefers short answers."}"#,
            ),
            2 => Reply::tool(
                "call_skill1",
                "skill_manage",
                &serde_json::json!({"action": "create", "name": "tyre-pressure", "content": skill})
                    .to_string(),
            ),
            _ => Reply::text("The lowest gear: the smallest chainring with the largest sprocket."),
        }
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/hermes_agent_home.py");
    let o = Command::new(python)
        .arg(&script)
        .arg(home)
        .arg(provider.base_url())
        .env_remove("HERMES_HOME")
        .env("HOME", home.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn a_hermes_agent_home_is_named_with_the_ways_on_and_left_untouched() {
    let Some(python) = hermes_agent_python() else {
        return;
    };
    let env = Env::new();
    let home = env.home.path().join("agent-home");
    make_hermes_agent_home(&python, &home);
    for made in [
        "config.yaml",
        "state.db",
        "memories/MEMORY.md",
        "skills/tyre-pressure/SKILL.md",
    ] {
        assert!(home.join(made).is_file(), "hermes-agent made {made}");
    }
    let before = files(&home);
    for args in [
        &["sessions", "list"][..],
        &["-z", "hello"],
        &["doctor"],
        &["config", "show"],
        &["skills", "list"],
        &["backup"],
    ] {
        let o = env
            .bare()
            .env("HERMES_HOME", &home)
            .env("HERMES_BASE_URL", "http://127.0.0.1:9/v1")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("is a hermes-agent home"), "{args:?}: {err}");
        assert!(err.contains("config.yaml"), "{err}");
        assert!(
            err.contains("hermes-agent's session database, schema"),
            "{err}"
        );
        assert!(err.contains("left untouched"), "{err}");
        assert!(
            err.contains(&format!(
                "HERMES_HOME=~/.hermes-rs hermes import hermes-agent {}",
                home.display()
            )),
            "{err}"
        );
        assert!(!err.contains("not available yet"), "{err}");
        assert!(err.contains("HERMES_HOME=DIR"), "{err}");
        assert!(!err.contains("cannot migrate"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one paragraph: {err}");
    }
    assert_eq!(
        files(&home),
        before,
        "not a byte of the home changed, nothing added"
    );
}

#[test]
fn the_help_says_where_the_data_lives_and_how_to_live_beside_hermes_agent() {
    let env = Env::new();
    let o = env.bare().arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("default ~/.hermes"), "{help}");
    assert!(help.contains("hermes-agent"), "{help}");
    assert!(help.contains("HERMES_HOME=~/.hermes-rs"), "{help}");
}
