//! The layering invariants, checked against the sources (ARCHITECTURE.md,
//! "Invariants"):
//!
//! - The features — `client`, `tools`, `sandbox`, `spill`, `mcp`, `media`
//!   — never import `crate::config`. Settings flow down: `config`
//!   loads and validates them into the types each feature owns and hands
//!   them out; a feature that reached back up into `config` would tie the
//!   loader and the feature into one knot again.
//! - The top-level modules of the crate import each other without a cycle:
//!   every module sits above the ones it imports, so any of them can be
//!   read, tested or split into a crate of its own with only what lies
//!   below it. A helper two modules share lives in the lower one, or in a
//!   small module of its own (`fsutil`, `text`) that both import. The
//!   failure names each cycle and the import behind each of its arrows.
//! - The store is the crate `hermes-store` below this one (`store/`,
//!   re-exported as `crate::store`). Cargo already keeps it from importing
//!   the runtime, `config` included: a crate cannot depend on its own
//!   dependent. What cargo does not see is a mention in the store's
//!   sources (a doc link or path naming `hermes_runtime` or another crate
//!   above it), and a dependency on one added to its manifest would only
//!   fail as a cycle; both are checked here.
//!
//! The checks read the `.rs` files, drop comments and string literals, and
//! resolve each `crate::…`, `super::…` and `self::…` path (use trees
//! included, inline `mod` blocks tracked) to the module it names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use hermes_tests::imports::{imported_paths, module_of, rust_files, tokens};

/// The feature modules that must not import `config`. The store, once one
/// of them, is a crate below this one now (`hermes-store`); see
/// [`the_store_crate_names_nothing_above_it`].
const FEATURES: &[&str] = &["client", "tools", "sandbox", "spill", "mcp", "media"];

/// The crates above `hermes-store` (as they are spelled in code and in a
/// manifest), which it must not name.
const ABOVE_THE_STORE: &[(&str, &str)] = &[
    ("hermes_runtime", "hermes-runtime"),
    ("hermes_gateway", "hermes-gateway"),
    ("hermes_cli", "hermes-cli"),
];

/// Every path in `src` (the file of module `module`) that names
/// `crate::config` or something in it.
fn config_paths(src: &str, module: &[String]) -> Vec<String> {
    imported_paths(src, module)
        .into_iter()
        .filter(|path| path.first().is_some_and(|s| s == "config"))
        .map(|path| format!("crate::{}", path.join("::")))
        .collect()
}

#[test]
fn the_features_never_import_config() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for feature in FEATURES {
        let file = src.join(format!("{feature}.rs"));
        if file.exists() {
            files.push(file);
        }
        let dir = src.join(feature);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    assert!(
        files.len() > 40,
        "the walk found the features' files ({})",
        files.len()
    );
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let text = std::fs::read_to_string(file).expect("read a source file");
        for path in config_paths(&text, &module_of(rel)) {
            violations.push(format!("{}: {path}", rel.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "features reach up into config (move the type into the feature, or the helper into \
         redact/env):\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_store_crate_names_nothing_above_it() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("../store");
    let mut files = Vec::new();
    rust_files(&store.join("src"), &mut files);
    assert!(
        files.len() > 30,
        "the walk found the store's files ({})",
        files.len()
    );
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        // Comments included: a doc naming the runtime is as stale as an import.
        let words = tokens(&text);
        for (name, _) in ABOVE_THE_STORE {
            if words.iter().any(|w| w == name) {
                let rel = file.strip_prefix(&store).unwrap_or(file);
                violations.push(format!("store/{}: {name}", rel.display()));
            }
        }
    }
    let manifest = std::fs::read_to_string(store.join("Cargo.toml")).expect("read Cargo.toml");
    for line in manifest.lines() {
        for (_, package) in ABOVE_THE_STORE {
            if line.trim_start().starts_with(package) {
                violations.push(format!("store/Cargo.toml: {line}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the store names a crate above it (move what it needs down into the store, or \
         keep it in the runtime):\n{}",
        violations.join("\n")
    );
}

/// The crate's top-level modules (`src/x.rs`, `src/x/`), but the root
/// and this test.
fn top_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("read_dir")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.is_dir() || path.extension().is_some_and(|e| e == "rs"))
        .filter_map(|path| Some(path.file_stem()?.to_string_lossy().into_owned()))
        .filter(|name| name != "lib" && name != "layering")
        .collect()
}

/// Which top-level module imports which: for each edge `a → b`, the first
/// import that makes it (`a/file.rs: crate::b::…`), files read in order.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn module_graph(src: &Path) -> Graph {
    let modules = top_modules(src);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut graph = Graph::new();
    for file in &files {
        let rel = file.strip_prefix(src).expect("under src");
        let module = module_of(rel);
        let Some(from) = module.first().filter(|m| modules.contains(*m)) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for path in imported_paths(&text, &module) {
            let Some(to) = path.first().filter(|m| modules.contains(*m) && *m != from) else {
                continue;
            };
            graph
                .entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_insert_with(|| format!("{}: crate::{}", rel.display(), path.join("::")));
        }
    }
    graph
}

/// Every cycle of `graph` that some edge lies on: for each edge, the
/// shortest cycle through it; each cycle once, starting at its least
/// module.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    for (from, edges) in graph {
        for to in edges.keys() {
            // The shortest way back from `to` to `from`, breadth first.
            let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
            let mut queue = VecDeque::from([to]);
            while let Some(at) = queue.pop_front() {
                if at == from {
                    break;
                }
                for next in graph.get(at).into_iter().flat_map(BTreeMap::keys) {
                    if next != to && !came_from.contains_key(next) {
                        came_from.insert(next, at);
                        queue.push_back(next);
                    }
                }
            }
            if !came_from.contains_key(from) {
                continue;
            }
            let mut cycle = vec![from.clone()];
            let mut at = from;
            while at != to {
                at = came_from[at];
                cycle.push(at.clone());
            }
            cycle.reverse();
            // `cycle` is `to … from`; start it at its least module.
            let least = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap_or(0);
            cycle.rotate_left(least);
            found.insert(cycle);
        }
    }
    found.into_iter().collect()
}

/// `a → b → a`, each edge with the import that makes it.
fn describe(cycle: &[String], graph: &Graph) -> String {
    let mut out = format!("{} → {}", cycle.join(" → "), cycle[0]);
    for (i, from) in cycle.iter().enumerate() {
        let to = &cycle[(i + 1) % cycle.len()];
        out.push_str(&format!("\n    {from} → {to}: {}", graph[from][to]));
    }
    out
}

#[test]
fn the_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(
        graph
            .get("tools")
            .is_some_and(|e| e.contains_key("sandbox")),
        "the walk found the imports: {graph:?}"
    );
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "the top-level modules of std-runtime import each other in a circle (move the shared \
         helper down into the lower module, or into a small module both can use):\n{}",
        cycles
            .iter()
            .map(|c| describe(c, &graph))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_cycle_check_names_each_cycle_once() {
    let mut graph = Graph::new();
    for (from, to) in [
        ("a", "b"),
        ("b", "a"),
        ("b", "c"),
        ("c", "d"),
        ("d", "b"),
        ("d", "e"),
    ] {
        graph
            .entry(from.into())
            .or_default()
            .insert(to.into(), format!("{from}.rs: crate::{to}"));
    }
    let found = cycles(&graph);
    assert_eq!(found, [vec!["a", "b"], vec!["b", "c", "d"]]);
    assert_eq!(
        describe(&found[0], &graph),
        "a → b → a\n    a → b: a.rs: crate::b\n    b → a: b.rs: crate::a"
    );
    graph.remove("d");
    assert_eq!(cycles(&graph), [vec!["a", "b"]]);
}

#[test]
fn the_check_resolves_paths_the_way_rustc_does() {
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    // Direct, grouped, nested and relative paths to the crate's config are caught …
    for (src, module) in [
        ("use crate::config::Settings;", "tools::script"),
        ("fn f(s: &crate::config::Settings) {}", "tools::script"),
        (
            "use crate::{bridge::AsyncBridge, config::{Settings, mask}};",
            "client",
        ),
        ("use crate::{config, spill};", "tools::fs"),
        (
            "use super::super::super::config::KNOWN_VARS;",
            "tools::sandbox::env",
        ),
        ("use super::config::Environment;", "mcp"),
        (
            "mod tests { use super::super::super::config::load; }",
            "media::vision",
        ),
        (
            "let c = '\\''; let p = crate::config::LOCAL_BASE_URL;",
            "media",
        ),
        ("use crate::{self as c, config::*};", "client"),
    ] {
        assert!(!config_paths(src, &m(module)).is_empty(), "{module}: {src}");
    }
    // … while a feature's own `config` module, docs and strings are not.
    for (src, module) in [
        ("use super::config::ServerConfig;", "mcp::manager"),
        ("pub use config::{McpConfigError, ServerConfig};", "mcp"),
        ("mod config; use self::config::Transport;", "mcp"),
        ("/// see [`crate::config::Settings`]\nfn f() {}", "client"),
        ("// crate::config::mask is gone\nfn f() {}", "client"),
        ("let s = \"crate::config::x\"; let c = '\"';", "client"),
        (
            "use ureq::config::Config; use crate::http::agent;",
            "client",
        ),
        ("mod tests { use super::config::X; }", "mcp::server"),
    ] {
        assert!(config_paths(src, &m(module)).is_empty(), "{module}: {src}");
    }
}
