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
struct NormalTerminal(Option<nix::sys::termios::Termios>);

impl NormalTerminal {
    fn enter() -> Self {
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
        let config = Config::builder()
            .behavior(Behavior::PreferTerm)
            .auto_add_history(false)
            .build();
        let mut editor = match rustyline::DefaultEditor::with_config(config) {
            Ok(e) => e,
            Err(e) => {
                return Decision::Deny(format!("the terminal could not be used to ask ({e})"));
            }
        };
        loop {
            match editor.readline("  Run it? [y]es / [n]o / [a]lways for this session: ") {
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
