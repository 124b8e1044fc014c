//! `search_files`: regex search over file contents, or glob search over file
//! names, below a directory inside the working directory.
//!
//! The walk uses `ignore` (ripgrep's walker): `.gitignore`/`.ignore` rules are
//! honoured (also outside a git repository) and hidden files are skipped, so
//! `target/`, `node_modules/` and `.git/` do not drown the results. Entries
//! are visited in name order, so the same tree gives the same output.

use std::io::{BufRead, BufReader};

use globset::{Glob, GlobMatcher};
use hermes_core::{Tool, ToolContext, ToolError, ToolSpec};
use ignore::WalkBuilder;
use regex::Regex;
use serde::Deserialize;
use serde_json::json;

use super::fs::{looks_binary, read_line_bounded};
use super::{Access, Sandbox, cap_result, failed, floor_char_boundary, parse_args};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Files larger than this are not searched for content (logs, data dumps).
const MAX_CONTENT_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// A matching line is shown up to this many bytes.
const MAX_MATCH_LINE_BYTES: usize = 300;
/// Only this much of each line is searched (bounds memory on huge lines).
const MAX_SEARCHED_LINE_BYTES: usize = 64 * 1024;

/// Searches file contents (regex) or file names (glob).
#[derive(Debug)]
pub struct SearchFilesTool {
    spec: ToolSpec,
    sandbox: Sandbox,
    cap: usize,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Target {
    Content,
    Files,
}

#[derive(Deserialize)]
struct SearchArgs {
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
    pub(crate) fn new(sandbox: Sandbox, cap: usize) -> Self {
        SearchFilesTool {
            spec: ToolSpec::new(
                "search_files",
                "Search below a directory. target 'content' (default): regex search of text \
                 files, results as 'path:line: text'. target 'files': glob match on file names \
                 (e.g. '*.rs'; a pattern with '/' matches the relative path). Honours .gitignore \
                 and skips hidden files.",
                json!({
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "description": "Regex (content) or glob (files)."},
                        "path": {"type": "string", "description": "Directory (or file) to search. Default: the working directory."},
                        "target": {"type": "string", "enum": ["content", "files"], "description": "What to search. Default 'content'."},
                        "file_glob": {"type": "string", "description": "Only search files whose name matches this glob (content search), e.g. '*.py'."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "Maximum results. Default 100."}
                    },
                    "required": ["pattern"]
                }),
            ),
            sandbox,
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
        // The base may be a directory that holds refused files (the working
        // directory containing $HERMES_HOME, or the home itself): the walk
        // below skips them one by one. A file given directly is checked now.
        let base = self.sandbox.resolve(args.path.as_deref().unwrap_or("."))?;
        if !base.is_dir() {
            self.sandbox
                .resolve_for(args.path.as_deref().unwrap_or("."), Access::Read)?;
        }
        if !base.exists() {
            return Err(failed(format!(
                "Error: search path '{}' does not exist.",
                self.sandbox.display(&base)
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

        let walker = WalkBuilder::new(&base)
            .require_git(false)
            .sort_by_file_name(|a, b| a.cmp(b))
            .build();

        let mut lines: Vec<String> = Vec::new();
        let mut more = 0usize;
        let mut skipped_binary = 0usize;
        for entry in walker {
            if ctx.interrupt.is_set() {
                lines.push("[search interrupted]".into());
                break;
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            // Entries are below the canonical base and symlinks are not
            // followed, so the path needs no further resolving.
            if !self.sandbox.allows(path, Access::Read) {
                continue;
            }
            let shown = self.sandbox.display(path);
            let name = entry.file_name();
            if let Some(g) = &name_glob {
                let hit = if match_path {
                    g.is_match(&shown)
                } else {
                    g.is_match(name)
                };
                if hit {
                    if lines.len() < limit {
                        lines.push(shown);
                    } else {
                        more += 1;
                    }
                }
                continue;
            }
            let Some(re) = &regex else { continue };
            if file_glob.as_ref().is_some_and(|g| !g.is_match(name)) {
                continue;
            }
            if entry
                .metadata()
                .is_ok_and(|m| m.len() > MAX_CONTENT_FILE_BYTES)
            {
                continue;
            }
            let Ok(file) = std::fs::File::open(path) else {
                continue;
            };
            let mut reader = BufReader::new(file);
            match reader.fill_buf() {
                Ok(head) if looks_binary(&head[..head.len().min(8192)]) => {
                    skipped_binary += 1;
                    continue;
                }
                Ok(_) => {}
                Err(_) => continue,
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
                        more += 1;
                    }
                }
            }
        }

        let what = if args.target == Target::Files {
            "files"
        } else {
            "matches"
        };
        if lines.is_empty() {
            let mut msg = format!(
                "No {what} for '{}' under '{}'.",
                args.pattern,
                self.sandbox.display(&base)
            );
            if skipped_binary > 0 {
                msg.push_str(&format!(" ({skipped_binary} binary files skipped.)"));
            }
            return Ok(msg);
        }
        let mut out = lines.join("\n");
        out.push('\n');
        if more > 0 {
            out.push_str(&format!(
                "[{more} more {what} not shown; narrow the pattern or path, or raise limit]\n"
            ));
        }
        Ok(cap_result(
            out,
            self.cap,
            "narrow the pattern or path, or lower limit",
        ))
    }
}
