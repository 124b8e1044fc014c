//! Confinement of the file tools: `..`, absolute paths and symlinks that
//! leave the working directory are refused (unless allowed), and the
//! secrets of a `$HERMES_HOME` inside or around the working directory stay
//! out of reach.

use std::path::Path;

use hermes_core::{InterruptFlag, IterationBudget, ToolContext};
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::json;
use tempfile::TempDir;

use super::support::Fx;

#[test]
fn confinement_refuses_dotdot_absolute_and_symlink_escapes() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    let fx = Fx::new();
    let rel_escape = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );

    let m = fx.err("read_file", json!({"path": rel_escape}));
    assert!(m.contains("outside the working directory"), "{m}");
    assert!(m.contains("allow_outside_workdir"), "{m}");

    let abs = outside.path().join("secret.txt");
    let m = fx.err("read_file", json!({"path": abs}));
    assert!(m.contains("outside the working directory"), "{m}");

    std::os::unix::fs::symlink(outside.path(), fx.path("link")).unwrap();
    let m = fx.err("read_file", json!({"path": "link/secret.txt"}));
    assert!(m.contains("outside the working directory"), "{m}");

    // Writing a new file through the symlinked directory is refused and
    // creates nothing.
    let m = fx.err(
        "write_file",
        json!({"path": "link/new/evil.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    assert!(!outside.path().join("new").exists());

    // A new path whose `..` climbs out before existing is refused too.
    let m = fx.err(
        "write_file",
        json!({"path": "fresh/../../evil.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");

    let m = fx.err(
        "patch",
        json!({"path": abs, "old_string": "top", "new_string": "x"}),
    );
    assert!(m.contains("outside"), "{m}");
    let m = fx.err("search_files", json!({"pattern": "secret", "path": "link"}));
    assert!(m.contains("outside"), "{m}");
    let m = fx.err("terminal", json!({"command": "ls", "workdir": ".."}));
    assert!(m.contains("outside"), "{m}");
    assert_eq!(std::fs::read_to_string(&abs).unwrap(), "top secret\n");
}

#[test]
fn confinement_refuses_a_dangling_symlink() {
    let outside = TempDir::new().unwrap();
    let fx = Fx::new();
    let target = outside.path().join("not-yet.txt");
    std::os::unix::fs::symlink(&target, fx.path("dangling")).unwrap();
    let m = fx.err("write_file", json!({"path": "dangling", "content": "x"}));
    assert!(m.contains("symbolic link") || m.contains("outside"), "{m}");
    assert!(!target.exists());
}

#[test]
fn paths_inside_the_workdir_are_fine() {
    let fx = Fx::new();
    fx.write("sub/a.txt", "inside\n");
    let out = fx.ok("read_file", json!({"path": "sub/../sub/a.txt"}));
    assert!(out.contains("|inside"), "{out}");
    let abs = fx.path("sub/a.txt");
    let out = fx.ok("read_file", json!({"path": abs}));
    assert!(out.contains("|inside"), "{out}");
    fx.ok(
        "write_file",
        json!({"path": "new/../b.txt", "content": "b"}),
    );
    assert_eq!(std::fs::read_to_string(fx.path("b.txt")).unwrap(), "b");
    std::os::unix::fs::symlink(fx.path("sub"), fx.path("inner-link")).unwrap();
    let out = fx.ok("read_file", json!({"path": "inner-link/a.txt"}));
    assert!(out.contains("|inside"), "{out}");
}

#[test]
fn allow_outside_workdir_permits_escapes() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("f.txt"), "out there\n").unwrap();
    let fx = Fx::with(|e| e.allow_outside_workdir = true, None);
    let out = fx.ok("read_file", json!({"path": outside.path().join("f.txt")}));
    assert!(out.contains("|out there"), "{out}");
}

#[test]
fn confinement_applies_to_relative_paths_given_as_absolute_workdir() {
    // The workdir itself may be given through a symlink; paths are checked
    // against its canonical form.
    let real = TempDir::new().unwrap();
    let links = TempDir::new().unwrap();
    let link = links.path().join("wd");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    std::fs::write(real.path().join("f.txt"), "via link\n").unwrap();
    let home = TempDir::new().unwrap();
    let env = ToolEnv::new(&link, home.path());
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let budget = IterationBudget::new(1);
    let flag = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "x",
    };
    let out = reg
        .dispatch("read_file", r#"{"path":"f.txt"}"#, &ctx)
        .unwrap();
    assert!(out.contains("|via link"), "{out}");
    let abs = Path::new(&link).join("f.txt");
    let out = reg
        .dispatch("read_file", &json!({"path": abs}).to_string(), &ctx)
        .unwrap();
    assert!(out.contains("|via link"), "{out}");
}

#[test]
fn confinement_refuses_a_file_symlink_out() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("passwd"), "root:x:0:0\n").unwrap();
    let fx = Fx::new();
    std::os::unix::fs::symlink(outside.path().join("passwd"), fx.path("innocent.txt")).unwrap();
    let m = fx.err("read_file", json!({"path": "innocent.txt"}));
    assert!(m.contains("outside the working directory"), "{m}");
    let m = fx.err(
        "patch",
        json!({"path": "innocent.txt", "old_string": "root", "new_string": "toor"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    let m = fx.err(
        "write_file",
        json!({"path": "innocent.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("passwd")).unwrap(),
        "root:x:0:0\n"
    );
}

/// A fixture whose `$HERMES_HOME` is `work/<home_rel>` (a CLI started from
/// `~` with the default `~/.hermes`), populated like a real home.
fn fx_home_inside_work(home_rel: &str, configure: impl FnOnce(&mut ToolEnv)) -> Fx {
    let work = TempDir::new().unwrap();
    let home = work.path().join(home_rel);
    for (rel, body) in [
        (".env", "OPENAI_API_KEY=sk-SECRET-dotenv\n"),
        ("config.toml", "[provider]\napi_key = \"sk-SECRET-toml\"\n"),
        ("state.db", "SQLite format 3 sk-SECRET-db\n"),
        ("state.db-wal", "sk-SECRET-wal\n"),
        ("gateway.lock", "pid sk-SECRET-lock\n"),
        ("sessions/old.txt", "sk-SECRET-elsewhere\n"),
        ("MEMORY.md", "memory: the user likes tabs\n"),
        ("USER.md", "user: Ana\n"),
        ("SOUL.md", "soul: be kind\n"),
        ("skills/git/SKILL.md", "skill: rebase carefully\n"),
    ] {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    std::fs::write(work.path().join("project.txt"), "ordinary file\n").unwrap();
    let mut env = ToolEnv::new(work.path(), &home);
    configure(&mut env);
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    Fx {
        work,
        home: TempDir::new().unwrap(),
        reg,
        budget: IterationBudget::new(90),
        interrupt: InterruptFlag::new(),
    }
}

#[test]
fn file_tools_cannot_read_or_overwrite_hermes_home_secrets_when_workdir_contains_it() {
    for allow_outside in [false, true] {
        let fx = fx_home_inside_work(".hermes", |e| e.allow_outside_workdir = allow_outside);
        let home = fx.path(".hermes");

        for rel in [
            ".env",
            "config.toml",
            "state.db",
            "state.db-wal",
            "gateway.lock",
            "sessions/old.txt",
            "skills/../.env",
        ] {
            let m = fx.err("read_file", json!({"path": format!(".hermes/{rel}")}));
            assert!(m.contains("inside the Hermes home directory"), "{rel}: {m}");
            assert!(m.contains("MEMORY.md, USER.md, SOUL.md and skills/"), "{m}");
            assert!(!m.contains("sk-SECRET"), "{m}");
            // Absolute paths too.
            let m = fx.err("read_file", json!({"path": home.join(rel)}));
            assert!(m.contains("inside the Hermes home directory"), "{rel}: {m}");
        }
        // Through a symlink inside the working directory.
        std::os::unix::fs::symlink(home.join(".env"), fx.path("innocent.txt")).unwrap();
        let m = fx.err("read_file", json!({"path": "innocent.txt"}));
        assert!(m.contains("inside the Hermes home directory"), "{m}");

        // The prompt sources and skills may be read.
        for (rel, want) in [
            ("MEMORY.md", "likes tabs"),
            ("USER.md", "Ana"),
            ("SOUL.md", "be kind"),
            ("skills/git/SKILL.md", "rebase"),
        ] {
            let out = fx.ok("read_file", json!({"path": format!(".hermes/{rel}")}));
            assert!(out.contains(want), "{rel}: {out}");
        }

        // Nothing there may be written, secret or not, existing or new.
        for rel in [
            ".env",
            "config.toml",
            "state.db",
            "MEMORY.md",
            "SOUL.md",
            "skills/git/SKILL.md",
            "new.txt",
        ] {
            let m = fx.err(
                "write_file",
                json!({"path": format!(".hermes/{rel}"), "content": "pwned"}),
            );
            assert!(m.contains("cannot write there"), "{rel}: {m}");
            assert!(m.contains("memory tool"), "{m}");
        }
        let m = fx.err(
            "patch",
            json!({"path": ".hermes/config.toml", "old_string": "sk-SECRET-toml", "new_string": "x"}),
        );
        assert!(m.contains("cannot write there"), "{m}");
        let m = fx.err(
            "patch",
            json!({"path": ".hermes/MEMORY.md", "old_string": "tabs", "new_string": "spaces"}),
        );
        assert!(m.contains("cannot write there"), "{m}");
        assert_eq!(
            std::fs::read_to_string(home.join(".env")).unwrap(),
            "OPENAI_API_KEY=sk-SECRET-dotenv\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join("MEMORY.md")).unwrap(),
            "memory: the user likes tabs\n"
        );
        assert!(!home.join("new.txt").exists());

        // Ordinary files in the working directory are unaffected.
        let out = fx.ok("read_file", json!({"path": "project.txt"}));
        assert!(out.contains("ordinary file"), "{out}");
        fx.ok("write_file", json!({"path": "out.txt", "content": "fine"}));

        // search_files skips the refused files wherever the walk starts.
        for base in [".", ".hermes", ".hermes/sessions"] {
            let out = fx.ok(
                "search_files",
                json!({"pattern": "sk-SECRET", "path": base}),
            );
            assert!(out.starts_with("No matches"), "{base}: {out}");
            let out = fx.ok(
                "search_files",
                json!({"pattern": "*", "path": base, "target": "files"}),
            );
            assert!(!out.contains(".env") && !out.contains("state.db"), "{out}");
            assert!(
                !out.contains("config.toml") && !out.contains("old.txt"),
                "{out}"
            );
        }
        let out = fx.ok(
            "search_files",
            json!({"pattern": "tabs|rebase", "path": ".hermes"}),
        );
        assert!(out.contains(".hermes/MEMORY.md:1:"), "{out}");
        assert!(out.contains(".hermes/skills/git/SKILL.md:1:"), "{out}");
        let m = fx.err(
            "search_files",
            json!({"pattern": "sk", "path": ".hermes/.env"}),
        );
        assert!(m.contains("inside the Hermes home directory"), "{m}");
    }
}

#[test]
fn search_files_skips_a_visible_hermes_home_inside_the_workdir() {
    // A home that is not a hidden directory is walked by default.
    let fx = fx_home_inside_work("hermes-home", |_| {});
    let out = fx.ok("search_files", json!({"pattern": "sk-SECRET"}));
    assert!(out.starts_with("No matches"), "{out}");
    let out = fx.ok("search_files", json!({"pattern": "*", "target": "files"}));
    assert_eq!(
        out,
        "hermes-home/MEMORY.md\nhermes-home/SOUL.md\nhermes-home/USER.md\n\
         hermes-home/skills/git/SKILL.md\nproject.txt\n"
    );
}

#[test]
fn a_workdir_inside_the_hermes_home_owns_its_files_but_not_the_secrets() {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join(".env"), "KEY=sk-SECRET\n").unwrap();
    let work = home.path().join("workspace");
    std::fs::create_dir(&work).unwrap();
    let mut env = ToolEnv::new(&work, home.path());
    env.allow_outside_workdir = true;
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let budget = IterationBudget::new(5);
    let flag = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "x",
    };
    reg.dispatch("write_file", r#"{"path":"a.txt","content":"mine"}"#, &ctx)
        .unwrap();
    let out = reg
        .dispatch("read_file", r#"{"path":"a.txt"}"#, &ctx)
        .unwrap();
    assert!(out.contains("|mine"), "{out}");
    let err = reg
        .dispatch("read_file", r#"{"path":"../.env"}"#, &ctx)
        .unwrap_err();
    assert!(
        err.to_string().contains("inside the Hermes home directory"),
        "{err}"
    );

    // A working directory equal to the home gets no exception.
    let env = ToolEnv::new(home.path(), home.path());
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let err = reg
        .dispatch("read_file", r#"{"path":".env"}"#, &ctx)
        .unwrap_err();
    assert!(
        err.to_string().contains("inside the Hermes home directory"),
        "{err}"
    );
}
