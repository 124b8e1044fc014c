//! `memory`: long-term notes in `$HERMES_HOME/MEMORY.md` (and facts about the
//! user in `USER.md`), read into the system prompt of every new session.
//!
//! **File format.** Entries are separated by a line holding only `§`:
//!
//! ```text
//! The user prefers tabs.
//! §
//! The project builds with `make ci`.
//! ```
//!
//! A separator line (rather than one bullet per entry) lets an entry span
//! several lines. Hand edits are fine: leading/trailing whitespace around an
//! entry is ignored and empty entries are dropped.
//!
//! **Limits.** The rendered file may not exceed the cap (8 KiB by default):
//! the whole file goes into every system prompt. A full memory is a clear
//! error asking the model to remove or shorten entries.
//!
//! **Writes are atomic** (temp file + rename) and serialized within the
//! process, so two sessions of one gateway cannot interleave edits.

use std::path::PathBuf;
use std::sync::Mutex;

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::{failed, parse_args, spec};
use crate::fsutil::write_atomic;
use crate::memory_scope::MemoryPlace;
use crate::sync::lock;

/// The line that separates two entries.
pub const MEMORY_ENTRY_SEPARATOR: &str = "§";
/// Default size limit of one memory file, in bytes.
pub const DEFAULT_MEMORY_CAP_BYTES: usize = 8 * 1024;

/// Serializes read-modify-write cycles of every memory tool in the process.
static WRITE_LOCK: Mutex<()> = Mutex::new(());

/// The memory tool's schema, `$targets` the members of its `target` enum.
macro_rules! memory_schema {
    ($targets:literal) => {
        schema_text!(concat!(
            r#"{
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                "target": {"type": "string", "enum": ["#,
            $targets,
            r#"], "description": "Which file. Default 'memory'."},
                "content": {"type": "string", "description": "The new entry (add, replace)."},
                "old_text": {"type": "string", "description": "A substring identifying exactly one existing entry (replace, remove)."}
            },
            "required": ["action"]
        }"#
        ))
    };
}

/// Adds, replaces and removes long-term memory entries.
#[derive(Debug)]
pub struct MemoryTool {
    spec: ToolSpec,
    /// Whose files: the session's user's, and the shared memory's.
    place: MemoryPlace,
    cap: usize,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Action {
    Add,
    Replace,
    Remove,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum Target {
    #[default]
    Memory,
    User,
    Shared,
}

impl Target {
    fn file(self) -> &'static str {
        match self {
            Target::Memory | Target::Shared => "MEMORY.md",
            Target::User => "USER.md",
        }
    }
}

#[derive(Deserialize)]
pub(super) struct MemoryArgs {
    action: Action,
    #[serde(default)]
    target: Target,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    old_text: Option<String>,
}

/// Splits a memory file into entries.
pub(crate) fn parse_entries(text: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim() == MEMORY_ENTRY_SEPARATOR {
            entries.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    entries.push(current);
    entries
        .into_iter()
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect()
}

/// Renders entries in the file format.
fn render(entries: &[String]) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let mut out = entries.join(&format!("\n{MEMORY_ENTRY_SEPARATOR}\n"));
    out.push('\n');
    out
}

impl MemoryTool {
    /// A memory tool on `$HERMES_HOME` with the default cap.
    pub fn new(hermes_home: PathBuf) -> Self {
        Self::with_cap(hermes_home, DEFAULT_MEMORY_CAP_BYTES)
    }

    /// A memory tool whose files may hold at most `cap` bytes each.
    pub fn with_cap(hermes_home: PathBuf, cap: usize) -> Self {
        Self::for_place(MemoryPlace::home(&hermes_home), cap)
    }

    /// A memory tool on one person's files (and the shared memory, when
    /// `place` has one), each holding at most `cap` bytes.
    pub fn for_place(place: MemoryPlace, cap: usize) -> Self {
        let shared = if place.shared_dir.is_none() {
            ""
        } else if place.may_write_shared {
            " 'shared': facts every user of this bot sees (the household, the team), never \
             private ones."
        } else {
            " 'shared' is read-only for this user."
        };
        MemoryTool {
            spec: spec(
                "memory",
                format!(
                    "Save durable facts for future sessions (they appear in your system prompt \
                     from the next session on). target 'memory' (default): notes about the \
                     environment, project and lessons learned; 'user': facts about the user.{shared} \
                     action 'add' needs content; 'replace' needs old_text (a unique substring \
                     of one entry) and content; 'remove' needs old_text. Each file holds at \
                     most {cap} bytes: keep entries short."
                ),
                // The shared file is a target only where there is one.
                if place.shared_dir.is_some() {
                    memory_schema!(r#""memory", "user", "shared""#)
                } else {
                    memory_schema!(r#""memory", "user""#)
                },
            ),
            place,
            cap,
        }
    }

    fn find(entries: &[String], old: &str, file: &str) -> Result<usize, ToolError> {
        if old.trim().is_empty() {
            return Err(failed("Error: 'old_text' is empty."));
        }
        let hits: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.contains(old))
            .map(|(i, _)| i)
            .collect();
        match hits.as_slice() {
            [] => Err(failed(format!(
                "Error: no entry in {file} contains '{old}'. Current entries:\n{}",
                list(entries)
            ))),
            [one] => Ok(*one),
            many => Err(failed(format!(
                "Error: '{old}' matches {} entries in {file}; give a longer, unique substring. Current entries:\n{}",
                many.len(),
                list(entries)
            ))),
        }
    }
}

fn list(entries: &[String]) -> String {
    if entries.is_empty() {
        return "(none)".into();
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}. {}", i + 1, e.replace('\n', "\n   ")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn content_arg(content: Option<String>) -> Result<String, ToolError> {
    let content = content
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            failed("Error: 'content' is required for this action and must not be empty.")
        })?;
    if content.lines().any(|l| l.trim() == MEMORY_ENTRY_SEPARATOR) {
        return Err(failed(format!(
            "Error: 'content' may not contain a line holding only '{MEMORY_ENTRY_SEPARATOR}' (it separates entries)."
        )));
    }
    Ok(content)
}

impl Tool for MemoryTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: MemoryArgs = parse_args("memory", arguments)?;
        if let Some(content) = &args.content
            && content.len() > self.cap
        {
            return Err(failed(format!(
                "Error: the entry is {} bytes, over the limit of {} bytes for a whole memory \
                 file. Save a short summary instead.",
                content.len(),
                self.cap
            )));
        }
        let file = args.target.file();
        let dir = match args.target {
            Target::Memory | Target::User => &self.place.dir,
            Target::Shared => match &self.place.shared_dir {
                Some(dir) if self.place.may_write_shared => dir,
                Some(_) => {
                    return Err(failed(
                        "Error: only the owner and the users the owner names may write the \
                         shared memory; keep this in the user's own memory (target 'memory' or 'user').",
                    ));
                }
                None => return Err(failed("Error: there is no shared memory here.")),
            },
        };
        let path = dir.join(file);
        let _guard = lock(&WRITE_LOCK);
        let current = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(failed(format!("Error: cannot read {file}: {e}"))),
        };
        let mut entries = parse_entries(&current);
        let summary = match args.action {
            Action::Add => {
                let content = content_arg(args.content)?;
                if entries.contains(&content) {
                    return Ok(format!(
                        "That entry is already in {file}; nothing changed. Entries:\n{}",
                        list(&entries)
                    ));
                }
                entries.push(content);
                "Added the entry"
            }
            Action::Replace => {
                let old = args
                    .old_text
                    .ok_or_else(|| failed("Error: 'old_text' is required for replace."))?;
                let content = content_arg(args.content)?;
                let i = Self::find(&entries, &old, file)?;
                entries[i] = content;
                "Replaced the entry"
            }
            Action::Remove => {
                let old = args
                    .old_text
                    .ok_or_else(|| failed("Error: 'old_text' is required for remove."))?;
                let i = Self::find(&entries, &old, file)?;
                entries.remove(i);
                "Removed the entry"
            }
        };
        let rendered = render(&entries);
        if rendered.len() > self.cap && rendered.len() > current.len() {
            return Err(failed(format!(
                "Error: {file} is full: the change would make it {} bytes, over the limit of {} \
                 bytes. Remove or shorten entries first (action 'remove' or 'replace'). Current entries:\n{}",
                rendered.len(),
                self.cap,
                list(&parse_entries(&current))
            )));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| failed(format!("Error: cannot create {}: {e}", dir.display())))?;
        write_atomic(&path, rendered.as_bytes())
            .map_err(|e| failed(format!("Error: cannot write {file}: {e}")))?;
        Ok(format!(
            "{summary} in {file} ({} entries, {}/{} bytes). It will be in the system prompt from the next session on. Entries:\n{}",
            entries.len(),
            rendered.len(),
            self.cap,
            list(&entries)
        ))
    }
}
