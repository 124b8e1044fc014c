//! Every tokio task of the product is spawned through
//! `hermes_runtime::task`, which boxes the future (or blocking closure)
//! first: tokio makes its task machinery once per spawned type and
//! scheduler, ≈ 0.2 MB of the binary when each of the gateway's ≈ 170
//! futures had its own (std-runtime/src/task.rs). A direct spawn compiles
//! and works, so only this test notices one. Read from the sources,
//! comments and test modules left out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_tests::imports::product_code;

/// Spawns that bypass the boxing: tokio's free functions, and the
/// methods of a runtime handle (the product names its handles `handle`).
const DIRECT: &[&str] = &[
    "tokio::spawn(",
    "tokio::task::spawn(",
    "tokio::task::spawn_blocking(",
    "tokio::task::spawn_local(",
    "handle.spawn(",
    "handle.spawn_blocking(",
    "Handle::current().spawn(",
];

/// The lines of `code` with a direct spawn.
fn direct_spawns(code: &str) -> Vec<String> {
    code.lines()
        .enumerate()
        .filter(|(_, line)| DIRECT.iter().any(|d| line.contains(d)))
        .map(|(i, line)| format!("{}: {}", i + 1, line.trim()))
        .collect()
}

#[test]
fn tokio_tasks_are_spawned_boxed_through_the_runtime() {
    let mut direct = Vec::new();
    let mut boxed = 0;
    for (file, code) in product_code() {
        if file.ends_with("std-runtime/src/task.rs") {
            continue;
        }
        boxed += code.matches("task::spawn").count();
        for line in direct_spawns(&code) {
            direct.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(
        direct.is_empty(),
        "tokio tasks spawned directly (spawn them through hermes_runtime::task):\n{}",
        direct.join("\n")
    );
    // The scan must see the product's spawns at all.
    assert!(boxed >= 50, "only {boxed} boxed spawns found");
}

#[test]
fn the_scan_sees_a_direct_spawn() {
    let code =
        "fn f(handle: &Handle) {\n    tokio::spawn(async {});\n    handle.spawn(async {});\n}\n";
    let found = direct_spawns(code);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("2: tokio::spawn"));
}
