//! Every SQLite connection of the product is opened by the store, right
//! after `configure_library` (store/src/sqlite/mod.rs): the library's
//! process-wide settings can only be made before its first connection, so
//! a connection opened anywhere else could come first and keep them from
//! taking effect. Read from the sources, comments and test modules left out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hermes_tests::imports::product_code;

/// How rusqlite opens a connection.
const OPENS: &[&str] = &[
    "Connection::open(",
    "Connection::open_with_flags(",
    "Connection::open_in_memory(",
    "Connection::open_in_memory_with_flags(",
];

/// The lines of `code` that open a connection without a
/// `configure_library()` call above them in the same function.
fn unconfigured_opens(code: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !OPENS.iter().any(|open| line.contains(open)) {
            continue;
        }
        let mut configured = false;
        for above in lines[..i].iter().rev() {
            if above.contains("configure_library()") {
                configured = true;
                break;
            }
            if is_fn_header(above) {
                break;
            }
        }
        if !configured {
            found.push(format!("{}: {}", i + 1, line.trim()));
        }
    }
    found
}

/// Whether `line` starts a function (`fn`, `pub fn`, `pub(super) fn`, …).
fn is_fn_header(line: &str) -> bool {
    let mut words = line
        .split_whitespace()
        .skip_while(|w| w.starts_with("pub") || matches!(*w, "const" | "unsafe" | "async"));
    words.next() == Some("fn")
}

#[test]
fn sqlite_connections_are_opened_by_the_store_after_its_library_settings() {
    let mut opened_in = Vec::new();
    let mut unconfigured = Vec::new();
    for (file, code) in product_code() {
        if !OPENS.iter().any(|open| code.contains(open)) {
            continue;
        }
        for line in unconfigured_opens(&code) {
            unconfigured.push(format!("{}:{line}", file.display()));
        }
        opened_in.push(file);
    }
    let outside: Vec<_> = opened_in
        .iter()
        .filter(|f| !f.to_string_lossy().contains("store/src/sqlite/"))
        .collect();
    assert!(
        outside.is_empty(),
        "SQLite opened outside the store (open it through hermes_store): {outside:?}"
    );
    assert!(
        opened_in.len() >= 2,
        "the store's own opens were found: {opened_in:?}"
    );
    assert!(
        unconfigured.is_empty(),
        "connections opened without configure_library() just before:\n{}",
        unconfigured.join("\n")
    );
}

/// The check sees an open with no settings before it, and one with them.
#[test]
fn the_check_finds_an_unconfigured_open() {
    let code = "fn a() {\n    configure_library();\n}\n\
                fn b() {\n    let c = Connection::open(path)?;\n}\n\
                pub(super) fn c() {\n    configure_library();\n    let x = 1;\n\
                \x20   let c = Connection::open_in_memory()?;\n}\n";
    assert_eq!(
        unconfigured_opens(code),
        vec!["5: let c = Connection::open(path)?;".to_owned()]
    );
}
