//! What the user sees while a turn runs (the turn driver stores it).
//!
//! The answer streams to stdout (interactive mode, rendered as markdown on a
//! terminal) or is printed whole at the end (one-shot); the spinner, tool
//! activity and warnings go to stderr — all through [`crate::term`], so they
//! never overwrite one another and a one-shot answer can be piped cleanly.

use std::time::{Duration, Instant};

use hermes_core::{AgentEvent, Message};
use hermes_runtime::turn::TurnView;
use unicode_width::UnicodeWidthStr;

use crate::markdown::Markdown;
use crate::term::{term, width};

/// Renders a turn's events on the terminal. The turn driver
/// ([`hermes_runtime::turn`]) stores each entry before it is shown, so a
/// killed process loses nothing that was shown; a failed write stops the
/// run, and the error is reported when the turn ends.
pub struct TurnObserver {
    /// Streams answer text to stdout through this renderer; `None` keeps
    /// the answer for the end (one-shot).
    pub stream: Option<Markdown>,
    /// Print tool activity on stderr.
    pub verbose: bool,
    /// Show the spinner (a terminal, and not `--quiet`).
    pub spinner: bool,
    /// When the running tool started.
    tool_started: Option<Instant>,
    /// Whether any model call reported token usage.
    pub usage_reported: bool,
    /// Show streamed reasoning, dimmed, on stderr (`--show-reasoning`);
    /// it is never the answer.
    pub show_reasoning: bool,
    /// Reasoning text not yet printed (it is printed a line at a time).
    reasoning_line: String,
    /// The models a fallback handed this turn to, each told once (SPEC X2).
    fallbacks: Vec<String>,
}

impl TurnObserver {
    /// An observer for one turn.
    pub fn new(stream: Option<Markdown>, verbose: bool, spinner: bool) -> Self {
        TurnObserver {
            stream,
            verbose,
            spinner,
            tool_started: None,
            usage_reported: false,
            show_reasoning: false,
            reasoning_line: String::new(),
            fallbacks: Vec::new(),
        }
    }

    /// Prints the reasoning kept so far (complete lines, or all of it).
    fn flush_reasoning(&mut self, all: bool) {
        while let Some(at) = self.reasoning_line.find('\n') {
            let line: String = self.reasoning_line.drain(..=at).collect();
            term().line(&term().err_style().dim(line.trim_end()));
        }
        if all && !self.reasoning_line.trim().is_empty() {
            let line = std::mem::take(&mut self.reasoning_line);
            term().line(&term().err_style().dim(line.trim_end()));
        }
        if all {
            self.reasoning_line.clear();
        }
    }

    /// Ends the streamed text (rendering its last line) and the spinner.
    pub fn finish(&mut self) {
        self.flush_reasoning(true);
        term().spinner_stop();
        self.stream_out(Markdown::finish);
        term().end_line();
    }

    /// Writes what the markdown stream makes of the next step; first, if
    /// a notice broke its open line, tells it its echo is out of reach.
    fn stream_out(&mut self, step: impl FnOnce(&mut Markdown) -> String) {
        if let Some(md) = &mut self.stream {
            if term().take_stream_broken() {
                md.echo_lost();
            }
            term().out(&step(md));
        }
    }

    fn spin(&self, label: &str) {
        if self.spinner {
            term().spinner_start(label);
        }
    }
}

/// A short, one-line rendering of `text`, at most `max` columns.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if UnicodeWidthStr::width(flat.as_str()) <= max {
        return flat;
    }
    let mut out = String::new();
    let mut cols = 0;
    for c in flat.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if cols + w + 1 > max {
            break;
        }
        out.push(c);
        cols += w;
    }
    out.push('…');
    out
}

/// The argument worth showing for a tool call: the path, command, query or
/// URL when the arguments have one, else the compact JSON.
pub fn call_summary(arguments: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(arguments).ok();
    if let Some(obj) = parsed.as_ref().and_then(|v| v.as_object()) {
        for key in [
            "command", "path", "file", "pattern", "query", "url", "action", "task", "goal",
        ] {
            if let Some(v) = obj.get(key).and_then(|v| v.as_str()) {
                return v.to_owned();
            }
        }
    }
    arguments.to_owned()
}

/// "12 ms", "1.4 s", "2 min 3 s".
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// A short account of a tool's result: its first line, or its size.
fn result_summary(result: &str, is_error: bool) -> String {
    let lines = result.lines().filter(|l| !l.trim().is_empty()).count();
    let first = result.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if is_error || lines <= 1 {
        first.to_owned()
    } else {
        format!("{lines} lines")
    }
}

impl TurnView for TurnObserver {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        match event {
            AgentEvent::ModelCall { .. } => self.spin("thinking…"),
            AgentEvent::ReasoningDelta(text) if self.show_reasoning => {
                term().spinner_stop();
                self.reasoning_line.push_str(text);
                self.flush_reasoning(false);
            }
            AgentEvent::Fallback(fallback) => {
                self.stream_out(Markdown::finish);
                term().spinner_stop();
                term().end_line();
                if !self.fallbacks.iter().any(|m| m == fallback.answering) {
                    self.fallbacks.push(fallback.answering.to_owned());
                    term().line(&term().err_style().yellow(&format!(
                        "hermes: {} failed ({}); {} answers this turn",
                        fallback.failed, fallback.reason, fallback.answering
                    )));
                }
            }
            AgentEvent::RepeatsStopped { tool, count } => {
                self.flush_reasoning(true);
                self.stream_out(Markdown::finish);
                term().spinner_stop();
                term().end_line();
                term().line(&term().err_style().yellow(&format!(
                    "hermes: stopped a loop: {tool} was called {count} times with the same \
                     arguments and result; the model answers without tools"
                )));
            }
            AgentEvent::TextDelta(text) => {
                self.flush_reasoning(true);
                if self.stream.is_some() {
                    term().spinner_stop();
                    self.stream_out(|md| md.push(text));
                }
            }
            AgentEvent::ToolStarted { call } => {
                self.flush_reasoning(true);
                self.stream_out(Markdown::finish);
                term().spinner_stop();
                term().end_line();
                self.tool_started = Some(Instant::now());
                self.spin(&format!("running {}…", call.function.name));
            }
            AgentEvent::ToolFinished {
                call,
                result,
                is_error,
            } => {
                term().spinner_stop();
                let took = self.tool_started.take().map(|t| t.elapsed());
                if self.verbose {
                    let style = term().err_style();
                    let mark = if *is_error {
                        style.red("✗")
                    } else {
                        style.green("✓")
                    };
                    let cols = width();
                    let name = &call.function.name;
                    let arg = one_line(&call_summary(&call.function.arguments), cols / 3);
                    let took = took.map(duration).unwrap_or_default();
                    let used =
                        6 + name.len() + UnicodeWidthStr::width(arg.as_str()) + took.len() + 6;
                    let summary = one_line(
                        &result_summary(result, *is_error),
                        cols.saturating_sub(used).max(10),
                    );
                    let summary = if *is_error {
                        style.red(&summary)
                    } else {
                        style.dim(&summary)
                    };
                    term().line(&format!(
                        "  {mark} {} {arg} {} {summary}",
                        style.cyan(name),
                        style.dim(&format!("· {took} ·"))
                    ));
                }
            }
            AgentEvent::Compacted(compaction) => {
                self.stream_out(Markdown::finish);
                term().spinner_stop();
                term().end_line();
                if self.verbose {
                    term().line(&term().err_style().dim(&format!(
                        "  ⟳ compacted the conversation to fit the context window: {} messages summarised, ~{} → ~{} tokens",
                        compaction.replaced, compaction.tokens_before, compaction.tokens_after
                    )));
                }
            }
            AgentEvent::Appended(entry) => {
                if entry.meta.usage.is_some() {
                    self.usage_reported = true;
                }
                if matches!(entry.message, Message::Assistant { .. }) {
                    term().spinner_stop();
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_short_and_pick_the_telling_argument() {
        assert_eq!(call_summary(r#"{"path":"notes.txt","x":1}"#), "notes.txt");
        assert_eq!(call_summary(r#"{"command":"ls -la"}"#), "ls -la");
        assert_eq!(call_summary("not json"), "not json");
        assert_eq!(one_line("a\nb\tc", 80), "a b c");
        assert_eq!(one_line("abcdefghij", 5), "abcd…");
        assert_eq!(result_summary("one\ntwo\nthree\n", false), "3 lines");
        assert_eq!(result_summary("error: boom\nmore", true), "error: boom");
        assert_eq!(duration(Duration::from_millis(12)), "12 ms");
        assert_eq!(duration(Duration::from_millis(1400)), "1.4 s");
    }
}

/// Where `send_file` sends in the terminal: nowhere to upload, so the file
/// is named — its real path — for the user to open.
#[derive(Debug)]
pub struct PrintedFiles;

impl hermes_runtime::tools::FileOutbox for PrintedFiles {
    fn limit(&self, _kind: hermes_runtime::tools::FileKind) -> Result<u64, String> {
        // Nothing is uploaded, but the tool reads the file whole: a bound
        // keeps a runaway path from filling memory.
        Ok(256 * 1024 * 1024)
    }

    fn send(&self, file: hermes_runtime::tools::OutboundFile) -> Result<String, String> {
        let caption = if file.caption.is_empty() {
            String::new()
        } else {
            format!(" — {}", file.caption)
        };
        term().line(&format!("📎 {}{caption}", file.path.display()));
        Ok("(printed its path in the terminal)".to_owned())
    }
}
