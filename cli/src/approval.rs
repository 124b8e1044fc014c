//! Asking the user on the terminal before a dangerous command runs (the
//! CLI's [`Approver`]; the rules are in `hermes_runtime::tools::approval`).
//!
//! Kept apart from the chat display on purpose: it is called on the tool's
//! thread while a turn runs, stops the tool spinner, prints through the
//! one terminal owner ([`term`]), and reads the answer with rustyline on
//! `/dev/tty`, so a redirected stdout never swallows the question. During a
//! turn the terminal holds type-ahead back (no echo, no line editing); the
//! question puts the normal settings back while it is asked and restores
//! the held ones after. In raw mode Ctrl-C is a key, not a signal: it
//! answers "no" and interrupts the turn, as Ctrl-C does elsewhere in a turn.
//! On a terminal rustyline does not drive (`TERM=dumb`) the answer is read
//! here, a line at a time, and Ctrl-C (then SIGINT) does the same through
//! the interrupt flag.

use std::io::IsTerminal;
use std::sync::Arc;

use hermes_core::InterruptFlag;
use hermes_runtime::tools::{ApprovalRequest, Approver, Decision};
use rustyline::config::{Behavior, Config};
use rustyline::error::ReadlineError;

use crate::term::term;

/// The terminal's approver, when there is a terminal to ask on; `None`
/// (a pipe, `hermes -z` from a script, CI): dangerous commands are denied.
pub fn terminal_approver() -> Option<Arc<dyn Approver>> {
    std::io::stdin()
        .is_terminal()
        .then(|| Arc::new(TerminalApprover) as Arc<dyn Approver>)
}

/// Asks y / n / always on the terminal.
#[derive(Debug)]
struct TerminalApprover;

/// The terminal in its normal (echoing, line-editing) mode until dropped,
/// then back in whatever mode it was.
pub(crate) struct NormalTerminal(Option<nix::sys::termios::Termios>);

impl NormalTerminal {
    pub(crate) fn enter() -> Self {
        use nix::sys::termios::{InputFlags, LocalFlags, SetArg, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let Ok(held) = tcgetattr(&stdin) else {
            return NormalTerminal(None);
        };
        let mut normal = held.clone();
        normal
            .local_flags
            .insert(LocalFlags::ECHO | LocalFlags::ICANON | LocalFlags::ISIG);
        normal.input_flags.insert(InputFlags::ICRNL);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &normal);
        NormalTerminal(Some(held))
    }
}

impl Drop for NormalTerminal {
    fn drop(&mut self) {
        if let Some(held) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                held,
            );
        }
    }
}

impl Approver for TerminalApprover {
    fn decide(&self, request: &ApprovalRequest<'_>, interrupt: &InterruptFlag) -> Decision {
        term().spinner_stop();
        let style = term().err_style();
        term().line(&format!(
            "\n  {} {} wants to run a command that needs your approval ({}):\n\n      {}\n",
            style.yellow("⚠"),
            request.tool,
            request.reasons(),
            style.bold(request.command.trim())
        ));
        let _normal = NormalTerminal::enter();
        let mut editor = if line_editing_terminal() {
            let config = Config::builder()
                .behavior(Behavior::PreferTerm)
                .auto_add_history(false)
                .build();
            match rustyline::DefaultEditor::with_config(config) {
                Ok(e) => Some(e),
                Err(e) => {
                    return Decision::Deny(format!("the terminal could not be used to ask ({e})"));
                }
            }
        } else {
            None
        };
        let prompt = "  Run it? [y]es / [n]o / [a]lways for this session: ";
        loop {
            let read = match editor.as_mut() {
                Some(editor) => editor.readline(prompt),
                None => read_line_watching(prompt, interrupt),
            };
            match read {
                Ok(answer) => match answer.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => return Decision::Once,
                    "a" | "always" => {
                        term().line(&format!(
                            "  (approved for the rest of this session: {})",
                            request.reasons()
                        ));
                        return Decision::Always;
                    }
                    "n" | "no" | "" => return Decision::Deny("the user said no".into()),
                    _ => term().line("  Please answer y, n or a."),
                },
                Err(ReadlineError::Interrupted) => {
                    interrupt.interrupt();
                    return Decision::Deny("the user pressed Ctrl-C".into());
                }
                Err(ReadlineError::Eof) => {
                    return Decision::Deny("no answer (end of input)".into());
                }
                Err(e) => return Decision::Deny(format!("the answer could not be read ({e})")),
            }
        }
    }
}

/// Whether rustyline drives this terminal itself (raw mode, where Ctrl-C is
/// a key it reports). On the terminals it does not support it reads a plain
/// line, Ctrl-C is SIGINT, and that read would not notice it.
pub(crate) fn line_editing_terminal() -> bool {
    // rustyline's own list of unsupported terminals.
    !matches!(
        std::env::var("TERM").as_deref(),
        Ok("dumb" | "cons25" | "emacs")
    )
}

/// Reads one line from stdin (in the terminal's line mode), looking at the
/// interrupt flag every 100 ms: the CLI's SIGINT handler sets it, so
/// Ctrl-C ends the wait as `Interrupted`.
pub(crate) fn read_line_watching(
    prompt: &str,
    interrupt: &InterruptFlag,
) -> Result<String, ReadlineError> {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    let mut err = std::io::stderr();
    let _ = err.write_all(prompt.as_bytes());
    let _ = err.flush();
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    loop {
        if interrupt.is_set() {
            let _ = err.write_all(b"\n");
            return Err(ReadlineError::Interrupted);
        }
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(ReadlineError::Io(e.into())),
        }
        let mut buf = [0u8; 256];
        let n = match stdin.lock().read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadlineError::Io(e)),
        };
        if n == 0 {
            return Err(ReadlineError::Eof);
        }
        line.extend_from_slice(buf.get(..n).unwrap_or_default());
        if let Some(end) = line.iter().position(|&b| b == b'\n' || b == b'\r') {
            line.truncate(end);
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
    }
}
