//! `clarify` on the terminal (issue 46): the question with its choices
//! numbered, answered with a number or in the user's own words — read the
//! way approvals are ([`crate::approval`]: the spinner stopped, the
//! terminal in its normal mode while asked, Ctrl-C interrupts the turn).
//! Without a terminal (a pipe, `hermes -z` from a script) nobody can
//! answer, and the tool says so.

use std::io::IsTerminal;
use std::sync::Arc;

use hermes_core::InterruptFlag;
use hermes_runtime::tools::{Answer, Clarifier, NoAnswer, Question};
use rustyline::config::{Behavior, Config};
use rustyline::error::ReadlineError;

use crate::approval::{NormalTerminal, line_editing_terminal, read_line_watching};
use crate::term::term;

/// The CLI's clarifier: the terminal's picker, or "nobody can answer"
/// when stdin is not a terminal.
pub fn terminal_clarifier() -> Arc<dyn Clarifier> {
    if std::io::stdin().is_terminal() {
        Arc::new(TerminalPicker)
    } else {
        Arc::new(NobodyAtTheTerminal)
    }
}

#[derive(Debug)]
struct NobodyAtTheTerminal;

impl Clarifier for NobodyAtTheTerminal {
    fn ask(&self, _: &Question, _: &InterruptFlag) -> Result<Answer, NoAnswer> {
        Err(NoAnswer::NobodyToAsk(
            "no one can answer: hermes runs without a terminal (one-shot from a pipe or a \
             script)"
                .into(),
        ))
    }
}

#[derive(Debug)]
struct TerminalPicker;

impl Clarifier for TerminalPicker {
    fn ask(&self, question: &Question, interrupt: &InterruptFlag) -> Result<Answer, NoAnswer> {
        term().spinner_stop();
        term().line("");
        for line in question.numbered_text().lines() {
            term().line(&format!("  {line}"));
        }
        let _normal = NormalTerminal::enter();
        let mut editor = if line_editing_terminal() {
            let config = Config::builder()
                .behavior(Behavior::PreferTerm)
                .auto_add_history(false)
                .build();
            match rustyline::DefaultEditor::with_config(config) {
                Ok(e) => Some(e),
                Err(e) => {
                    return Err(NoAnswer::NobodyToAsk(format!(
                        "the terminal could not be used to ask ({e})"
                    )));
                }
            }
        } else {
            None
        };
        let prompt = "  > ";
        loop {
            let read = match editor.as_mut() {
                Some(editor) => editor.readline(prompt),
                None => read_line_watching(prompt, interrupt),
            };
            match read {
                Ok(text) if text.trim().is_empty() => {}
                Ok(text) => match question.interpret(&text) {
                    Ok(answer) => return Ok(answer),
                    Err(why) => term().line(&format!("  {why}")),
                },
                Err(ReadlineError::Interrupted) => {
                    interrupt.interrupt();
                    return Err(NoAnswer::Ended("the user pressed Ctrl-C".into()));
                }
                Err(ReadlineError::Eof) => {
                    return Err(NoAnswer::Ended("no answer (end of input)".into()));
                }
                Err(e) => {
                    return Err(NoAnswer::Ended(format!(
                        "the answer could not be read ({e})"
                    )));
                }
            }
        }
    }
}
