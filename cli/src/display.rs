//! What the user sees while a turn runs, and incremental persistence.
//!
//! The answer streams to stdout (interactive mode) or is printed whole at the
//! end (one-shot); progress, tool activity and warnings go to stderr, so a
//! one-shot answer can be piped cleanly.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use hermes_core::{AgentEvent, AgentObserver, InterruptFlag, Message};
use hermes_runtime::persist::TurnWriter;

/// Shows a spinner on stderr while waiting for the model's first token.
pub struct Spinner {
    waiting: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts the spinner thread (idle until [`Spinner::wait`]); a no-op when
    /// stderr is not a terminal.
    pub fn start(enabled: bool) -> Self {
        let waiting = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let handle = (enabled && std::io::stderr().is_terminal()).then(|| {
            let (w, d) = (waiting.clone(), done.clone());
            std::thread::spawn(move || {
                const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
                let mut i = 0;
                let mut shown = false;
                while !d.load(Ordering::Acquire) {
                    if w.load(Ordering::Acquire) {
                        eprint!("\r{} thinking…", FRAMES[i % FRAMES.len()]);
                        shown = true;
                        i += 1;
                    } else if shown {
                        eprint!("\r\x1b[2K");
                        shown = false;
                    }
                    std::thread::sleep(Duration::from_millis(80));
                }
                if shown {
                    eprint!("\r\x1b[2K");
                }
            })
        });
        Spinner {
            waiting,
            done,
            handle,
        }
    }

    /// Shows the spinner.
    pub fn wait(&self) {
        self.waiting.store(true, Ordering::Release);
    }

    /// Hides it (and clears its line) before anything else is printed.
    pub fn clear(&self) {
        if self.waiting.swap(false, Ordering::AcqRel) && self.handle.is_some() {
            // Give the spinner thread no chance to redraw over our output.
            eprint!("\r\x1b[2K");
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Renders events and persists the ledger as it grows (through
/// [`TurnWriter`]: a tool call is stored together with all its results), so
/// a killed process loses nothing that was shown. After a failed write the
/// run is interrupted; the error is reported when the turn ends.
pub struct TurnObserver<'a> {
    /// Stream answer text to stdout as it arrives.
    pub stream_text: bool,
    /// Print tool activity and warnings to stderr.
    pub verbose: bool,
    /// Stores the run's entries as they are appended.
    pub writer: TurnWriter<'a>,
    /// The spinner to clear before printing.
    pub spinner: &'a Spinner,
    /// The run's interrupt flag, set when persisting fails.
    pub interrupt: &'a InterruptFlag,
    /// Whether streamed text has been printed since the last newline.
    pub mid_line: bool,
}

impl TurnObserver<'_> {
    fn end_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }
}

/// A short, one-line rendering of tool arguments.
pub fn summarize_args(args: &str, max: usize) -> String {
    let one_line: String = args
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max).collect();
        format!("{cut}…")
    }
}

impl AgentObserver for TurnObserver<'_> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        match event {
            AgentEvent::ModelCall { .. } => self.spinner.wait(),
            AgentEvent::TextDelta(text) => {
                self.spinner.clear();
                if self.stream_text {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                    self.mid_line = !text.ends_with('\n');
                }
            }
            AgentEvent::ToolStarted { call } => {
                self.spinner.clear();
                self.end_line();
                if self.verbose {
                    eprintln!(
                        "  ⚙ {}({})",
                        call.function.name,
                        summarize_args(&call.function.arguments, 80)
                    );
                }
            }
            AgentEvent::ToolFinished {
                call,
                result,
                is_error: true,
            } if self.verbose => {
                let first = result.lines().next().unwrap_or("");
                eprintln!("  ✗ {}: {}", call.function.name, summarize_args(first, 100));
            }
            AgentEvent::Compacted(compaction) => {
                self.spinner.clear();
                self.end_line();
                if self.verbose {
                    eprintln!(
                        "  ⟳ compacted the conversation to fit the context window: {} messages summarised, ~{} → ~{} tokens",
                        compaction.replaced, compaction.tokens_before, compaction.tokens_after
                    );
                }
                self.writer.compacted(compaction);
            }
            AgentEvent::Appended(entry) => {
                if matches!(entry.message, Message::Assistant { .. }) {
                    self.spinner.clear();
                }
                if !self.writer.append(entry) {
                    // The transcript can no longer follow the run: stop it
                    // rather than do work that would go unrecorded.
                    self.interrupt.interrupt();
                }
            }
            _ => {}
        }
    }
}

impl Drop for TurnObserver<'_> {
    fn drop(&mut self) {
        self.end_line();
    }
}
