//! System prompt assembly (SPEC L6).
//!
//! The prompt is assembled **once per session** from, in this order:
//!
//! 1. a short built-in identity paragraph;
//! 2. the persona, `$HERMES_HOME/SOUL.md` (a built-in default when absent);
//! 3. long-term memory, `$HERMES_HOME/MEMORY.md`, and facts about the user,
//!    `$HERMES_HOME/USER.md`;
//! 4. project instructions: the first of `HERMES.md` / `AGENTS.md` found in
//!    the working directory (the prompt names the file it came from);
//! 5. a compact list of the tools (name + first line of the description);
//! 6. a skills index, when `$HERMES_HOME/skills/*/SKILL.md` exist.
//!
//! **Deterministic.** No timestamps, skill directories sorted by name, files
//! read as bytes and decoded lossily: the same inputs give a byte-identical
//! prompt, which provider prompt caching depends on. Callers store the
//! assembled prompt with the session and reuse it on resume instead of
//! calling this again.
//!
//! **Bounded.** Each source is capped (`per_source_cap`); a cut source ends
//! with a visible `[… truncated: N bytes omitted]` marker, so neither the
//! model nor a reader mistakes it for the whole file. Missing or unreadable
//! sources are skipped.

use std::path::{Path, PathBuf};

use hermes_core::ToolSpec;

/// Default cap on each source, in bytes.
pub const DEFAULT_PER_SOURCE_CAP: usize = 20_000;

/// The paragraph every prompt starts with.
pub const IDENTITY: &str = "You are Hermes, an AI agent that helps its user by reasoning step \
by step and using tools: it reads and edits files, runs commands, fetches web pages, and \
remembers what matters across sessions. Act rather than describe when a tool can do the job, \
check results instead of assuming them, and say plainly when something failed or is uncertain.";

/// The persona used when `SOUL.md` is absent.
pub const DEFAULT_SOUL: &str = "You are direct, careful and friendly. Keep answers concise; \
prefer concrete steps, exact commands and file paths over general advice. Ask a question only \
when the task cannot reasonably proceed without the answer.";

/// Project instruction files, in order of preference.
pub const PROJECT_FILES: &[&str] = &["HERMES.md", "AGENTS.md"];

/// Where the prompt's sources are.
#[derive(Clone, Debug)]
pub struct PromptSources {
    /// `$HERMES_HOME`: `SOUL.md`, `MEMORY.md`, `USER.md`, `skills/`.
    pub hermes_home: PathBuf,
    /// The working directory: `HERMES.md` or `AGENTS.md`.
    pub workdir: PathBuf,
    /// The most bytes taken from any one source.
    pub per_source_cap: usize,
}

impl PromptSources {
    /// Sources with the default cap.
    pub fn new(hermes_home: impl Into<PathBuf>, workdir: impl Into<PathBuf>) -> Self {
        PromptSources {
            hermes_home: hermes_home.into(),
            workdir: workdir.into(),
            per_source_cap: DEFAULT_PER_SOURCE_CAP,
        }
    }
}

/// Cuts `text` to `cap` bytes on a char boundary, with a visible marker.
fn cap_source(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let mut keep = cap;
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    format!(
        "{}\n[… truncated: {} bytes omitted]",
        text[..keep].trim_end(),
        text.len() - keep
    )
}

/// A source file's trimmed text; `None` when missing, unreadable or blank.
fn read_source(path: &Path) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
            let text = text.trim();
            (!text.is_empty()).then(|| text.to_string())
        }
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "prompt source unreadable; skipped");
            }
            None
        }
    }
}

/// Name and one-line description of a skill, from its `SKILL.md`: YAML
/// front-matter `name:`/`description:` when present, otherwise the
/// directory name and the first line that is not a heading.
fn skill_entry(dir_name: &str, text: &str) -> (String, String) {
    let mut name = dir_name.to_string();
    let mut description = String::new();
    let mut body = text;
    if let Some(rest) = text.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---")
    {
        for line in rest[..end].lines() {
            let unquote = |v: &str| v.trim().trim_matches(['"', '\'']).to_string();
            if let Some(v) = line.strip_prefix("name:") {
                let v = unquote(v);
                if !v.is_empty() {
                    name = v;
                }
            } else if let Some(v) = line.strip_prefix("description:") {
                description = unquote(v);
            }
        }
        body = rest[end + 4..].trim_start_matches(|c| c != '\n');
    }
    if description.is_empty() {
        description = body
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
            .unwrap_or("")
            .to_string();
    }
    (name, description)
}

/// The skills index, or `None` when there are no skills.
fn skills_index(home: &Path) -> Option<String> {
    let dir = home.join("skills");
    let mut dirs: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.path().join("SKILL.md").is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    if dirs.is_empty() {
        return None;
    }
    dirs.sort();
    let mut out = String::new();
    for (dir_name, path) in dirs {
        let skill_md = path.join("SKILL.md");
        let text = read_source(&skill_md).unwrap_or_default();
        let (name, description) = skill_entry(&dir_name, &text);
        out.push_str(&format!(
            "- {name}: {description} (skills/{dir_name}/SKILL.md)\n"
        ));
    }
    Some(out.trim_end().to_string())
}

fn section(out: &mut String, title: &str, body: &str) {
    out.push_str("\n\n## ");
    out.push_str(title);
    out.push('\n');
    out.push_str(body);
}

/// Assembles the system prompt of a new session from `src` and the tools the
/// session offers. See the module docs for order, caps and determinism.
pub fn assemble_system_prompt(src: &PromptSources, tools: &[ToolSpec]) -> String {
    let cap = src.per_source_cap;
    let mut out = String::from(IDENTITY);

    let soul = read_source(&src.hermes_home.join("SOUL.md"));
    section(
        &mut out,
        "Persona",
        &cap_source(soul.as_deref().unwrap_or(DEFAULT_SOUL), cap),
    );

    if let Some(memory) = read_source(&src.hermes_home.join("MEMORY.md")) {
        section(
            &mut out,
            "Memory (from MEMORY.md; entries separated by §)",
            &cap_source(&memory, cap),
        );
    }
    if let Some(user) = read_source(&src.hermes_home.join("USER.md")) {
        section(
            &mut out,
            "About the user (from USER.md)",
            &cap_source(&user, cap),
        );
    }

    for file in PROJECT_FILES {
        if let Some(text) = read_source(&src.workdir.join(file)) {
            section(
                &mut out,
                &format!("Project instructions (from {file} in the working directory)"),
                &cap_source(&text, cap),
            );
            break;
        }
    }

    if !tools.is_empty() {
        let mut list = String::new();
        for t in tools {
            let first = t.description.lines().next().unwrap_or("").trim();
            list.push_str(&format!("- {}: {first}\n", t.name));
        }
        section(&mut out, "Tools", &cap_source(list.trim_end(), cap));
    }

    if let Some(index) = skills_index(&src.hermes_home) {
        section(
            &mut out,
            "Skills (read a skill's SKILL.md in $HERMES_HOME before using it)",
            &cap_source(&index, cap),
        );
    }
    out.push('\n');
    out
}
