//! No crate of the workspace has a circle of more than two files (issue 40,
//! "Done means"): files that import each other in a loop can only be read,
//! tested and moved together, and a loop of three or more is a knot nobody
//! sees from one file. Two files that use each other (a type and its
//! helper) are allowed. Read from the sources (`hermes_tests::imports`,
//! which says what counts as an import): the workspace's members from its
//! manifest, each product crate's `src/` (`product_sources`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use hermes_tests::imports::{FileGraph, product_sources};

#[test]
fn no_crate_has_a_circle_of_more_than_two_files() {
    let sources = product_sources();
    assert!(sources.len() >= 15, "the members were read: {sources:?}");
    let mut knots = Vec::new();
    for src in &sources {
        let graph = FileGraph::of(src);
        for group in graph.circles_over(2) {
            let files: Vec<String> = group.iter().map(|f| f.display().to_string()).collect();
            knots.push(format!(
                "{}: {}{}",
                src.parent().unwrap_or(src).display(),
                files.join(", "),
                graph.describe(&group)
            ));
        }
    }
    assert!(
        knots.is_empty(),
        "files importing each other in a circle of more than two (move what they share into \
         a module of its own below them, or turn an arrow around):\n{}",
        knots.join("\n")
    );
}

/// The check sees a circle: three modules of a made-up crate, each using
/// the next.
#[test]
fn the_check_finds_a_circle_of_three() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    std::fs::write(src.join("b.rs"), "use super::c::C;\npub struct B;\n").expect("write");
    std::fs::write(
        src.join("c.rs"),
        "// use crate::b; in a comment is no import\npub struct C(crate::a::A);\n",
    )
    .expect("write");
    let graph = FileGraph::of(src);
    let circles = graph.circles_over(2);
    assert_eq!(
        circles,
        vec![vec![
            PathBuf::from("a.rs"),
            PathBuf::from("b.rs"),
            PathBuf::from("c.rs")
        ]]
    );
    assert!(
        graph
            .describe(&circles[0])
            .contains("c.rs → a.rs: crate::a::A")
    );
    // A test module may reach anywhere.
    std::fs::write(
        src.join("c.rs"),
        "pub struct C;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    )
    .expect("write");
    assert!(FileGraph::of(src).circles_over(2).is_empty());
    // Two files using each other are allowed.
    std::fs::write(src.join("b.rs"), "use crate::a::A;\npub struct B;\n").expect("write");
    assert!(FileGraph::of(src).circles_over(2).is_empty());
}
