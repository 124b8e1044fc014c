//! `read_file`, `write_file` and `patch`: the file tools, confined to the
//! working directory.

use std::io::{BufRead, BufReader, Read};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::workdir::io_error;
use super::{Access, Workdir, failed, parse_args, spec};
use crate::spill::cap_result;
use crate::text::floor_char_boundary;

/// Lines returned when the model gives no `limit`.
const DEFAULT_READ_LIMIT: usize = 2000;
/// A longer line is cut: minified files would otherwise fill the result.
const MAX_LINE_CHARS: usize = 2000;
/// How much of a file's start is inspected for NUL bytes.
const BINARY_SNIFF_BYTES: usize = 8192;

/// Whether `head` (a file's first bytes) looks like a binary file.
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

/// Reads one line (through `\n`) from `reader`, keeping at most `max` bytes
/// of it in `buf` (without the `\n`) and discarding the rest, so one
/// enormous line (a minified bundle, a data dump) cannot exhaust memory.
/// Returns the line's full length in bytes without the `\n`, or `None` at
/// end of file.
pub(crate) fn read_line_bounded<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<usize>> {
    buf.clear();
    let mut total = 0usize;
    let mut seen_any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(seen_any.then_some(total));
        }
        let (content, consumed, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&content[..content.len().min(room)]);
        total += content.len();
        seen_any = true;
        reader.consume(consumed);
        if done {
            return Ok(Some(total));
        }
    }
}

fn not_regular(shown: &str) -> ToolError {
    failed(format!(
        "Error: '{shown}' is not a regular file (a device, FIFO or socket); the file tools only \
         handle regular files."
    ))
}

/// Reads a text file as numbered lines.
#[derive(Debug)]
pub struct ReadFileTool {
    spec: ToolSpec,
    workdir: Workdir,
    cap: usize,
    /// Reads scanned PDF pages when configured (issue 46).
    #[cfg_attr(not(feature = "documents"), allow(dead_code))]
    vision: Option<super::VisionSource>,
}

#[derive(Deserialize)]
pub(super) struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

const READ_FILE_DESCRIPTION: &str = if cfg!(feature = "documents") {
    "Read a text file. Returns numbered lines ('  12|text'). Use offset (1-based line) and limit \
     (number of lines, default 2000) to page through large files. Also reads PDF (offset/limit \
     = pages), .docx, .odt, .xlsx."
} else {
    "Read a text file. Returns numbered lines ('  12|text'). Use offset (1-based line) and limit \
     (number of lines, default 2000) to page through large files."
};

impl ReadFileTool {
    /// Scanned PDF pages go to `vision` (issue 46).
    pub(crate) fn with_vision(mut self, vision: Option<super::VisionSource>) -> Self {
        self.vision = vision;
        self
    }

    pub(crate) fn new(workdir: Workdir, cap: usize) -> Self {
        ReadFileTool {
            spec: spec(
                "read_file",
                READ_FILE_DESCRIPTION,
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path, relative to the working directory."},
                        "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based). Default 1."},
                        "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines. Default 2000."}
                    },
                    "required": ["path"]
                }"#,
                ),
            ),
            workdir,
            cap,
            vision: None,
        }
    }
}

impl Tool for ReadFileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        #[cfg(not(feature = "documents"))]
        let _ = ctx;
        let args: ReadArgs = parse_args("read_file", arguments)?;
        let offset = args.offset.unwrap_or(1);
        if offset == 0 {
            return Err(failed(
                "Error: 'offset' is 1-based; use 1 for the first line.",
            ));
        }
        let limit = args.limit.unwrap_or(DEFAULT_READ_LIMIT);
        if limit == 0 {
            return Err(failed("Error: 'limit' must be at least 1."));
        }
        let opened = self.workdir.open_file(&args.path, Access::Read)?;
        let shown = self.workdir.display(&opened.real);
        if opened.meta.is_dir() {
            return Err(failed(format!(
                "Error: '{shown}' is a directory, not a file. Use search_files with target 'files' to list it."
            )));
        }
        if !opened.meta.is_file() {
            return Err(not_regular(&shown));
        }
        let size = opened.meta.len();
        let mut reader = BufReader::new(opened.file);

        let head = reader
            .fill_buf()
            .map_err(|e| io_error("read", &shown, &e))?;
        #[cfg(feature = "documents")]
        if let Some(kind) = crate::documents::Kind::detect(&shown, head) {
            let scans = self
                .vision
                .as_ref()
                .map(|v| super::scan::Scans { vision: v, ctx });
            return read_document(kind, reader, size, &shown, &args, self.cap, scans);
        }
        let sniff = &head[..head.len().min(BINARY_SNIFF_BYTES)];
        if looks_binary(sniff) {
            return Err(failed(format!(
                "Error: '{shown}' is a binary file ({size} bytes); read_file only returns text. \
                 Use the terminal (e.g. `file`, `xxd | head`) to inspect it."
            )));
        }

        let mut out = String::new();
        let mut total = 0usize;
        let mut last_shown = 0usize;
        let mut buf = Vec::new();
        while let Some(full_len) = read_line_bounded(&mut reader, &mut buf, MAX_LINE_CHARS * 4)
            .map_err(|e| io_error("read", &shown, &e))?
        {
            total += 1;
            // Both numbers come from the model: `offset + limit` may not fit.
            if total < offset || total >= offset.saturating_add(limit) {
                continue;
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            let cut = floor_char_boundary(line, MAX_LINE_CHARS);
            if cut < line.len() || full_len > buf.len() {
                // Lossy decoding may change byte counts slightly; the exact
                // figure matters less than saying that something was cut.
                out.push_str(&format!(
                    "{total:>6}|{}… [line cut: {} more bytes]\n",
                    &line[..cut],
                    full_len.saturating_sub(cut)
                ));
            } else {
                out.push_str(&format!("{total:>6}|{line}\n"));
            }
            last_shown = total;
        }

        if total == 0 {
            return Ok(format!("('{shown}' is empty)"));
        }
        if offset > total {
            return Err(failed(format!(
                "Error: offset {offset} is past the end of '{shown}', which has {total} lines."
            )));
        }
        if last_shown < total {
            out.push_str(&format!(
                "[showing lines {offset}-{last_shown} of {total}; use offset={} to read more]\n",
                last_shown + 1
            ));
        }
        Ok(cap_result(
            out,
            self.cap,
            "use offset/limit to read a smaller range",
        ))
    }
}

/// The text of a PDF or Office document (issue 46): `offset` and `limit`
/// count PDF pages here, not lines.
#[cfg(feature = "documents")]
fn read_document(
    kind: crate::documents::Kind,
    reader: impl Read,
    size: u64,
    shown: &str,
    args: &ReadArgs,
    cap: usize,
    scans: Option<super::scan::Scans<'_>>,
) -> Result<String, ToolError> {
    use crate::documents::{DEFAULT_PAGES, MAX_DOCUMENT_BYTES, Pages, extract};
    let refused = |why: &dyn std::fmt::Display| {
        failed(format!("Error: cannot read the text of '{shown}': {why}."))
    };
    if size > MAX_DOCUMENT_BYTES {
        return Err(refused(&crate::documents::DocumentError::TooLarge {
            size,
            max: MAX_DOCUMENT_BYTES,
        }));
    }
    let mut bytes = Vec::new();
    reader
        .take(MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", shown, &e))?;
    let pages = Pages {
        first: args.offset.unwrap_or(1),
        count: args.limit.unwrap_or(DEFAULT_PAGES),
    };
    let doc = match (extract(kind, &bytes, pages), scans) {
        (Err(e @ crate::documents::DocumentError::NoText { .. }), Some(scans)) => {
            let text = scans
                .transcribe(&bytes, pages, &e)
                .map_err(|why| refused(&why))?;
            return Ok(cap_result(
                text,
                cap,
                "use offset/limit (pages) to read a smaller range",
            ));
        }
        (result, _) => result.map_err(|e| refused(&e))?,
    };
    let mut out = doc.text;
    if let Some(next) = doc.next_page {
        out.push_str(&format!("[use offset={next} to read the next pages]\n"));
    }
    Ok(cap_result(
        out,
        cap,
        "use offset/limit (pages) to read a smaller range",
    ))
}

/// Writes a whole file, creating parent directories.
#[derive(Debug)]
pub struct WriteFileTool {
    spec: ToolSpec,
    workdir: Workdir,
}

#[derive(Deserialize)]
pub(super) struct WriteArgs {
    path: String,
    content: String,
}

impl WriteFileTool {
    pub(crate) fn new(workdir: Workdir) -> Self {
        WriteFileTool {
            spec: spec(
                "write_file",
                "Write a file with the given content, replacing it if it exists and creating \
                 parent directories as needed. For small edits to an existing file prefer patch.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path, relative to the working directory."},
                        "content": {"type": "string", "description": "The complete new content of the file."}
                    },
                    "required": ["path", "content"]
                }"#,
                ),
            ),
            workdir,
        }
    }
}

impl Tool for WriteFileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: WriteArgs = parse_args("write_file", arguments)?;
        let written = self
            .workdir
            .write_file(&args.path, args.content.as_bytes())?;
        let shown = self.workdir.display(&written.real);
        let existed = written.existed;
        let lines = args.content.lines().count();
        Ok(format!(
            "{} '{shown}': wrote {} bytes ({lines} lines).",
            if existed { "Replaced" } else { "Created" },
            args.content.len()
        ))
    }
}

/// Exact string replacement in a file.
#[derive(Debug)]
pub struct PatchTool {
    spec: ToolSpec,
    workdir: Workdir,
}

#[derive(Deserialize)]
pub(super) struct PatchArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl PatchTool {
    pub(crate) fn new(workdir: Workdir) -> Self {
        PatchTool {
            spec: spec(
                "patch",
                "Edit a file by exact string replacement: old_string must match the file exactly \
                 (including whitespace and indentation) and be unique unless replace_all is true.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path, relative to the working directory."},
                        "old_string": {"type": "string", "description": "The exact text to replace."},
                        "new_string": {"type": "string", "description": "The replacement text."},
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence. Default false."}
                    },
                    "required": ["path", "old_string", "new_string"]
                }"#,
                ),
            ),
            workdir,
        }
    }
}

/// 1-based line number of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].bytes().filter(|b| *b == b'\n').count() + 1
}

/// A hint for an `old_string` that does not occur: where something close is.
fn nearest_hint(text: &str, old: &str) -> String {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let wanted = squash(old);
    if !wanted.is_empty() && squash(text).contains(&wanted) {
        // Locate the first line of old_string, whitespace-insensitively.
        let first = old
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        if let Some((n, _)) = text
            .lines()
            .enumerate()
            .find(|(_, l)| squash(l).contains(&squash(first)))
        {
            return format!(
                " The text does occur if whitespace is ignored (near line {}): check indentation, tabs vs spaces and line endings; read_file the lines and copy them exactly.",
                n + 1
            );
        }
        return " The text does occur if whitespace is ignored: check indentation and line endings.".into();
    }
    let first = old
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if first.is_empty() {
        return String::new();
    }
    // The line sharing the longest prefix with old_string's first line.
    let mut best: Option<(usize, usize, &str)> = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        let common = t
            .chars()
            .zip(first.chars())
            .take_while(|(a, b)| a == b)
            .count();
        let score = if t.contains(first) {
            usize::MAX
        } else {
            common
        };
        if score >= 4 && best.is_none_or(|(s, _, _)| score > s) {
            best = Some((score, n + 1, line));
        }
    }
    match best {
        Some((_, n, line)) => {
            let cut = floor_char_boundary(line, 200);
            format!(
                " Nearest line: {n}: {}. Read the file around it and copy the text exactly.",
                &line[..cut]
            )
        }
        None => " Read the file first and copy the text exactly.".into(),
    }
}

impl Tool for PatchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: PatchArgs = parse_args("patch", arguments)?;
        if args.old_string.is_empty() {
            return Err(failed(
                "Error: 'old_string' is empty. To create or overwrite a whole file use write_file.",
            ));
        }
        if args.old_string == args.new_string {
            return Err(failed(
                "Error: 'old_string' and 'new_string' are identical; nothing to change.",
            ));
        }
        let opened = self.workdir.open_file(&args.path, Access::Write)?;
        let shown = self.workdir.display(&opened.real);
        if opened.meta.is_dir() {
            return Err(failed(format!(
                "Error: '{shown}' is a directory; patch edits a file."
            )));
        }
        if !opened.meta.is_file() {
            return Err(not_regular(&shown));
        }
        let mut bytes = Vec::new();
        let mut file = opened.file;
        file.read_to_end(&mut bytes)
            .map_err(|e| io_error("read", &shown, &e))?;
        if looks_binary(&bytes[..bytes.len().min(BINARY_SNIFF_BYTES)]) {
            return Err(failed(format!(
                "Error: '{shown}' is a binary file; patch only edits text."
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            failed(format!(
                "Error: '{shown}' is not valid UTF-8; patch only edits UTF-8 text."
            ))
        })?;
        let positions: Vec<usize> = text
            .match_indices(&args.old_string)
            .map(|(i, _)| i)
            .collect();
        match positions.len() {
            0 => Err(failed(format!(
                "Error: old_string was not found in '{shown}'.{}",
                nearest_hint(&text, &args.old_string)
            ))),
            n if n > 1 && !args.replace_all => {
                let lines: Vec<String> = positions
                    .iter()
                    .take(10)
                    .map(|p| line_of(&text, *p).to_string())
                    .collect();
                Err(failed(format!(
                    "Error: old_string occurs {n} times in '{shown}' (at lines {}{}). Include more \
                     surrounding text to make it unique, or set replace_all to true.",
                    lines.join(", "),
                    if n > 10 { ", …" } else { "" }
                )))
            }
            n => {
                let first_line = line_of(&text, positions[0]);
                let new_text = if args.replace_all {
                    text.replace(&args.old_string, &args.new_string)
                } else {
                    text.replacen(&args.old_string, &args.new_string, 1)
                };
                // Written back where the file really is (a symlink was
                // followed when it was opened).
                self.workdir
                    .write_real(&opened.real, &shown, new_text.as_bytes())?;
                Ok(format!(
                    "Patched '{shown}': replaced {n} occurrence{} (first at line {first_line}).",
                    if n == 1 { "" } else { "s" }
                ))
            }
        }
    }
}
