//! Every build a package or the board option ships is linked with a symbol
//! order recorded from its own runs (`scripts/symbol-order.sh`,
//! `cli/build.rs`). Without one, `cli/build.rs` links silently unordered:
//! the armhf package was, and a one-shot ran code spread over 136 windows
//! of 64 KiB instead of 38 (benchmarks/runs/2026-12-04-symbol-order.md).

use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The targets the shell script FILE lists in its array NAME (`NAME=(…)`).
fn script_targets(file: &str, name: &str) -> Vec<String> {
    let script = std::fs::read_to_string(repo().join(file)).unwrap();
    let prefix = format!("{name}=(");
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{file} names its {name}"));
    let targets: Vec<String> = line
        .trim_end_matches(')')
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(!targets.is_empty(), "{line}");
    targets
}

#[test]
fn every_shipped_build_has_a_recorded_symbol_order() {
    let mut orders = vec![
        "x86_64-unknown-linux-musl".to_owned(),
        "x86_64-unknown-linux-gnu-board".to_owned(),
    ];
    // The arm packages' and the tarballs' builds whose std is built from
    // source (armv6, riscv64).
    orders.extend(script_targets(".ci/cross", "cross_targets"));
    orders.extend(script_targets(
        "scripts/lib/targets.sh",
        "std_from_source_targets",
    ));
    for name in orders {
        let path = repo().join("cli/symbol-order").join(format!("{name}.txt"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/symbol-order.sh)", path.display()));
        let names: Vec<&str> = text.lines().collect();
        // A start, a one-shot and an idle gateway run thousands of
        // functions; one symbol name per line, as lld reads them.
        assert!(
            names.len() > 1000,
            "{}: {} names",
            path.display(),
            names.len()
        );
        assert!(
            names
                .iter()
                .all(|n| !n.is_empty() && !n.contains(char::is_whitespace)),
            "{}: a line that is not one symbol name",
            path.display()
        );
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("_ZN") || n.starts_with("_R")),
            "{}: no Rust symbol",
            path.display()
        );
    }
}
