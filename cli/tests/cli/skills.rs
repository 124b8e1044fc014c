//! Skills (SPEC Y8) in the real binary with a scripted provider: the agent
//! saves a skill in one session and improves it in the next turn, while
//! that session's system prompt stays byte-identical; the next session
//! lists it and loads it; `hermes skills` shows, restores, removes and
//! installs.

use std::path::Path;

use hermes_tests::{FakeProvider, Reply};
use serde_json::json;

use super::support::{Env, stderr, stdout, system_prompt};

const DEPLOY: &str = "---\nname: deploy-notes\ndescription: Deploys the site with the blue-green script.\n---\n# Deploy\n\n1. Run `make deploy`.\n2. Check /health.\n";

fn ok(o: &std::process::Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

#[test]
fn saved_in_one_session_listed_in_the_next_and_restorable() {
    let env = Env::new();
    let create = json!({"action": "create", "name": "deploy-notes", "content": DEPLOY});
    let patch = json!({"action": "patch", "name": "deploy-notes",
                       "old_string": "2. Check /health.", "new_string": "2. Check /health and /ready."});
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "skill_manage", &create.to_string()),
        Reply::text("Saved the deploy procedure."),
        Reply::tool("c2", "skill_manage", &patch.to_string()),
        Reply::text("Improved it."),
        Reply::tool("c3", "skill_view", r#"{"name":"deploy-notes"}"#),
        Reply::text("Deploying as the skill says."),
    ])
    .unwrap();
    let url = provider.base_url();
    ok(&env.run(&url, &["-z", "remember how we deploy"]));
    ok(&env.run(&url, &["-c", "-z", "the check is /ready too"]));
    ok(&env.run(&url, &["-z", "deploy please"]));
    let requests = provider.requests();
    assert_eq!(requests.len(), 6);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );

    // One session, two turns, a skill created and changed in between: the
    // system prompt is the same bytes in every request.
    let first = system_prompt(&requests[0]);
    for r in &requests[1..4] {
        assert_eq!(system_prompt(r), first);
    }
    assert!(!first.contains("deploy-notes"), "{first}");
    assert!(first.contains("Save a skill with skill_manage"), "{first}");
    let path = env.home.path().join("skills/deploy-notes/SKILL.md");
    let patched = std::fs::read_to_string(&path).unwrap();
    assert!(patched.contains("/health and /ready"), "{patched}");

    // The next session lists it (name and description only) and loads it.
    let second = system_prompt(&requests[4]);
    assert!(
        second.contains("- deploy-notes: Deploys the site with the blue-green script.\n"),
        "{second}"
    );
    assert!(!second.contains("make deploy"), "{second}");
    let messages = requests[5]["messages"].as_array().unwrap();
    let viewed = messages.last().unwrap()["content"].as_str().unwrap();
    assert_eq!(viewed, patched);

    // The user's side.
    let listed = ok(&env.bare().args(["skills", "list"]).output().unwrap());
    assert_eq!(
        listed,
        "deploy-notes  Deploys the site with the blue-green script.\n"
    );
    let shown = ok(&env
        .bare()
        .args(["skills", "show", "deploy-notes"])
        .output()
        .unwrap());
    assert_eq!(shown, patched);
    let restored = ok(&env
        .bare()
        .args(["skills", "restore", "deploy-notes"])
        .output()
        .unwrap());
    assert_eq!(
        restored,
        "Restored skill 'deploy-notes': undid patch SKILL.md.\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), DEPLOY);

    let removed = ok(&env
        .bare()
        .args(["skills", "remove", "deploy-notes"])
        .output()
        .unwrap());
    assert!(
        removed.contains("Deleted skill 'deploy-notes'"),
        "{removed}"
    );
    assert!(!path.exists());
    let listed = ok(&env.bare().args(["skills", "list"]).output().unwrap());
    assert!(listed.starts_with("No skills in "), "{listed}");
    ok(&env
        .bare()
        .args(["skills", "restore", "deploy-notes"])
        .output()
        .unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), DEPLOY);

    let o = env
        .bare()
        .args(["skills", "show", "nope"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("there is no skill named 'nope'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn install_the_example_skill() {
    let env = Env::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/skills/example-skill");
    let arg = example.display().to_string();
    let out = ok(&env
        .bare()
        .args(["skills", "install", &arg])
        .output()
        .unwrap());
    assert!(out.starts_with("Installed skill 'example-skill'"), "{out}");
    assert!(
        env.home
            .path()
            .join("skills/example-skill/scripts/changes.sh")
            .is_file()
    );
    let o = env
        .bare()
        .args(["skills", "install", &arg])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("already installed"), "{}", stderr(&o));
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(bad.path().join("SKILL.md"), "---\nname: Bad Name\n---\nx\n").unwrap();
    let o = env
        .bare()
        .args(["skills", "install", &bad.path().display().to_string()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs 'name:'"), "{}", stderr(&o));
}
