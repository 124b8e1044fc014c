//! What a Rust source file imports, read from its text — for the tidy-style
//! tests that keep the crates' layering (`std-runtime/src/layering.rs`,
//! `tests/tests/circles.rs`). Comments and string literals are dropped, and
//! each `crate::…`, `super::…` and `self::…` path (use trees included,
//! inline `mod` blocks tracked) is resolved to the module it names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of `file` (relative to `src/`): `mcp/manager.rs` is
/// `mcp::manager`, `tools/sandbox/mod.rs` is `tools::sandbox`.
pub fn module_of(file: &Path) -> Vec<String> {
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
pub fn code_only(src: &str) -> String {
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
pub fn tokens(code: &str) -> Vec<String> {
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
pub fn imported_paths(src: &str, module: &[String]) -> Vec<Vec<String>> {
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

/// The workspace's root (this crate's parent folder).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Each product member's `src/`, from the `members = [...]` line of the
/// workspace's manifest.
pub fn product_sources() -> Vec<PathBuf> {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the manifest");
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        // Test support is no product: this crate, the gateway's test
        // doubles, the benches.
        .filter(|member| !["tests", "gateway/testing", "benches"].contains(member))
        .map(|member| root.join(member).join("src"))
        .filter(|src| src.is_dir())
        .collect()
}

/// Every `.rs` file of the product ([`product_sources`]) with its code:
/// comments and literals dropped ([`code_only`]), inline test modules left
/// out ([`without_test_modules`]). What the tidy tests that read the
/// product's sources for a construct scan.
pub fn product_code() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for src in product_sources() {
        rust_files(&src, &mut files);
    }
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let code = without_test_modules(&code_only(&text));
            (file, code)
        })
        .collect()
}

/// Every `.rs` file under `dir`, depth first.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file of each module of the crate whose sources are in `src`, and
/// for each file the files it imports: `a.rs → b.rs` when `a.rs` names
/// `b`'s module (or something in it) by a `crate::`, `super::` or `self::`
/// path. What a module takes from its own descendants is not an import (a
/// parent that declares its children, hands their items on or uses them is
/// their face, not a knot with them); what they take from it is. Inline
/// `#[cfg(test)] mod … { … }` blocks are left out: a test may reach
/// anywhere.
#[derive(Debug, Default)]
pub struct FileGraph {
    /// The files, relative to `src`, each with the files it imports and,
    /// for each, the first path that makes the edge.
    pub edges: BTreeMap<PathBuf, BTreeMap<PathBuf, String>>,
}

impl FileGraph {
    /// Reads every `.rs` file under `src`.
    pub fn of(src: &Path) -> FileGraph {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let mut modules: BTreeMap<Vec<String>, PathBuf> = BTreeMap::new();
        for file in &files {
            let rel = file.strip_prefix(src).expect("under src").to_path_buf();
            modules.insert(module_of(&rel), rel);
        }
        let mut graph = FileGraph::default();
        for (module, rel) in &modules {
            let text = std::fs::read_to_string(src.join(rel)).expect("read a source file");
            let paths = imported_paths(&without_test_modules(&code_only(&text)), module);
            let edges = graph.edges.entry(rel.clone()).or_default();
            for path in paths {
                // A module is the face of its children: it declares them,
                // hands their items on and may use them; that is no knot.
                if path.len() > module.len() && path[..module.len()] == module[..] {
                    continue;
                }
                // The longest prefix of the path that is a module with a file.
                let Some(to) = (1..=path.len())
                    .rev()
                    .find_map(|n| modules.get(&path[..n]))
                    .or_else(|| modules.get(&Vec::new()))
                else {
                    continue;
                };
                if to != rel {
                    edges
                        .entry(to.clone())
                        .or_insert_with(|| format!("crate::{}", path.join("::")));
                }
            }
        }
        graph
    }

    /// The strongly connected groups of more than `most` files (Tarjan's
    /// algorithm), each sorted, the groups in order.
    pub fn circles_over(&self, most: usize) -> Vec<Vec<PathBuf>> {
        let nodes: Vec<&PathBuf> = self.edges.keys().collect();
        let index_of: BTreeMap<&PathBuf, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let succ: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                self.edges[*n]
                    .keys()
                    .filter_map(|to| index_of.get(to).copied())
                    .collect()
            })
            .collect();
        let mut tarjan = Tarjan::new(nodes.len());
        for v in 0..nodes.len() {
            if tarjan.index[v].is_none() {
                tarjan.visit(v, &succ);
            }
        }
        let mut groups: Vec<Vec<PathBuf>> = tarjan
            .groups
            .into_iter()
            .filter(|g| g.len() > most)
            .map(|g| {
                let mut files: Vec<PathBuf> = g.into_iter().map(|i| nodes[i].clone()).collect();
                files.sort();
                files
            })
            .collect();
        groups.sort();
        groups
    }

    /// `a.rs → b.rs: crate::b::Item` for each edge inside `group`.
    pub fn describe(&self, group: &[PathBuf]) -> String {
        let inside: BTreeSet<&PathBuf> = group.iter().collect();
        let mut out = String::new();
        for from in group {
            for (to, path) in &self.edges[from] {
                if inside.contains(to) {
                    out.push_str(&format!(
                        "\n    {} → {}: {path}",
                        from.display(),
                        to.display()
                    ));
                }
            }
        }
        out
    }
}

/// `code` (comments and literals already dropped) without its inline
/// `#[cfg(test)] mod name { … }` blocks.
pub fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_inline_mod = trimmed.starts_with("mod ")
            && trimmed
                .find(['{', ';'])
                .is_some_and(|i| trimmed.as_bytes()[i] == b'{');
        if !is_inline_mod {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap_or(after.len());
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Tarjan's strongly connected components, iteration by recursion (the
/// graphs are a crate's files: a few hundred).
struct Tarjan {
    next: usize,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    groups: Vec<Vec<usize>>,
}

impl Tarjan {
    fn new(n: usize) -> Tarjan {
        Tarjan {
            next: 0,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            groups: Vec::new(),
        }
    }

    fn visit(&mut self, v: usize, succ: &[Vec<usize>]) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &succ[v] {
            match self.index[w] {
                None => {
                    self.visit(w, succ);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut group = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            self.groups.push(group);
        }
    }
}
