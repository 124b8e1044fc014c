//! The platform layering, checked against the manifests (ARCHITECTURE.md,
//! "Invariants"):
//!
//! - No crate under `platforms/` depends on `hermes-gateway`, on
//!   `hermes-cli`, or on another platform crate: a platform is a leaf over
//!   this kit and the runtime, so it builds, tests and ships alone, and the
//!   gateway's registry is the one place that gathers them. What one
//!   platform needs from another, or from the gateway, moves into this kit.
//! - This kit depends on no platform and not on the runner, the gateway
//!   (or the CLI): everything above it plugs into it, so it cannot know
//!   any of them.
//! - The runner (`hermes-runner`) and the platforms stand side by side over
//!   this kit: the runner names no platform and not the gateway (the app
//!   that gathers both), and no platform names the runner.
//! - Every crate under `platforms/` is a member of the workspace (a crate
//!   left out would escape this check, clippy and the tests).
//!
//! Cargo alone does not enforce these: a platform may depend on the
//! gateway without a cycle, and so may one platform on another. Normal,
//! dev and build dependencies all count, target-specific ones included;
//! the source is searched as well (a `hermes_gateway::` path in a doc
//! comment or an `extern crate` would say the same thing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest(dir: &Path) -> toml::Table {
    let text = std::fs::read_to_string(dir.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("Cargo.toml").display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn package_name(manifest: &toml::Table) -> String {
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .expect("[package] name")
        .to_owned()
}

/// Every dependency a manifest declares, as `(table, package)`: the
/// package is the `package = "…"` of a renamed dependency, else its key.
fn dependencies(manifest: &toml::Table) -> Vec<(String, String)> {
    const KINDS: &[&str] = &["dependencies", "dev-dependencies", "build-dependencies"];
    let mut tables: Vec<(String, &toml::Table)> = KINDS
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), manifest.get(*k)?.as_table()?)))
        .collect();
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for (cfg, t) in targets {
            for k in KINDS {
                if let Some(deps) = t.get(*k).and_then(toml::Value::as_table) {
                    tables.push((format!("target.{cfg}.{k}"), deps));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (kind, deps) in tables {
        for (key, spec) in deps {
            let package = spec
                .get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(key);
            out.push((kind.clone(), package.to_owned()));
        }
    }
    out
}

/// The crates under `platforms/`: (directory, package name).
fn platform_crates() -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = std::fs::read_dir(root().join("platforms"))
        .expect("read platforms/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| {
            let name = package_name(&manifest(&p));
            (p, name)
        })
        .collect();
    out.sort();
    out
}

/// The `.rs` files below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `text` names the crate `name` (`hermes_gateway`) as a word.
fn names(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let before = text[..at].chars().next_back().is_none_or(|c| !word(c));
        let after = text[at + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c));
        before && after
    })
}

/// The violations of crate `dir` (package `me`) naming one of `forbidden`
/// in its manifest or sources.
fn violations(dir: &Path, me: &str, forbidden: &[String]) -> Vec<String> {
    let rel = dir
        .strip_prefix(root())
        .unwrap_or(dir)
        .display()
        .to_string();
    let mut out = Vec::new();
    for (kind, package) in dependencies(&manifest(dir)) {
        if forbidden.contains(&package) {
            out.push(format!("{rel}/Cargo.toml: [{kind}] {package}"));
        }
    }
    let mut files = Vec::new();
    for sub in ["src", "tests", "benches", "examples"] {
        rust_files(&dir.join(sub), &mut files);
    }
    files.sort();
    // This check names the crates it forbids.
    files.retain(|f| !f.ends_with("platform-kit/src/layering.rs"));
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for package in forbidden.iter().filter(|p| p.as_str() != me) {
            if names(&text, &package.replace('-', "_")) {
                let file = file
                    .strip_prefix(root())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                out.push(format!("{file}: names {}", package.replace('-', "_")));
            }
        }
    }
    out
}

const ABOVE: &[&str] = &["hermes-runner", "hermes-gateway", "hermes-cli"];

#[test]
fn no_platform_crate_depends_on_the_gateway_or_another_platform() {
    let platforms = platform_crates();
    assert!(
        platforms.len() >= 3,
        "the walk found the platform crates: {platforms:?}"
    );
    let mut found = Vec::new();
    for (dir, me) in &platforms {
        let forbidden: Vec<String> = ABOVE
            .iter()
            .map(|s| (*s).to_owned())
            .chain(platforms.iter().map(|(_, n)| n.clone()).filter(|n| n != me))
            .collect();
        found.extend(violations(dir, me, &forbidden));
    }
    assert!(
        found.is_empty(),
        "a platform crate depends on the gateway or on another platform (move what it \
         needs into hermes-platform-kit, or have the gateway pass it in):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_kit_depends_on_no_platform_and_not_on_the_gateway() {
    let forbidden: Vec<String> = ABOVE
        .iter()
        .map(|s| (*s).to_owned())
        .chain(platform_crates().into_iter().map(|(_, n)| n))
        .collect();
    let found = violations(Path::new(env!("CARGO_MANIFEST_DIR")), "", &forbidden);
    assert!(
        found.is_empty(),
        "hermes-platform-kit names a crate above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_runner_names_no_platform_and_not_the_gateway() {
    let forbidden: Vec<String> = ["hermes-gateway", "hermes-cli"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(platform_crates().into_iter().map(|(_, n)| n))
        .collect();
    let found = violations(&root().join("runner"), "hermes-runner", &forbidden);
    assert!(
        found.is_empty(),
        "hermes-runner names a platform or the gateway (have the gateway pass \
         what it needs in, as it passes the registry to `GatewayConfig`):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_platform_crate_is_a_workspace_member() {
    let workspace = manifest(&root());
    let members: Vec<&str> = workspace
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(toml::Value::as_array)
        .expect("[workspace] members")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    for (dir, name) in platform_crates() {
        let rel = dir
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        assert!(
            members.contains(&rel.as_str()),
            "{name} ({rel}) is not in the workspace's members"
        );
    }
}

#[test]
fn the_check_sees_a_forbidden_dependency() {
    // The checks above pass on an empty finding; show they would find one.
    let bad: toml::Table = toml::from_str(
        "[dependencies]\nhermes-gateway = { path = \"../../gateway\" }\n\
         [target.'cfg(unix)'.dev-dependencies]\nchat = { package = \"hermes-slack\", path = \"../slack\" }\n",
    )
    .unwrap();
    let deps = dependencies(&bad);
    assert!(deps.contains(&("dependencies".to_owned(), "hermes-gateway".to_owned())));
    assert!(deps.contains(&(
        "target.cfg(unix).dev-dependencies".to_owned(),
        "hermes-slack".to_owned()
    )));
    assert!(names("use hermes_gateway::platform;", "hermes_gateway"));
    assert!(!names("use hermes_gateway_extra::x;", "hermes_gateway"));
}
