//! `search_files`: regex search over file contents, or glob search over file
//! names, below a directory inside the working directory.
//!
//! - **The walk goes through directory handles**, never paths: each
//!   directory is opened from its parent's handle without following
//!   symlinks (`O_NOFOLLOW | O_DIRECTORY`), each file likewise, so a symlink
//!   is never followed and a directory swapped for a symlink mid-walk leads
//!   nowhere (see `workdir`). Symlinks are skipped.
//! - **Ignore rules as ripgrep's walker has them**: `.gitignore`, `.ignore`
//!   and `.git/info/exclude` (also outside a git repository), from the
//!   working directory down to the searched directory and below, matched by
//!   the `ignore` crate's gitignore engine; hidden files are skipped, so
//!   `target/`, `node_modules/` and `.git/` do not drown the results. Rules
//!   outside the working directory (a global gitignore, parents above it)
//!   are not read.
//! - Entries are visited in name order, depth first, so the same tree gives
//!   the same output.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use globset::{Glob, GlobMatcher};
use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use regex::Regex;
use serde::Deserialize;

use super::fs::{looks_binary, read_line_bounded};
use super::{Access, Workdir, bounded_spec, failed, parse_args};
use crate::spill::cap_result;
use crate::text::floor_char_boundary;

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Files larger than this are not searched for content (logs, data dumps).
const MAX_CONTENT_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// A matching line is shown up to this many bytes.
const MAX_MATCH_LINE_BYTES: usize = 300;
/// Only this much of each line is searched (bounds memory on huge lines).
const MAX_SEARCHED_LINE_BYTES: usize = 64 * 1024;
/// Directories below this depth are not entered (each level holds a handle).
const MAX_DEPTH: usize = 100;
/// Larger ignore files are not read.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// Opens `name` in `dir` read-only without following a symlink and without
/// blocking on a FIFO; only regular files are returned.
fn open_entry(dir: &Dir, name: &Path) -> Option<(std::fs::File, std::fs::Metadata)> {
    let mut opts = OpenOptions::new();
    opts.read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(libc::O_NONBLOCK);
    let file = dir.open_with(name, &opts).ok()?.into_std();
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta))
}

/// The ignore rules a directory holds (`.gitignore`, then `.ignore`, which
/// wins, and `.git/info/exclude` at a repository's top), or `None`.
fn ignore_rules(dir: &Dir, real: &Path) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(real);
    let mut any = false;
    for name in [".git/info/exclude", ".gitignore", ".ignore"] {
        let Some((mut file, meta)) = open_entry(dir, Path::new(name)) else {
            continue;
        };
        if meta.len() > MAX_IGNORE_FILE_BYTES {
            continue;
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            continue;
        }
        for line in text.lines() {
            // A malformed line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        any = true;
    }
    if !any {
        return None;
    }
    builder.build().ok()
}

/// Whether the rules (outermost first) ignore `path`: the innermost rule
/// that matches decides.
fn ignored(rules: &[Gitignore], path: &Path, is_dir: bool) -> bool {
    for r in rules.iter().rev() {
        let m = r.matched(path, is_dir);
        if m.is_ignore() {
            return true;
        }
        if m.is_whitelist() {
            return false;
        }
    }
    false
}

/// One directory being walked.
struct Frame {
    dir: Dir,
    real: PathBuf,
    /// How many ignore rules (of the walk's stack) belong to this frame.
    own_rules: usize,
    /// The entries still to visit, in name order, reversed (popped from the end).
    pending: Vec<(OsString, bool)>,
}

impl Frame {
    fn open(dir: Dir, real: PathBuf, rules: &mut Vec<Gitignore>) -> Frame {
        let mut pending: Vec<(OsString, bool)> = Vec::new();
        if let Ok(entries) = dir.entries() {
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                // Symlinks are neither files nor directories here: skipped.
                if kind.is_dir() || kind.is_file() {
                    pending.push((entry.file_name(), kind.is_dir()));
                }
            }
        }
        pending.sort_by(|a, b| b.0.cmp(&a.0));
        let own_rules = match ignore_rules(&dir, &real) {
            Some(r) => {
                rules.push(r);
                1
            }
            None => 0,
        };
        Frame {
            dir,
            real,
            own_rules,
            pending,
        }
    }
}

/// Searches file contents (regex) or file names (glob).
#[derive(Debug)]
pub struct SearchFilesTool {
    spec: ToolSpec,
    workdir: Workdir,
    cap: usize,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Target {
    Content,
    Files,
}

#[derive(Deserialize)]
pub(super) struct SearchArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default = "default_target")]
    target: Target,
    #[serde(default)]
    file_glob: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

fn default_target() -> Target {
    Target::Content
}

impl SearchFilesTool {
    pub(crate) fn new(workdir: Workdir, cap: usize) -> Self {
        SearchFilesTool {
            spec: bounded_spec(
                "search_files",
                "Search below a directory. target 'content' (default): regex search of text \
                 files, results as 'path:line: text'. target 'files': glob match on file names \
                 (e.g. '*.rs'; a pattern with '/' matches the relative path). Honours .gitignore \
                 and skips hidden files.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "description": "Regex (content) or glob (files)."},
                        "path": {"type": "string", "description": "Directory (or file) to search. Default: the working directory."},
                        "target": {"type": "string", "enum": ["content", "files"], "description": "What to search. Default 'content'."},
                        "file_glob": {"type": "string", "description": "Only search files whose name matches this glob (content search), e.g. '*.py'."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Maximum results. Default 100."}
                    },
                    "required": ["pattern"]
                }"#,
                ),
                &[("limit", "maximum", MAX_LIMIT as u64)],
            ),
            workdir,
            cap,
        }
    }
}

fn glob(field: &str, pattern: &str) -> Result<GlobMatcher, ToolError> {
    Glob::new(pattern)
        .map(|g| g.compile_matcher())
        .map_err(|e| failed(format!("Error: '{field}' is not a valid glob: {e}")))
}

impl Tool for SearchFilesTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: SearchArgs = parse_args("search_files", arguments)?;
        if args.pattern.is_empty() {
            return Err(failed("Error: 'pattern' is empty."));
        }
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 || limit > MAX_LIMIT {
            return Err(failed(format!(
                "Error: 'limit' must be between 1 and {MAX_LIMIT}."
            )));
        }
        let regex = match args.target {
            Target::Content => Some(Regex::new(&args.pattern).map_err(|e| {
                failed(format!(
                    "Error: 'pattern' is not a valid regular expression: {e}"
                ))
            })?),
            Target::Files => None,
        };
        let name_glob = match args.target {
            Target::Files => Some(glob("pattern", &args.pattern)?),
            Target::Content => None,
        };
        let match_path = args.pattern.contains('/');
        let file_glob = args
            .file_glob
            .as_deref()
            .map(|g| glob("file_glob", g))
            .transpose()?;

        let path_arg = args.path.as_deref().unwrap_or(".");
        let mut lines: Vec<String> = Vec::new();
        let mut more = 0usize;
        let mut skipped_binary = 0usize;
        let mut too_deep = 0usize;
        let search_file = |file: std::fs::File,
                           shown: &str,
                           name: &std::ffi::OsStr,
                           lines: &mut Vec<String>,
                           more: &mut usize,
                           skipped_binary: &mut usize| {
            if let Some(g) = &name_glob {
                let hit = if match_path {
                    g.is_match(shown)
                } else {
                    g.is_match(name)
                };
                if hit {
                    if lines.len() < limit {
                        lines.push(shown.to_owned());
                    } else {
                        *more += 1;
                    }
                }
                return;
            }
            let Some(re) = &regex else { return };
            if file_glob.as_ref().is_some_and(|g| !g.is_match(name)) {
                return;
            }
            let mut reader = BufReader::new(file);
            match reader.fill_buf() {
                Ok(head) if looks_binary(&head[..head.len().min(8192)]) => {
                    *skipped_binary += 1;
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
            let mut buf = Vec::new();
            let mut n = 0usize;
            while let Ok(Some(_)) =
                read_line_bounded(&mut reader, &mut buf, MAX_SEARCHED_LINE_BYTES)
            {
                n += 1;
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches('\r');
                if re.is_match(line) {
                    if lines.len() < limit {
                        let cut = floor_char_boundary(line, MAX_MATCH_LINE_BYTES);
                        let ell = if cut < line.len() { "…" } else { "" };
                        lines.push(format!("{shown}:{n}: {}{ell}", &line[..cut]));
                    } else {
                        *more += 1;
                    }
                }
            }
        };

        // The base may be a directory that holds refused files (the working
        // directory containing $HERMES_HOME, or the home itself): the walk
        // skips them one by one. A file given directly is checked now.
        let base = match self.workdir.open_dir(path_arg) {
            Ok(base) => base,
            Err(dir_err) => {
                let Ok(opened) = self.workdir.open_file(path_arg, Access::Read) else {
                    // Report the refusal or failure of the more specific open.
                    return Err(match self.workdir.open_file(path_arg, Access::Read) {
                        Err(e) if !e.to_string().contains("Not a directory") => e,
                        _ => dir_err,
                    });
                };
                let shown = self.workdir.display(&opened.real);
                let name = opened.real.file_name().unwrap_or_default().to_os_string();
                if opened.meta.is_file() && opened.meta.len() <= MAX_CONTENT_FILE_BYTES {
                    search_file(
                        opened.file,
                        &shown,
                        &name,
                        &mut lines,
                        &mut more,
                        &mut skipped_binary,
                    );
                }
                return Ok(render(
                    &args,
                    &shown,
                    lines,
                    more,
                    skipped_binary,
                    0,
                    self.cap,
                ));
            }
        };
        let base_shown = self.workdir.display(&base.real);

        // Ignore rules from the working directory down to the base.
        let mut rules: Vec<Gitignore> = Vec::new();
        if let Ok(below) = base.real.strip_prefix(self.workdir.root()) {
            let mut real = self.workdir.root().to_path_buf();
            let mut rel = PathBuf::new();
            let mut parts = below.components().peekable();
            while parts.peek().is_some() {
                if let Ok(dir) = self.workdir.open_dir_beneath(&rel)
                    && let Some(r) = ignore_rules(&dir, &real)
                {
                    rules.push(r);
                }
                if let Some(part) = parts.next() {
                    rel.push(part);
                    real.push(part);
                }
            }
        }

        let mut stack = vec![Frame::open(base.dir, base.real, &mut rules)];
        while let Some(depth) = stack.len().checked_sub(1) {
            let top = &mut stack[depth];
            if ctx.interrupt.is_set() {
                lines.push("[search interrupted]".into());
                break;
            }
            let Some((name, is_dir)) = top.pending.pop() else {
                if let Some(done) = stack.pop() {
                    rules.truncate(rules.len() - done.own_rules);
                }
                continue;
            };
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let real = top.real.join(&name);
            if ignored(&rules, &real, is_dir) {
                continue;
            }
            if is_dir {
                if depth + 1 >= MAX_DEPTH {
                    too_deep += 1;
                    continue;
                }
                if let Ok(dir) = top.dir.open_dir_nofollow(&name) {
                    let frame = Frame::open(dir, real, &mut rules);
                    stack.push(frame);
                }
                continue;
            }
            if !self.workdir.allows(&real, Access::Read) {
                continue;
            }
            let Some((file, meta)) = open_entry(&top.dir, Path::new(&name)) else {
                continue;
            };
            if regex.is_some()
                && (meta.len() > MAX_CONTENT_FILE_BYTES || self.workdir.is_home_secret(&meta))
            {
                continue;
            }
            let shown = self.workdir.display(&real);
            search_file(
                file,
                &shown,
                &name,
                &mut lines,
                &mut more,
                &mut skipped_binary,
            );
        }
        Ok(render(
            &args,
            &base_shown,
            lines,
            more,
            skipped_binary,
            too_deep,
            self.cap,
        ))
    }
}

/// The tool's answer from what the walk found.
fn render(
    args: &SearchArgs,
    base_shown: &str,
    lines: Vec<String>,
    more: usize,
    skipped_binary: usize,
    too_deep: usize,
    cap: usize,
) -> String {
    let what = if args.target == Target::Files {
        "files"
    } else {
        "matches"
    };
    let deep_note = if too_deep > 0 {
        format!(
            "[{too_deep} directories more than {MAX_DEPTH} levels deep were not searched; \
             search below them with 'path']\n"
        )
    } else {
        String::new()
    };
    if lines.is_empty() {
        let mut msg = format!("No {what} for '{}' under '{base_shown}'.", args.pattern);
        if skipped_binary > 0 {
            msg.push_str(&format!(" ({skipped_binary} binary files skipped.)"));
        }
        if too_deep > 0 {
            msg.push('\n');
            msg.push_str(deep_note.trim_end());
        }
        return msg;
    }
    let mut out = lines.join("\n");
    out.push('\n');
    if more > 0 {
        out.push_str(&format!(
            "[{more} more {what} not shown; narrow the pattern or path, or raise limit]\n"
        ));
    }
    out.push_str(&deep_note);
    cap_result(out, cap, "narrow the pattern or path, or lower limit")
}
