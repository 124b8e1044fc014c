//! Attacks on the file tools' confinement (issue 10, item 1): every path is
//! resolved beneath the working directory by the kernel, so no spelling of a
//! path, no symlink and no race leads a file tool outside it or into the
//! secrets of `$HERMES_HOME`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hermes_core::{InterruptFlag, IterationBudget, ToolContext, ToolError, ToolRegistry};
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::{Value, json};
use tempfile::TempDir;

const SECRET: &str = "sk-SECRET-7f3a";

/// A working directory, a `$HERMES_HOME` beside it (holding a `.env` with a
/// key and a persona) and a directory outside both.
struct Box3 {
    work: TempDir,
    home: TempDir,
    outside: TempDir,
    reg: ToolRegistry,
}

impl Box3 {
    fn new() -> Box3 {
        let work = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(
            home.path().join(".env"),
            format!("OPENAI_API_KEY={SECRET}\n"),
        )
        .unwrap();
        std::fs::write(home.path().join("SOUL.md"), "be kind\n").unwrap();
        std::fs::write(outside.path().join("secret.txt"), format!("{SECRET}\n")).unwrap();
        let env = ToolEnv::new(work.path(), home.path());
        let reg = build_registry(&env, Some(&["file".into()])).unwrap();
        Box3 {
            work,
            home,
            outside,
            reg,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.work.path().join(rel)
    }

    fn call(&self, name: &str, args: Value) -> Result<String, ToolError> {
        let budget = IterationBudget::new(1);
        let interrupt = InterruptFlag::new();
        let ctx = ToolContext {
            budget: &budget,
            interrupt: &interrupt,
            tool_call_id: "t",
        };
        self.reg.dispatch(name, &args.to_string(), &ctx)
    }

    /// The call must fail, and its message must not carry the secret.
    fn refused(&self, name: &str, args: Value) -> String {
        match self.call(name, args.clone()) {
            Ok(out) => panic!("{name} {args} succeeded: {out}"),
            Err(ToolError::Failed(m)) => {
                assert!(!m.contains(SECRET), "{name} {args} leaked: {m}");
                m
            }
            Err(ToolError::Abort(m)) => panic!("{name} aborted: {m}"),
        }
    }

    fn link_home(&self) {
        std::os::unix::fs::symlink(self.home.path(), self.path("link_home")).unwrap();
    }

    fn link_out(&self) {
        std::os::unix::fs::symlink(self.outside.path(), self.path("link_out")).unwrap();
    }

    fn soul(&self) -> String {
        std::fs::read_to_string(self.home.path().join("SOUL.md")).unwrap()
    }
}

fn outside(m: &str) -> bool {
    m.contains("outside the working directory")
}

#[test]
fn dotdot_after_a_missing_component_does_not_cancel_a_symlink() {
    // The bug of issue 10: `nonexist/..` was resolved as text, so the
    // symlink after it was checked as if it were a plain directory.
    let b = Box3::new();
    b.link_home();
    b.link_out();
    let m = b.refused("read_file", json!({"path": "nonexist/../link_home/.env"}));
    assert!(!m.is_empty());
    b.refused(
        "write_file",
        json!({"path": "nonexist/../link_home/SOUL.md", "content": "obey the attacker"}),
    );
    assert_eq!(b.soul(), "be kind\n", "the persona was replaced");
    b.refused(
        "write_file",
        json!({"path": "nonexist/../link_out/planted.txt", "content": "x"}),
    );
    assert!(!b.outside.path().join("planted.txt").exists());
    b.refused(
        "patch",
        json!({"path": "nonexist/../link_home/SOUL.md", "old_string": "kind", "new_string": "evil"}),
    );
    assert_eq!(b.soul(), "be kind\n");
    b.refused(
        "search_files",
        json!({"pattern": "sk-", "path": "nonexist/../link_out"}),
    );
    // The symlinks themselves lead out, and say so.
    let m = b.refused("read_file", json!({"path": "link_home/.env"}));
    assert!(outside(&m), "{m}");
    let m = b.refused(
        "write_file",
        json!({"path": "link_out/x.txt", "content": "x"}),
    );
    assert!(outside(&m), "{m}");
    assert!(!b.outside.path().join("x.txt").exists());
}

#[test]
fn dotdot_after_a_file_is_not_a_way_out() {
    let b = Box3::new();
    b.link_out();
    std::fs::write(b.path("f.txt"), "plain\n").unwrap();
    b.refused("read_file", json!({"path": "f.txt/../link_out/secret.txt"}));
    b.refused(
        "write_file",
        json!({"path": "f.txt/../link_out/planted.txt", "content": "x"}),
    );
    assert!(!b.outside.path().join("planted.txt").exists());
    // `..` that climbs above the working directory after new directories.
    let m = b.refused(
        "write_file",
        json!({"path": "fresh/../../planted.txt", "content": "x"}),
    );
    assert!(outside(&m), "{m}");
    assert!(
        !b.path("fresh").exists(),
        "a refused write created a directory"
    );
}

#[test]
fn proc_self_root_and_other_magic_links_lead_nowhere() {
    let b = Box3::new();
    let target = b.outside.path().join("secret.txt");
    let m = b.refused(
        "read_file",
        json!({"path": format!("/proc/self/root{}", target.display())}),
    );
    assert!(outside(&m), "{m}");
    std::os::unix::fs::symlink("/proc/self/root", b.path("root")).unwrap();
    let via = format!("root{}", target.display());
    let m = b.refused("read_file", json!({"path": via}));
    assert!(outside(&m), "{m}");
    b.refused(
        "write_file",
        json!({"path": format!("root{}/../planted", target.display()), "content": "x"}),
    );
    assert!(!b.outside.path().join("planted").exists());
    // A relative symlink climbing out of the tree, to the magic link.
    let depth = b.work.path().components().count();
    let up = "../".repeat(depth);
    std::os::unix::fs::symlink(format!("{up}proc/self/root"), b.path("root2")).unwrap();
    let m = b.refused(
        "read_file",
        json!({"path": format!("root2{}", target.display())}),
    );
    assert!(outside(&m), "{m}");
    // /proc/self/fd of the tool's own process.
    b.refused("read_file", json!({"path": "/proc/self/environ"}));
}

#[test]
fn a_hard_link_to_a_home_secret_is_refused() {
    let b = Box3::new();
    // Same file system (both are temp dirs), so the link can be made.
    std::fs::hard_link(b.home.path().join(".env"), b.path("notes.txt")).unwrap();
    let m = b.refused("read_file", json!({"path": "notes.txt"}));
    assert!(m.contains("Hermes home"), "{m}");
    b.refused(
        "patch",
        json!({"path": "notes.txt", "old_string": "OPENAI", "new_string": "x"}),
    );
    let out = b
        .call("search_files", json!({"pattern": "sk-SECRET"}))
        .unwrap();
    assert!(out.starts_with("No matches"), "{out}");
    // Writing replaces the link, never the secret behind it.
    b.call(
        "write_file",
        json!({"path": "notes.txt", "content": "mine\n"}),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(b.home.path().join(".env")).unwrap(),
        format!("OPENAI_API_KEY={SECRET}\n")
    );
    assert_eq!(
        std::fs::read_to_string(b.path("notes.txt")).unwrap(),
        "mine\n"
    );
}

#[test]
fn search_files_walk_does_not_follow_links_out() {
    let b = Box3::new();
    b.link_out();
    b.link_home();
    std::os::unix::fs::symlink(b.outside.path().join("secret.txt"), b.path("s.txt")).unwrap();
    std::fs::write(b.path("own.txt"), "nothing here\n").unwrap();
    let out = b.call("search_files", json!({"pattern": "sk-"})).unwrap();
    assert!(out.starts_with("No matches"), "{out}");
    let out = b
        .call("search_files", json!({"pattern": "*", "target": "files"}))
        .unwrap();
    assert_eq!(out, "own.txt\n");
}

#[test]
fn symlinks_that_stay_inside_keep_working() {
    let b = Box3::new();
    std::fs::create_dir_all(b.path("real/deep")).unwrap();
    std::fs::write(b.path("real/deep/a.txt"), "alpha\n").unwrap();
    std::os::unix::fs::symlink("real/deep", b.path("short")).unwrap();
    std::os::unix::fs::symlink("../real/deep/a.txt", b.path("real/a-link.txt")).unwrap();
    let out = b.call("read_file", json!({"path": "short/a.txt"})).unwrap();
    assert!(out.contains("|alpha"), "{out}");
    let out = b
        .call("read_file", json!({"path": "real/a-link.txt"}))
        .unwrap();
    assert!(out.contains("|alpha"), "{out}");
    // Writing through a symlinked file updates its target and keeps the link.
    b.call(
        "write_file",
        json!({"path": "real/a-link.txt", "content": "beta\n"}),
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(b.path("real/a-link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(b.path("real/deep/a.txt")).unwrap(),
        "beta\n"
    );
    b.call(
        "patch",
        json!({"path": "short/a.txt", "old_string": "beta", "new_string": "gamma"}),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(b.path("real/deep/a.txt")).unwrap(),
        "gamma\n"
    );
    // New files and directories through a symlinked directory.
    b.call(
        "write_file",
        json!({"path": "short/new/n.txt", "content": "n"}),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(b.path("real/deep/new/n.txt")).unwrap(),
        "n"
    );
    let out = b.call("search_files", json!({"pattern": "gamma"})).unwrap();
    assert_eq!(out, "real/deep/a.txt:1: gamma\n");
}

/// Swaps `work/d` between a real directory and a symlink to `outside` as
/// fast as it can until told to stop.
fn swapper(work: &Path, outside: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let d = work.join("d");
    let real = work.join("d.real");
    let link = work.join("d.link");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("secret.txt"), "decoy\n").unwrap();
    std::os::unix::fs::symlink(outside, &link).unwrap();
    std::thread::spawn(move || {
        let mut swaps = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // Rename is atomic: `d` is always one or the other.
            let _ = std::fs::rename(&link, &d);
            let _ = std::fs::rename(&d, &link);
            let _ = std::fs::rename(&real, &d);
            let _ = std::fs::rename(&d, &real);
            swaps += 1;
        }
        swaps
    })
}

#[test]
fn a_thread_swapping_a_directory_for_a_symlink_never_gets_a_tool_out() {
    let b = Box3::new();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = swapper(b.work.path(), b.outside.path(), stop.clone());
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tries = 0u32;
    while Instant::now() < deadline {
        tries += 1;
        if let Ok(out) = b.call("read_file", json!({"path": "d/secret.txt"})) {
            assert!(
                !out.contains(SECRET),
                "read_file escaped on try {tries}: {out}"
            );
        }
        let _ = b.call(
            "write_file",
            json!({"path": "d/planted.txt", "content": "x"}),
        );
        assert!(
            !b.outside.path().join("planted.txt").exists(),
            "write_file escaped on try {tries}"
        );
        if let Ok(out) = b.call("search_files", json!({"pattern": "sk-SECRET"})) {
            assert!(
                !out.contains(SECRET),
                "search_files escaped on try {tries}: {out}"
            );
        }
        if let Ok(out) = b.call(
            "search_files",
            json!({"pattern": "secret*", "target": "files", "path": "d"}),
        ) {
            assert!(!out.contains(".."), "{out}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = handle.join().unwrap();
    assert!(
        swaps > 0 && tries > 10,
        "the race did not run ({swaps} swaps, {tries} tries)"
    );
}

#[test]
fn the_escape_hatch_named_in_errors_exists() {
    let b = Box3::new();
    b.link_out();
    let m = b.refused("read_file", json!({"path": "link_out/secret.txt"}));
    // The message names a setting that exists (`[agent] allow_outside_workdir`
    // / `--allow-outside-workdir`), so the user can act on it.
    assert!(m.contains("allow_outside_workdir"), "{m}");
    let mut env = ToolEnv::new(b.work.path(), b.home.path());
    env.allow_outside_workdir = true;
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let budget = IterationBudget::new(1);
    let interrupt = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "t",
    };
    let out = reg
        .dispatch("read_file", r#"{"path":"link_out/secret.txt"}"#, &ctx)
        .unwrap();
    assert!(out.contains(SECRET), "{out}");
    // Even then the home's secrets stay refused.
    let err = reg
        .dispatch(
            "read_file",
            r#"{"path":"nonexist/../link_home/.env"}"#,
            &ctx,
        )
        .map(|_| ())
        .unwrap_err();
    let _ = err;
    std::os::unix::fs::symlink(b.home.path(), b.path("link_home")).unwrap();
    let err = reg
        .dispatch("read_file", r#"{"path":"link_home/.env"}"#, &ctx)
        .unwrap_err();
    assert!(err.to_string().contains("Hermes home"), "{err}");
}
