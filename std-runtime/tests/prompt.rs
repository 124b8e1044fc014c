//! System prompt assembly (SPEC L6): order of sources, caps, determinism.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use hermes_core::ToolSpec;
use hermes_runtime::prompt::{DEFAULT_SOUL, IDENTITY, PromptSources, assemble_system_prompt};
use serde_json::json;
use tempfile::TempDir;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "read_file",
            "Read a text file.\nMore detail here.",
            json!({"type": "object"}),
        ),
        ToolSpec::new(
            "terminal",
            "Run a shell command. Non-interactive (e.g. stdin is empty). Long outputs are cut.",
            json!({"type": "object"}),
        ),
    ]
}

/// Position of `needle` in `hay`, failing the test with context if absent.
fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("'{needle}' not in prompt:\n{hay}"))
}

#[test]
fn sources_appear_in_order_with_their_origin() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    write(&home.path().join("SOUL.md"), "You are a pirate.\n");
    write(
        &home.path().join("MEMORY.md"),
        "Uses tabs.\n§\nCI is `make ci`.\n",
    );
    write(&home.path().join("USER.md"), "Name: Ada.\n");
    write(&work.path().join("AGENTS.md"), "Agents file.\n");
    write(
        &work.path().join("HERMES.md"),
        "Run cargo test before committing.\n",
    );
    write(
        &home.path().join("skills/zeta/SKILL.md"),
        "# Zeta\n\nDeploys the zeta service.\nSecond line.\n",
    );
    write(
        &home.path().join("skills/alpha/SKILL.md"),
        "---\nname: alpha-tool\ndescription: \"Makes alpha reports.\"\n---\n# Alpha\nBody.\n",
    );
    // A directory without SKILL.md is not a skill.
    std::fs::create_dir_all(home.path().join("skills/empty")).unwrap();

    let src = PromptSources::new(home.path(), work.path());
    let p = assemble_system_prompt(&src, &tools());

    assert!(p.starts_with(IDENTITY), "{p}");
    let order = [
        pos(&p, "## Persona\nYou are a pirate."),
        pos(&p, "## Memory (from MEMORY.md"),
        pos(&p, "Uses tabs.\n§\nCI is `make ci`."),
        pos(&p, "## About the user (from USER.md)\nName: Ada."),
        pos(
            &p,
            "## Project instructions (from HERMES.md in the working directory)\nRun cargo test before committing.",
        ),
        pos(
            &p,
            "## Tools\n- read_file: Read a text file.\n- terminal: Run a shell command.",
        ),
        pos(&p, "## Skills"),
        pos(
            &p,
            "- alpha: Makes alpha reports.\n- zeta: Deploys the zeta service.",
        ),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{p}");
    // The list carries a description's first sentence only (the whole one
    // is in the definitions the request carries; issue 38): not its later
    // sentences on the same line, and an "e.g." does not end it.
    assert!(!p.contains("Non-interactive"), "{p}");
    assert!(!p.contains("Long outputs"), "{p}");
    // Only the first project file is used; only the first description line.
    assert!(!p.contains("Agents file."), "{p}");
    assert!(!p.contains("More detail here."), "{p}");
    assert!(!p.contains("- empty"), "{p}");
    // Names and descriptions only: the instructions are loaded on demand.
    assert!(!p.contains("Second line."), "{p}");
    assert!(
        p.contains("## Skills (read $HERMES_HOME/skills/NAME/SKILL.md"),
        "{p}"
    );
    assert!(!p.contains(DEFAULT_SOUL));
}

#[test]
fn defaults_when_sources_are_missing() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    write(&work.path().join("AGENTS.md"), "Use the agents file.\n");
    let p = assemble_system_prompt(&PromptSources::new(home.path(), work.path()), &[]);
    assert_eq!(
        p,
        format!(
            "{IDENTITY}\n\n## Persona\n{DEFAULT_SOUL}\n\n## Project instructions (from AGENTS.md in the working directory)\nUse the agents file.\n"
        )
    );
}

#[test]
fn each_source_is_capped_with_a_visible_marker() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    // Multi-byte characters so the cut must find a char boundary.
    write(&home.path().join("MEMORY.md"), &"é".repeat(300));
    write(&work.path().join("HERMES.md"), &"h".repeat(150));
    write(&home.path().join("SOUL.md"), "short soul");
    let src = PromptSources {
        per_source_cap: 101,
        ..PromptSources::new(home.path(), work.path())
    };
    let p = assemble_system_prompt(&src, &[]);
    assert!(
        p.contains(&format!(
            "{}\n[… truncated: 500 bytes omitted]",
            "é".repeat(50)
        )),
        "{p}"
    );
    assert!(
        p.contains(&format!(
            "{}\n[… truncated: 49 bytes omitted]",
            "h".repeat(101)
        )),
        "{p}"
    );
    assert!(p.contains("## Persona\nshort soul\n"), "{p}");
}

#[test]
fn same_inputs_give_byte_identical_prompts() {
    let home = TempDir::new().unwrap();
    let work = TempDir::new().unwrap();
    write(&home.path().join("MEMORY.md"), "m\n");
    for name in ["c", "a", "b", "e", "d"] {
        write(
            &home.path().join(format!("skills/{name}/SKILL.md")),
            &format!("Skill {name}.\n"),
        );
    }
    let src = PromptSources::new(home.path(), work.path());
    let first = assemble_system_prompt(&src, &tools());
    for _ in 0..5 {
        assert_eq!(assemble_system_prompt(&src, &tools()), first);
    }
    let a = pos(&first, "- a: Skill a.");
    let e = pos(&first, "- e: Skill e.");
    assert!(a < e);

    // A copy of the same sources elsewhere gives the same bytes: nothing
    // depends on paths, times or directory order.
    let home2 = TempDir::new().unwrap();
    let work2 = TempDir::new().unwrap();
    write(&home2.path().join("MEMORY.md"), "m\n");
    for name in ["e", "d", "c", "b", "a"] {
        write(
            &home2.path().join(format!("skills/{name}/SKILL.md")),
            &format!("Skill {name}.\n"),
        );
    }
    let other = assemble_system_prompt(&PromptSources::new(home2.path(), work2.path()), &tools());
    assert_eq!(other, first);
}

#[test]
fn prompt_lists_the_registry_tools() {
    let work = TempDir::new().unwrap();
    let env = hermes_runtime::tools::ToolEnv::new(work.path(), work.path());
    let reg = hermes_runtime::tools::build_registry(&env, None).unwrap();
    let p = assemble_system_prompt(&PromptSources::new(work.path(), work.path()), reg.specs());
    for name in reg.names() {
        assert!(p.contains(&format!("\n- {name}: ")), "{name} missing:\n{p}");
    }
}

#[test]
fn skills_index_with_the_skills_tools_and_when_to_save_one() {
    let work = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    let env = hermes_runtime::tools::ToolEnv::new(work.path(), home.path());
    let reg = hermes_runtime::tools::build_registry(&env, None).unwrap();
    let src = PromptSources::new(home.path(), work.path());
    let p = assemble_system_prompt(&src, reg.specs());
    assert!(
        p.ends_with(&format!(
            "## Skills (load one with skill_view before following it)\n(none yet)\n{}\n",
            hermes_runtime::prompt::SAVE_SKILL_HINT
        )),
        "{p}"
    );
    write(
        &home.path().join("skills/deploy/SKILL.md"),
        "---\nname: deploy\ndescription: >\n  Deploys the\n  service.\n---\n# Deploy\nSECRET STEP\n",
    );
    let p = assemble_system_prompt(&src, reg.specs());
    assert!(
        p.contains("## Skills (load one with skill_view before following it)\n- deploy: Deploys the service.\nSave a skill"),
        "{p}"
    );
    assert!(!p.contains("SECRET STEP"), "{p}");
    // Without the skills toolset: the index only, no advice to save.
    let file_only =
        hermes_runtime::tools::build_registry(&env, Some(&["file".to_owned()])).unwrap();
    let p = assemble_system_prompt(&src, file_only.specs());
    assert!(p.ends_with("## Skills (read $HERMES_HOME/skills/NAME/SKILL.md before following one)\n- deploy: Deploys the service.\n"), "{p}");
}
