//! The `memory` tool of a gateway user (issue 44): it writes that user's
//! folder and nobody else's, a hostile user id cannot steer it out of
//! `$HERMES_HOME`, only the owner and the named writers write the shared
//! memory, and a 10 MB entry is refused with nothing written.

use hermes_runtime::memory_scope::{MemorySettings, shared_dir, users_dir};
use serde_json::json;

use super::support::Fx;

fn settings() -> MemorySettings {
    MemorySettings {
        owner: Some("telegram:1".into()),
        shared_writers: vec!["telegram:2".into()],
    }
}

/// A fixture whose memory tool serves `platform`/`user`.
fn serving(platform: &'static str, user: &'static str) -> Fx {
    Fx::with(
        |env| env.memory = Some(settings().place(&env.hermes_home, platform, user)),
        Some(&["memory"]),
    )
}

/// Every file under `dir`, relative to it.
fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_user_id_with_path_characters_writes_only_its_own_folder() {
    let fx = serving("telegram", "../../../escaped");
    let out = fx.ok(
        "memory",
        json!({"action": "add", "content": "Alice is allergic to nuts."}),
    );
    assert!(out.contains("Added the entry"), "{out}");
    fx.ok(
        "memory",
        json!({"action": "add", "target": "user", "content": "Name: Alice."}),
    );
    assert_eq!(
        files(fx.home.path()),
        [
            "memories/users/telegram/%2E%2E%2F%2E%2E%2F%2E%2E%2Fescaped/MEMORY.md",
            "memories/users/telegram/%2E%2E%2F%2E%2E%2F%2E%2E%2Fescaped/USER.md",
        ]
    );
    // Nothing landed beside $HERMES_HOME either.
    let parent = fx.home.path().parent().unwrap();
    assert!(!parent.join("escaped").exists());
    assert!(!users_dir(fx.home.path()).join("escaped").exists());
}

#[test]
fn only_the_owner_and_named_writers_write_the_shared_memory() {
    let bob = serving("telegram", "3");
    let err = bob.err(
        "memory",
        json!({"action": "add", "target": "shared", "content": "Wifi password is hunter2."}),
    );
    assert!(err.contains("only the owner"), "{err}");
    assert!(!shared_dir(bob.home.path()).exists());

    let writer = serving("telegram", "2");
    writer.ok(
        "memory",
        json!({"action": "add", "target": "shared", "content": "The bins go out on Tuesday."}),
    );
    assert_eq!(
        std::fs::read_to_string(shared_dir(writer.home.path()).join("MEMORY.md")).unwrap(),
        "The bins go out on Tuesday.\n"
    );

    // The owner's own memory is $HERMES_HOME's files (the CLI's).
    let owner = serving("telegram", "1");
    owner.ok(
        "memory",
        json!({"action": "add", "content": "Owner likes short answers."}),
    );
    owner.ok(
        "memory",
        json!({"action": "add", "target": "shared", "content": "Dinner at seven."}),
    );
    assert_eq!(
        files(owner.home.path()),
        ["MEMORY.md", "memories/shared/MEMORY.md"]
    );

    // The CLI's tool has no shared scope.
    let cli = Fx::with(|_| {}, Some(&["memory"]));
    let err = cli.err(
        "memory",
        json!({"action": "add", "target": "shared", "content": "x"}),
    );
    assert!(err.contains("no shared memory"), "{err}");
}

#[test]
fn a_ten_megabyte_entry_is_refused_and_nothing_is_written() {
    let fx = serving("telegram", "3");
    fx.ok("memory", json!({"action": "add", "content": "kept"}));
    let huge = "a".repeat(10 * 1024 * 1024);
    let err = fx.err("memory", json!({"action": "add", "content": huge}));
    assert!(err.contains("10485760 bytes, over the limit"), "{err}");
    let dir = settings().place(fx.home.path(), "telegram", "3").dir;
    assert_eq!(
        std::fs::read_to_string(dir.join("MEMORY.md")).unwrap(),
        "kept\n"
    );
}
