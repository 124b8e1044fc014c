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
use std::path::{Path, PathBuf};

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

/// The module path of `file` (relative to `src/`): `mcp/manager.rs` is
/// `mcp::manager`, `tools/sandbox/mod.rs` is `tools::sandbox`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// `src` without comments and with string and char literals emptied, so
/// a path in a doc or a message is not taken for an import.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            i += end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = (j + 1).min(b.len());
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            out.push_str("' '");
            i += char_literal_len(rest).unwrap_or(1);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a char literal at the start of `s` (`'a'`, `'\n'`,
/// `'\''`, `'\u{1F600}'`), or `None` for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        let close = s.get(3..)?.find('\'')?;
        return Some(close + 4);
    }
    let (at, next) = chars.next()?;
    (next == '\'').then_some(at + 1)
}

/// The words and punctuation of `code`: identifiers, `::` and single
/// characters.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut word = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_alphanumeric() || n == '_' {
                    word.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(word);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push("::".into());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// Resolves the path starting at `toks[at]` (`crate`, `super` or `self`)
/// from module `here`, following use trees; pushes every full path it
/// names (from the crate root) to `found`.
fn resolve(toks: &[String], at: usize, here: &[String], found: &mut Vec<Vec<String>>) {
    let mut base: Vec<String> = match toks[at].as_str() {
        "crate" => Vec::new(),
        "super" => here[..here.len().saturating_sub(1)].to_vec(),
        _ => here.to_vec(),
    };
    let mut i = at + 1;
    while i + 1 < toks.len() && toks[i] == "::" {
        match toks[i + 1].as_str() {
            "super" => {
                base.pop();
                i += 2;
            }
            "self" => i += 2,
            _ => break,
        }
    }
    walk_tree(toks, i, base, found);
}

/// Follows `::segment…` or `::{tree, …}` from `toks[i]` with `prefix`.
/// Returns the index after what it read.
fn walk_tree(
    toks: &[String],
    mut i: usize,
    mut prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) -> usize {
    while i + 1 < toks.len() && toks[i] == "::" {
        let next = &toks[i + 1];
        if next == "{" {
            i += 2;
            loop {
                // Each item of the group is itself a path relative to `prefix`.
                if i >= toks.len() || toks[i] == "}" {
                    return i + 1;
                }
                if toks[i] == "," {
                    i += 1;
                    continue;
                }
                let mut item = prefix.clone();
                if toks[i] != "self" && toks[i] != "*" {
                    item.push(toks[i].clone());
                }
                i = walk_tree(toks, i + 1, item, found);
                // Skip an `as name` or anything else up to the item's end.
                while i < toks.len() && toks[i] != "," && toks[i] != "}" {
                    i += 1;
                }
            }
        }
        prefix.push(next.clone());
        i += 2;
    }
    found.push(prefix);
    i
}

/// Every path in `src` (the file of module `module`) that starts with
/// `crate`, `super` or `self`, resolved to a full path from the crate root.
fn imported_paths(src: &str, module: &[String]) -> Vec<Vec<String>> {
    let toks = tokens(&code_only(src));
    // Inline `mod name { … }` blocks: (name, depth of its brace).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut found = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match toks[i].as_str() {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((toks[i + 1].clone(), depth + 1));
            }
            "crate" | "super" | "self" if toks.get(i + 1).is_some_and(|t| t == "::") => {
                // `a::super` cannot occur; only a path's first segment starts one.
                let starts = i == 0 || toks[i - 1] != "::";
                if starts {
                    let mut here = module.to_vec();
                    here.extend(inline.iter().map(|(name, _)| name.clone()));
                    resolve(&toks, i, &here, &mut found);
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Every path in `src` (the file of module `module`) that names
/// `crate::config` or something in it.
fn config_paths(src: &str, module: &[String]) -> Vec<String> {
    imported_paths(src, module)
        .into_iter()
        .filter(|path| path.first().is_some_and(|s| s == "config"))
        .map(|path| format!("crate::{}", path.join("::")))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
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
