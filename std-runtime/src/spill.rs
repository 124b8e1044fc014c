//! Huge tool outputs (SPEC Y6): cut to a tool's cap with a visible marker
//! ([`cap_result`]), and kept whole on disk: the model gets the head and
//! the tail, and the path of a file with everything, which `read_file` may
//! read in ranges (the one read-only allowance in `$HERMES_HOME`, see the
//! file tools' `workdir`). Below the tools and MCP, which both cap their
//! results here.
//!
//! The files live in `$HERMES_HOME/tool-output/<session id>/` (a registry
//! built before its session exists gets a fresh scope of its own instead),
//! directories 0700 and files 0600: they may hold whatever a command
//! printed. `read_file` may read only the folder of its own session there.
//!
//! Three writers: the terminal streams a long output here while it runs
//! (it never holds more than the head and the tail); a tool's own result
//! cap ([`cap_result`]) keeps the whole result here when the call
//! runs under [`Keeping`] (every tool of a registry with a folder does);
//! and [`DiskKeeper`] is the registry's [`OutputKeeper`]: any result over
//! the loop's cap (set by the context window) is written here whole before
//! the loop cuts it.

use std::cell::Cell;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hermes_core::{KeptOutput, OutputKeeper, Tool, ToolContext, ToolError, ToolSpec};

use crate::text::{ceil_char_boundary, floor_char_boundary};

/// The directory under `$HERMES_HOME` that holds kept outputs.
pub const TOOL_OUTPUT_DIR: &str = "tool-output";

/// A fresh scope directory for one registry's outputs (not created until
/// something is written there).
pub(crate) fn scope_dir(home: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    home.join(TOOL_OUTPUT_DIR).join(format!(
        "{ms}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The folder of session `session_id`'s kept outputs. An id that is not a
/// plain file name (the store's ids are `YYYYMMDD_HHMMSS_xxxxxx`) is
/// spelled with its unsafe characters replaced, so it can never leave
/// `tool-output/`.
pub fn session_dir(home: &Path, session_id: &str) -> PathBuf {
    let safe: String = session_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = if safe.is_empty() {
        "_".to_owned()
    } else {
        safe
    };
    home.join(TOOL_OUTPUT_DIR).join(safe)
}

/// A file path for one output in `dir`.
pub(crate) fn output_path(dir: &Path, tool: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    dir.join(format!(
        "{tool}-{ms}-{}.txt",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// One output being written out. Opened only once the output passes the
/// cap; a failure to write leaves the output cut as before, never lost
/// silently (the note then says nothing was kept).
#[derive(Debug)]
pub(crate) struct Spill {
    path: PathBuf,
    file: Option<File>,
    failed: bool,
    bytes: u64,
    lines: u64,
}

impl Spill {
    pub(crate) fn new(path: PathBuf) -> Self {
        Spill {
            path,
            file: None,
            failed: false,
            bytes: 0,
            lines: 0,
        }
    }

    /// Whether the file is open (the output passed the cap).
    pub(crate) fn started(&self) -> bool {
        self.file.is_some() || self.failed
    }

    /// Opens the file (and its directories).
    pub(crate) fn start(&mut self) {
        let opened = (|| {
            if let Some(dir) = self.path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&self.path)
        })();
        match opened {
            Ok(f) => self.file = Some(f),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot keep a long tool output");
                self.failed = true;
            }
        }
    }

    /// Appends `bytes`.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        let Some(f) = &mut self.file else { return };
        if f.write_all(bytes).is_err() {
            self.file = None;
            self.failed = true;
            return;
        }
        self.bytes += bytes.len() as u64;
        self.lines += bytes.iter().filter(|b| **b == b'\n').count() as u64;
    }

    /// The sentence that replaces the cut middle: where everything is,
    /// when it was all kept.
    pub(crate) fn note(&self, omitted: u64) -> Option<String> {
        if self.failed || self.file.is_none() {
            return None;
        }
        Some(format!(
            "[output truncated: {omitted} bytes omitted from the middle. The whole output \
             ({} bytes, {} lines) is saved in {}: read any part of it with read_file \
             (offset = first line, limit = number of lines).]",
            self.bytes,
            self.lines,
            self.path.display()
        ))
    }
}

/// The registry's [`OutputKeeper`]: writes a result over the loop's cap to
/// a new file in the session's folder and names that file.
#[derive(Debug)]
pub(crate) struct DiskKeeper {
    pub(crate) dir: PathBuf,
}

impl OutputKeeper for DiskKeeper {
    fn keep(&self, tool: &str, output: &str) -> Option<KeptOutput> {
        if let Some(earlier) = self.already_kept(output) {
            return Some(earlier);
        }
        let mut spill = Spill::new(output_path(&self.dir, tool));
        spill.start();
        spill.write(output.as_bytes());
        spill.note(0)?;
        Some(KeptOutput {
            place: spill.path.display().to_string(),
            bytes: spill.bytes,
            lines: spill.lines,
        })
    }
}

impl DiskKeeper {
    /// The file `output` says it is a cut of, when that is a file of this
    /// folder of the size the note states: the terminal (or a tool's own
    /// cap) kept the whole output already, and the loop's cut must name
    /// that file rather than keep the cut.
    fn already_kept(&self, output: &str) -> Option<KeptOutput> {
        const SIZE: &str = "The whole output (";
        let at = output.rfind(SIZE)? + SIZE.len();
        let rest = &output[at..];
        let (bytes, rest) = rest.split_once(" bytes, ")?;
        let (lines, rest) = rest.split_once(" lines) is saved in ")?;
        let (place, _) = rest.split_once(": read any part of it with read_file")?;
        let bytes: u64 = bytes.parse().ok()?;
        let lines: u64 = lines.parse().ok()?;
        let path = Path::new(place);
        let meta = std::fs::metadata(path).ok()?;
        (path.parent() == Some(self.dir.as_path()) && meta.len() == bytes).then(|| KeptOutput {
            place: place.to_owned(),
            bytes,
            lines,
        })
    }
}

thread_local! {
    /// The [`Keeping`] whose call runs on this thread (null: none), for
    /// [`keep_for_current_call`]. A raw pointer, not an owned copy of its
    /// folder and name: a thread-local that needs dropping makes std
    /// register a destructor on first use, whose list comes from the C
    /// library's `malloc` — the one `malloc` of a one-shot with tool
    /// turns (issue 39) — and the copies were two more blocks a call.
    static CALL_KEEPER: Cell<*const Keeping> = const { Cell::new(std::ptr::null()) };
}

/// Restores the previous call's keeper (a sub-agent's tools run inside
/// `delegate_task`'s call) when a call ends, even by a panic.
struct Restore(*const Keeping);

impl Drop for Restore {
    fn drop(&mut self) {
        CALL_KEEPER.set(self.0);
    }
}

/// A tool whose result, when its own cap cuts it, is kept whole in `dir`
/// first ([`keep_for_current_call`]).
pub(crate) struct Keeping {
    pub(crate) inner: Box<dyn Tool>,
    pub(crate) dir: PathBuf,
}

impl Tool for Keeping {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let _restore = Restore(CALL_KEEPER.replace(self));
        self.inner.call(arguments, ctx)
    }
}

/// Keeps `text` whole for the call running on this thread, if it runs
/// under [`Keeping`]; says where.
pub(crate) fn keep_for_current_call(text: &str) -> Option<KeptOutput> {
    // SAFETY: the pointer is not null only while `Keeping::call` runs on
    // this thread: that call borrows its `Keeping` until it returns, and
    // its `Restore` puts the previous value back when it ends, by a return
    // or a panic. A call nested in it (a sub-agent's tool) restores the
    // outer one's pointer the same way.
    let keeping = unsafe { CALL_KEEPER.get().as_ref() }?;
    DiskKeeper {
        dir: keeping.dir.clone(),
    }
    .keep(&keeping.inner.spec().name, text)
}

/// Cuts `text` to at most `cap` bytes (marker included) on a char boundary,
/// appending a visible marker that says how many bytes were left out and
/// `hint` (how to read the rest). When the call runs under a keeper (a
/// registry with a `tool_output_dir`, SPEC Y6), the whole text is kept
/// there first and the result is its head, where it is, and its tail.
pub fn cap_result(text: String, cap: usize, hint: &str) -> String {
    if text.len() <= cap {
        return text;
    }
    if let Some(kept) = keep_for_current_call(&text) {
        return head_and_tail(&text, cap, &kept);
    }
    // The marker's own length depends on the number it prints; reserve room
    // for the longest possible number.
    let marker_room = format!("…\n[output truncated: {} more bytes; {hint}]", text.len()).len();
    let keep = floor_char_boundary(&text, cap.saturating_sub(marker_room));
    let omitted = text.len() - keep;
    let mut out = String::with_capacity(cap);
    out.push_str(&text[..keep]);
    out.push_str(&format!(
        "…\n[output truncated: {omitted} more bytes; {hint}]"
    ));
    out
}

/// `text`'s head (two thirds) and tail within about `cap` bytes, with the
/// line that says where all of it is kept.
fn head_and_tail(text: &str, cap: usize, kept: &KeptOutput) -> String {
    let note = |omitted: usize| {
        format!(
            "\n[output truncated: {omitted} bytes omitted from the middle. The whole output ({} \
             bytes, {} lines) is saved in {}: read any part of it with read_file \
             (offset = first line, limit = number of lines).]\n",
            kept.bytes, kept.lines, kept.place
        )
    };
    let room = cap.saturating_sub(note(text.len()).len());
    let head = floor_char_boundary(text, room * 2 / 3);
    let tail = ceil_char_boundary(text, text.len().saturating_sub(room / 3).max(head));
    let mut out = String::with_capacity(cap);
    out.push_str(&text[..head]);
    out.push_str(&note(tail - head));
    out.push_str(&text[tail..]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use hermes_core::{InterruptFlag, IterationBudget};

    /// Keeps a text for the current call before and after running the
    /// tool it wraps, and answers where each went.
    struct Probe {
        spec: ToolSpec,
        nested: Option<Keeping>,
        panics: bool,
    }

    fn probe(name: &str, nested: Option<Keeping>, panics: bool) -> Box<dyn Tool> {
        Box::new(Probe {
            spec: ToolSpec::new(name, "probe", serde_json::json!({"type": "object"})),
            nested,
            panics,
        })
    }

    fn kept_in() -> String {
        keep_for_current_call("some text").map_or_else(|| "none".to_owned(), |kept| kept.place)
    }

    impl Tool for Probe {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }

        fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
            if self.panics {
                panic!("the tool failed");
            }
            let before = kept_in();
            let inner = match &self.nested {
                Some(tool) => tool.call(arguments, ctx)?,
                None => String::new(),
            };
            Ok(format!("{before}\n{inner}\n{}", kept_in()))
        }
    }

    fn call(tool: &dyn Tool) -> Result<String, ToolError> {
        let budget = IterationBudget::new(5);
        let interrupt = InterruptFlag::new();
        let ctx = ToolContext {
            budget: &budget,
            interrupt: &interrupt,
            tool_call_id: "c1",
        };
        tool.call("{}", &ctx)
    }

    /// A call nested in another (a sub-agent's tool) keeps in its own
    /// folder, the outer call in its own again once the nested one
    /// returned, and nothing is kept outside a call — also after one that
    /// panicked.
    #[test]
    fn each_call_keeps_in_its_own_folder_and_none_outside_one() {
        let dir = tempfile::tempdir().unwrap();
        let (outer_dir, inner_dir) = (dir.path().join("outer"), dir.path().join("inner"));
        let outer = Keeping {
            inner: probe(
                "outer_tool",
                Some(Keeping {
                    inner: probe("inner_tool", None, false),
                    dir: inner_dir.clone(),
                }),
                false,
            ),
            dir: outer_dir.clone(),
        };
        let answer = call(&outer).unwrap();
        let places: Vec<&str> = answer.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(places.len(), 4, "{answer}");
        for (place, dir, tool) in [
            (places[0], &outer_dir, "outer_tool"),
            (places[1], &inner_dir, "inner_tool"),
            (places[2], &inner_dir, "inner_tool"),
            (places[3], &outer_dir, "outer_tool"),
        ] {
            let place = Path::new(place);
            assert_eq!(place.parent(), Some(dir.as_path()), "{answer}");
            assert!(place.display().to_string().contains(tool), "{answer}");
            assert_eq!(std::fs::read_to_string(place).unwrap(), "some text");
        }
        assert_eq!(kept_in(), "none");

        let failing = Keeping {
            inner: probe("failing_tool", None, true),
            dir: dir.path().join("failing"),
        };
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(&failing))).is_err());
        assert_eq!(kept_in(), "none");
    }

    /// Runs a tool that panics, catches it, and says where its own call
    /// keeps.
    struct Catching {
        spec: ToolSpec,
        nested: Keeping,
    }

    impl Tool for Catching {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }

        fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
            let nested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.nested.call(arguments, ctx)
            }));
            assert!(nested.is_err(), "the nested tool panicked");
            Ok(kept_in())
        }
    }

    /// A nested call that panics gives the outer call its keeper back.
    #[test]
    fn a_nested_call_that_panics_leaves_the_outer_calls_keeper() {
        let dir = tempfile::tempdir().unwrap();
        let outer_dir = dir.path().join("outer");
        let outer = Keeping {
            inner: Box::new(Catching {
                spec: ToolSpec::new(
                    "catching_tool",
                    "probe",
                    serde_json::json!({"type": "object"}),
                ),
                nested: Keeping {
                    inner: probe("failing_tool", None, true),
                    dir: dir.path().join("inner"),
                },
            }),
            dir: outer_dir.clone(),
        };
        let place = call(&outer).unwrap();
        assert_eq!(Path::new(&place).parent(), Some(outer_dir.as_path()));
        assert!(place.contains("catching_tool"), "{place}");
        assert_eq!(kept_in(), "none");
    }
}
