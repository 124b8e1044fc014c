//! `skills_list`, `skill_view`, `skill_manage` (SPEC Y8) through the
//! registry: the one write path into `$HERMES_HOME`, its confinement, its
//! limits and its history.

use std::collections::BTreeMap;
use std::path::Path;

use hermes_runtime::skills::{HISTORY_KEPT, SkillsHome, parse_skill_md};
use serde_json::json;

use super::support::Fx;

const DEPLOY: &str = "---\nname: deploy-notes\ndescription: Deploys the site with the blue-green script.\n---\n# Deploy\n\n1. Run `make deploy`.\n2. Check /health.\n";

/// Every file below `dir` (links read as their target's name), so a test
/// can say "nothing changed" about the whole tree.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else if meta.is_dir() {
                out.insert(rel.clone(), "<dir>".into());
                walk(base, &p, out);
            } else {
                out.insert(
                    rel,
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into(),
                );
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

fn skill_md(fx: &Fx, name: &str) -> String {
    std::fs::read_to_string(fx.home.path().join(format!("skills/{name}/SKILL.md"))).unwrap()
}

#[test]
fn create_view_patch_and_restore() {
    let fx = Fx::new();
    let out = fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "deploy-notes", "content": DEPLOY}),
    );
    assert!(out.contains("Created skill 'deploy-notes'"), "{out}");
    assert!(out.contains("hermes skills restore deploy-notes"), "{out}");
    let written = skill_md(&fx, "deploy-notes");
    assert_eq!(written, DEPLOY);
    parse_skill_md("deploy-notes", &written).unwrap();

    let list = fx.ok("skills_list", json!({}));
    assert_eq!(
        list,
        "1 skills:\n- deploy-notes: Deploys the site with the blue-green script."
    );
    assert_eq!(fx.ok("skill_view", json!({"name": "deploy-notes"})), DEPLOY);

    let out = fx.ok(
        "skill_manage",
        json!({"action": "patch", "name": "deploy-notes",
               "old_string": "2. Check /health.", "new_string": "2. Check /health and /ready."}),
    );
    assert!(
        out.contains("Patched skills/deploy-notes/SKILL.md"),
        "{out}"
    );
    let patched = skill_md(&fx, "deploy-notes");
    assert!(patched.contains("/health and /ready"), "{patched}");
    assert!(
        fx.ok("skill_view", json!({"name": "deploy-notes"}))
            .contains("/ready"),
        "skill_view shows the change at once"
    );

    let home = SkillsHome::new(fx.home.path());
    assert_eq!(home.restore("deploy-notes").unwrap(), "patch SKILL.md");
    assert_eq!(skill_md(&fx, "deploy-notes"), DEPLOY);
    // Restoring again undoes the create.
    assert_eq!(home.restore("deploy-notes").unwrap(), "create");
    assert!(!fx.home.path().join("skills/deploy-notes").exists());
    let e = home.restore("deploy-notes").unwrap_err().to_string();
    assert!(e.contains("no earlier version"), "{e}");
}

#[test]
fn supporting_files_edit_delete_and_restore() {
    let fx = Fx::new();
    fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "deploy-notes", "content": DEPLOY}),
    );
    fx.ok(
        "skill_manage",
        json!({"action": "write_file", "name": "deploy-notes",
               "file_path": "references/hosts.md", "file_content": "web1, web2\n"}),
    );
    fx.ok(
        "skill_manage",
        json!({"action": "write_file", "name": "deploy-notes",
               "file_path": "scripts/check.sh", "file_content": "curl -f localhost/health\n"}),
    );
    let view = fx.ok("skill_view", json!({"name": "deploy-notes"}));
    assert!(
        view.contains("references/hosts.md, scripts/check.sh]"),
        "{view}"
    );
    assert!(view.contains("terminal tool"), "{view}");
    assert_eq!(
        fx.ok(
            "skill_view",
            json!({"name": "deploy-notes", "file": "references/hosts.md"})
        ),
        "web1, web2\n"
    );
    fx.ok(
        "skill_manage",
        json!({"action": "patch", "name": "deploy-notes", "file_path": "references/hosts.md",
               "old_string": "web2", "new_string": "web2, web3"}),
    );
    assert_eq!(
        std::fs::read_to_string(
            fx.home
                .path()
                .join("skills/deploy-notes/references/hosts.md")
        )
        .unwrap(),
        "web1, web2, web3\n"
    );
    fx.ok(
        "skill_manage",
        json!({"action": "remove_file", "name": "deploy-notes", "file_path": "scripts/check.sh"}),
    );
    assert!(
        !fx.home
            .path()
            .join("skills/deploy-notes/scripts/check.sh")
            .exists()
    );
    let edited = DEPLOY.replace("make deploy", "make release");
    fx.ok(
        "skill_manage",
        json!({"action": "edit", "name": "deploy-notes", "content": edited}),
    );
    assert_eq!(skill_md(&fx, "deploy-notes"), edited);

    let before_delete = tree(&fx.home.path().join("skills/deploy-notes"));
    let out = fx.ok(
        "skill_manage",
        json!({"action": "delete", "name": "deploy-notes"}),
    );
    assert!(out.contains("Deleted skill 'deploy-notes'"), "{out}");
    assert!(!fx.home.path().join("skills/deploy-notes").exists());
    assert_eq!(
        fx.ok("skills_list", json!({})),
        "No skills saved yet (skill_manage action 'create' saves one)."
    );
    let home = SkillsHome::new(fx.home.path());
    assert_eq!(home.restore("deploy-notes").unwrap(), "delete");
    assert_eq!(
        tree(&fx.home.path().join("skills/deploy-notes")),
        before_delete
    );
}

#[test]
fn history_keeps_the_last_versions_only() {
    let fx = Fx::new();
    fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "counter", "content": DEPLOY.replace("deploy-notes", "counter")}),
    );
    for i in 0..HISTORY_KEPT + 3 {
        fx.ok(
            "skill_manage",
            json!({"action": "write_file", "name": "counter",
                   "file_path": "references/n.md", "file_content": format!("{i}\n")}),
        );
    }
    let home = SkillsHome::new(fx.home.path());
    assert_eq!(home.history_len("counter"), HISTORY_KEPT);
    home.restore("counter").unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.home.path().join("skills/counter/references/n.md")).unwrap(),
        format!("{}\n", HISTORY_KEPT + 1)
    );
}

/// Every refused attempt leaves the whole home as it was and says why.
#[test]
fn escapes_links_sizes_and_bad_front_matter_are_refused() {
    let fx = Fx::new();
    let home = fx.home.path();
    std::fs::write(home.join(".env"), "OPENAI_API_KEY=sk-secret\n").unwrap();
    fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "deploy-notes", "content": DEPLOY}),
    );
    // A folder outside the home, and links to it and to the home itself.
    let outside = tempfile::TempDir::new().unwrap();
    std::fs::write(
        outside.path().join("SKILL.md"),
        DEPLOY.replace("deploy-notes", "evil"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), home.join("skills/evil")).unwrap();
    std::os::unix::fs::symlink(home, home.join("skills/deploy-notes/references")).unwrap();
    std::os::unix::fs::symlink(home.join(".env"), home.join("skills/deploy-notes/notes.md"))
        .unwrap();
    let before = tree(home);
    let before_outside = tree(outside.path());

    let ten_mb = "x".repeat(10 * 1024 * 1024);
    let bad_fm = "---\nname: deploy-notes\n---\nno description\n";
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "../../.env", "file_content": "X=1"}),
            "'..', '.' and empty parts are not allowed",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "scripts/../../../.env", "file_content": "X=1"}),
            "'..', '.' and empty parts are not allowed",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": home.join(".env").display().to_string(), "file_content": "X=1"}),
            "absolute paths are not allowed",
        ),
        (
            json!({"action": "write_file", "name": "../deploy-notes", "file_path": "references/a.md", "file_content": "X=1"}),
            "is not a valid skill name",
        ),
        (
            json!({"action": "create", "name": "..", "content": DEPLOY}),
            "is not a valid skill name",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": ".env", "file_content": "X=1"}),
            "hidden names",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "notes.md", "file_content": "X=1"}),
            "a skill's files go in references/, templates/, scripts/, assets/",
        ),
        // A skill folder that is a link out of the home.
        (
            json!({"action": "write_file", "name": "evil", "file_path": "scripts/x.sh", "file_content": "X=1"}),
            "'skills/evil' is a symbolic link",
        ),
        (
            json!({"action": "edit", "name": "evil", "content": DEPLOY.replace("deploy-notes", "evil")}),
            "'skills/evil' is a symbolic link",
        ),
        (
            json!({"action": "delete", "name": "evil"}),
            "'skills/evil' is a symbolic link",
        ),
        (
            json!({"action": "create", "name": "evil", "content": DEPLOY.replace("deploy-notes", "evil")}),
            "'skills/evil' is a symbolic link",
        ),
        // A folder inside the skill that is a link to the home.
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "references/.env2", "file_content": "X=1"}),
            "hidden names",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "references/config.toml", "file_content": "X=1"}),
            "'skills/deploy-notes/references' is a symbolic link",
        ),
        (
            json!({"action": "patch", "name": "deploy-notes", "file_path": "references/config.toml", "old_string": "a", "new_string": "b"}),
            "'skills/deploy-notes/references' is a symbolic link",
        ),
        (
            json!({"action": "write_file", "name": "deploy-notes", "file_path": "scripts/big.bin", "file_content": ten_mb}),
            "over the limit of 1048576 bytes",
        ),
        (
            json!({"action": "edit", "name": "deploy-notes", "content": format!("{DEPLOY}{}", "y".repeat(200_000))}),
            "SKILL.md is 200",
        ),
        (
            json!({"action": "edit", "name": "deploy-notes", "content": bad_fm}),
            "non-empty 'description:'",
        ),
        (
            json!({"action": "create", "name": "other", "content": "just text, no front matter\n"}),
            "must start with a YAML front matter block",
        ),
        (
            json!({"action": "patch", "name": "deploy-notes", "old_string": "description: Deploys the site with the blue-green script.\n", "new_string": ""}),
            "non-empty 'description:'",
        ),
        (
            json!({"action": "patch", "name": "deploy-notes", "old_string": "Deploy", "new_string": "x"}),
            "occurs 2 times",
        ),
        (
            json!({"action": "create", "name": "deploy-notes", "content": DEPLOY}),
            "already exists",
        ),
        (
            json!({"action": "remove_file", "name": "deploy-notes", "file_path": "references/../../.env"}),
            "'..', '.' and empty parts are not allowed",
        ),
    ];
    for (args, want) in cases {
        let err = fx.err("skill_manage", args.clone());
        assert!(err.contains(want), "{args}:\n{err}");
        assert!(err.contains("Nothing was changed."), "{err}");
        assert_eq!(tree(home), before, "{args} changed the home");
    }
    assert_eq!(tree(outside.path()), before_outside);
    assert_eq!(
        std::fs::read_to_string(home.join(".env")).unwrap(),
        "OPENAI_API_KEY=sk-secret\n"
    );

    // Reading is confined too: a link inside the skill to the home's .env,
    // and a skill folder that leads out of skills/, are not read.
    let err = fx.err(
        "skill_view",
        json!({"name": "deploy-notes", "file": "notes.md"}),
    );
    assert!(err.contains("leads outside the skill"), "{err}");
    let err = fx.err("skill_view", json!({"name": "evil"}));
    assert!(err.contains("leads outside"), "{err}");
    let err = fx.err(
        "skill_view",
        json!({"name": "deploy-notes", "file": "../../.env"}),
    );
    assert!(err.contains("not allowed"), "{err}");
    // The listing shows the real skill only.
    assert_eq!(
        fx.ok("skills_list", json!({})),
        "1 skills:\n- deploy-notes: Deploys the site with the blue-green script."
    );
}

#[test]
fn the_file_tools_still_cannot_write_skills() {
    let fx = Fx::new();
    fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "deploy-notes", "content": DEPLOY}),
    );
    let path = fx.home.path().join("skills/deploy-notes/SKILL.md");
    let err = fx.err(
        "write_file",
        json!({"path": path.display().to_string(), "content": "x"}),
    );
    assert!(
        err.contains("outside the working directory") || err.contains("refused"),
        "{err}"
    );
    assert_eq!(skill_md(&fx, "deploy-notes"), DEPLOY);
}

#[test]
fn the_example_skill_in_the_docs_is_valid_and_installs() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/skills/example-skill");
    let text = std::fs::read_to_string(example.join("SKILL.md")).unwrap();
    let (fm, body) = parse_skill_md("example-skill", &text).unwrap();
    assert_eq!(fm.category.as_deref(), Some("writing"));
    assert!(body.contains("skill_view"));
    let fx = Fx::new();
    let home = SkillsHome::new(fx.home.path());
    assert_eq!(home.install(&example).unwrap(), "example-skill");
    assert_eq!(
        fx.ok(
            "skill_view",
            json!({"name": "example-skill", "file": "references/style.md"})
        ),
        std::fs::read_to_string(example.join("references/style.md")).unwrap()
    );
    let list = fx.ok("skills_list", json!({"category": "writing"}));
    assert!(
        list.contains("- example-skill: Writes release notes"),
        "{list}"
    );
    assert!(list.contains("[category: writing]"), "{list}");
    assert_eq!(
        fx.ok("skills_list", json!({"category": "ops"})),
        "No skills saved yet (skill_manage action 'create' saves one)."
    );
    // Installing again is refused; undoing the install removes it.
    let e = home.install(&example).unwrap_err().to_string();
    assert!(e.contains("already installed"), "{e}");
    assert_eq!(home.restore("example-skill").unwrap(), "install");
    assert!(home.list().is_empty());
}

#[test]
fn install_refuses_links_and_bad_skills() {
    let fx = Fx::new();
    let home = SkillsHome::new(fx.home.path());
    let src = tempfile::TempDir::new().unwrap();
    std::fs::write(src.path().join("SKILL.md"), "no front matter\n").unwrap();
    let e = home.install(src.path()).unwrap_err().to_string();
    assert!(e.contains("needs 'name:'"), "{e}");
    std::fs::write(src.path().join("SKILL.md"), DEPLOY).unwrap();
    std::fs::create_dir(src.path().join("references")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.path().join("references/passwd")).unwrap();
    let e = home.install(src.path()).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(
        tree(fx.home.path())
            .keys()
            .all(|k| !k.contains("deploy-notes"))
    );
    std::fs::remove_file(src.path().join("references/passwd")).unwrap();
    assert_eq!(
        home.install(&src.path().join("SKILL.md")).unwrap(),
        "deploy-notes"
    );
}

#[test]
fn a_skill_holds_at_most_8_mib() {
    let fx = Fx::new();
    fx.ok(
        "skill_manage",
        json!({"action": "create", "name": "big", "content": DEPLOY.replace("deploy-notes", "big")}),
    );
    let mib = "z".repeat(1024 * 1024);
    for i in 0..7 {
        fx.ok(
            "skill_manage",
            json!({"action": "write_file", "name": "big",
                   "file_path": format!("assets/{i}.txt"), "file_content": mib}),
        );
    }
    let before = tree(fx.home.path());
    let err = fx.err(
        "skill_manage",
        json!({"action": "write_file", "name": "big", "file_path": "assets/7.txt", "file_content": mib}),
    );
    assert!(err.contains("over the limit of 8388608 bytes"), "{err}");
    assert_eq!(tree(fx.home.path()), before);
}
