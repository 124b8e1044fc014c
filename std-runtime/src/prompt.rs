//! System prompt assembly (SPEC L6).
//!
//! The prompt is assembled **once per session** from, in this order:
//!
//! 1. a short built-in identity paragraph;
//! 2. the persona, `$HERMES_HOME/SOUL.md` (a built-in default when absent);
//! 3. long-term memory, `MEMORY.md`, and facts about the user, `USER.md`:
//!    `$HERMES_HOME`'s in the CLI, the served user's in the gateway, after
//!    the shared memory labelled as such (`crate::memory_scope`);
//! 4. project instructions: the first of `HERMES.md` / `AGENTS.md` found in
//!    the working directory (the prompt names the file it came from);
//! 5. a compact list of the tools (name + first sentence of the
//!    description: the whole description is in the tool definitions the
//!    request carries, and repeating it cost ~3.5 KB, ~1k tokens, of every
//!    request with the default tools — issue 38);
//! 6. a skills index, when `$HERMES_HOME/skills/*/SKILL.md` exist: names and
//!    descriptions only (SPEC Y8), and when to save one if `skill_manage` is
//!    offered. A skill written during a session shows from the next one.
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

use crate::memory_scope::MemoryPlace;
use crate::skills::SkillSummary;

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
    /// Whose `MEMORY.md` and `USER.md`, and the shared memory of a gateway
    /// user (issue 44); [`PromptSources::new`]: `$HERMES_HOME`'s, as the
    /// CLI reads them.
    pub memory: MemoryPlace,
}

impl PromptSources {
    /// Sources with the default cap.
    pub fn new(hermes_home: impl Into<PathBuf>, workdir: impl Into<PathBuf>) -> Self {
        let hermes_home = hermes_home.into();
        PromptSources {
            memory: MemoryPlace::home(&hermes_home),
            hermes_home,
            workdir: workdir.into(),
            per_source_cap: DEFAULT_PER_SOURCE_CAP,
        }
    }
}

/// The first sentence of a tool's description: its first line up to the
/// first ". " that does not follow "e.g" or "i.e".
///
/// Each full stop is found with `memchr` and then checked for the space:
/// a small window compacts every tool's description at every start, and
/// `str::find(". ")` (a two-way search) was 1.5 % of a 0-turn run.
pub(crate) fn first_sentence(text: &str) -> &str {
    let line = text.trim().lines().next().unwrap_or("");
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) =
        memchr::memchr(b'.', bytes.get(from..).unwrap_or_default()).map(|i| from + i)
    {
        if bytes.get(at + 1) == Some(&b' ') {
            let before = &line[..at];
            if !(before.ends_with("e.g") || before.ends_with("i.e")) {
                return &line[..=at];
            }
        }
        from = at + 1;
    }
    line
}

/// Cuts `text` to `cap` bytes on a char boundary, with a visible marker.
fn cap_source(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let keep = crate::text::floor_char_boundary(text, cap);
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

/// The skills index (names and descriptions only: the full text is loaded
/// with `skill_view`), and when the agent can write skills a line on when
/// to; `None` when there is neither.
fn skills_section(skills: &[SkillSummary], tools: &[ToolSpec]) -> Option<(String, String)> {
    let has = |name: &str| tools.iter().any(|t| t.name == name);
    let mut body = String::new();
    for s in skills {
        body.push_str(&format!("- {}: {}\n", s.name, s.description));
    }
    if has("skill_manage") {
        if skills.is_empty() {
            body.push_str("(none yet)\n");
        }
        body.push_str(SAVE_SKILL_HINT);
    } else if skills.is_empty() {
        return None;
    }
    let title = if has("skill_view") {
        "Skills (load one with skill_view before following it)"
    } else {
        "Skills (read $HERMES_HOME/skills/NAME/SKILL.md before following one)"
    };
    Some((title.to_owned(), body.trim_end().to_owned()))
}

/// When saving a skill is worth it, for an agent that can (SPEC Y8).
pub const SAVE_SKILL_HINT: &str = "Save a skill with skill_manage when a task took several \
steps to get right and will likely come up again, or when the user states a standing preference \
for how a kind of task is done; improve a skill (patch) when following it went wrong. Do not save \
one-off facts (use memory) or secrets.";

fn section(out: &mut String, title: &str, body: &str) {
    out.push_str("\n\n## ");
    out.push_str(title);
    out.push('\n');
    out.push_str(body);
}

/// The prompt's sources as read, before the tools are known: what
/// depends only on the files (identity to project instructions) and the
/// skills found. Fitting the tools to a small window renders it for each
/// candidate set of tools (`assemble::fixed`), reading the files once.
#[derive(Clone, Debug)]
pub struct PromptText {
    /// Sections 1–4, assembled.
    head: String,
    /// The skills index's entries, sorted by name.
    skills: Vec<SkillSummary>,
    /// The cap on each source (the tools' and skills' sections too).
    cap: usize,
}

impl PromptSources {
    /// Reads every source once (see the module docs for order and caps).
    pub fn read(&self) -> PromptText {
        let cap = self.per_source_cap;
        let mut head = String::from(IDENTITY);

        let soul = read_source(&self.hermes_home.join("SOUL.md"));
        section(
            &mut head,
            "Persona",
            &cap_source(soul.as_deref().unwrap_or(DEFAULT_SOUL), cap),
        );

        if let Some(shared) = self
            .memory
            .shared_dir
            .as_ref()
            .and_then(|dir| read_source(&dir.join("MEMORY.md")))
        {
            section(
                &mut head,
                "Shared memory (every user of this bot sees it; entries separated by §)",
                &cap_source(&shared, cap),
            );
        }
        if let Some(memory) = read_source(&self.memory.dir.join("MEMORY.md")) {
            section(
                &mut head,
                "Memory (from MEMORY.md; entries separated by §)",
                &cap_source(&memory, cap),
            );
        }
        if let Some(user) = read_source(&self.memory.dir.join("USER.md")) {
            section(
                &mut head,
                "About the user (from USER.md)",
                &cap_source(&user, cap),
            );
        }

        for file in PROJECT_FILES {
            if let Some(text) = read_source(&self.workdir.join(file)) {
                section(
                    &mut head,
                    &format!("Project instructions (from {file} in the working directory)"),
                    &cap_source(&text, cap),
                );
                break;
            }
        }

        let skills = if self.hermes_home.as_os_str().is_empty() {
            Vec::new()
        } else {
            crate::skills::SkillsHome::new(&self.hermes_home).list()
        };
        PromptText { head, skills, cap }
    }
}

impl PromptText {
    /// The system prompt of a session offering `tools`.
    pub fn render(&self, tools: &[ToolSpec]) -> String {
        let cap = self.cap;
        let mut out = self.head.clone();
        if !tools.is_empty() {
            let mut list = String::new();
            for t in tools {
                list.push_str("- ");
                list.push_str(&t.name);
                list.push_str(": ");
                list.push_str(first_sentence(&t.description));
                list.push('\n');
            }
            section(&mut out, "Tools", &cap_source(list.trim_end(), cap));
        }
        if let Some((title, body)) = skills_section(&self.skills, tools) {
            section(&mut out, &title, &cap_source(&body, cap));
        }
        out.push('\n');
        out
    }
}

/// Assembles the system prompt of a new session from `src` and the tools the
/// session offers. See the module docs for order, caps and determinism.
pub fn assemble_system_prompt(src: &PromptSources, tools: &[ToolSpec]) -> String {
    src.read().render(tools)
}

#[cfg(test)]
mod tests {
    use super::first_sentence;

    #[test]
    fn first_sentence_skips_abbreviations_and_stops_at_the_line() {
        assert_eq!(
            first_sentence("Load a skill; with 'file', one file (e.g. refs/api.md). Nothing runs."),
            "Load a skill; with 'file', one file (e.g. refs/api.md)."
        );
        assert_eq!(first_sentence("  Read a file.\nMore."), "Read a file.");
        assert_eq!(first_sentence("No full stop"), "No full stop");
        assert_eq!(first_sentence(""), "");
        assert_eq!(
            first_sentence("v1.2 is out.. Really. Yes."),
            "v1.2 is out.."
        );
        assert_eq!(first_sentence("Ends with a stop."), "Ends with a stop.");
        assert_eq!(
            first_sentence("i.e. this, e.g. that. Then."),
            "i.e. this, e.g. that."
        );
    }
}
