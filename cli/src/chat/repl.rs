//! The interactive loop: line editing (rustyline), slash-command
//! completion, multi-line input, the Ctrl-C conventions of a shell, the
//! recap of a resumed session and the goodbye line.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hermes_core::Message;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{
    Cmd, CompletionType, ConditionalEventHandler, Config, Context, Editor, Event, EventContext,
    EventHandler, Helper, KeyCode, KeyEvent, Modifiers, RepeatCount,
};

use crate::app::{CliError, Workbench, runtime};
use crate::args::ChatArgs;
use crate::chat::commands::{self, Action, COMMANDS};
use crate::chat::{Chat, goodbye};
use crate::display::one_line;
use crate::sessions::ago;
use crate::term::{TypeAhead, term, width};

/// Completes `/command` names.
struct SlashHelper;

impl Completer for SlashHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let typed = &line[..pos];
        let Some(prefix) = typed.strip_prefix('/') else {
            return Ok((0, Vec::new()));
        };
        if prefix.contains(char::is_whitespace) {
            return Ok((0, Vec::new()));
        }
        let pairs = COMMANDS
            .iter()
            .filter(|c| c.name.starts_with(prefix))
            .map(|c| Pair {
                display: format!("/{:<8} {}", c.name, c.help),
                replacement: format!("/{}", c.name),
            })
            .collect();
        Ok((0, pairs))
    }
}

impl Hinter for SlashHelper {
    type Hint = String;
}

impl Highlighter for SlashHelper {
    fn highlight_candidate<'c>(
        &self,
        candidate: &'c str,
        _completion: CompletionType,
    ) -> Cow<'c, str> {
        Cow::Borrowed(candidate)
    }
}

impl Validator for SlashHelper {}

impl Helper for SlashHelper {}

/// Ctrl-C at the prompt: remembers whether the line had text, then
/// interrupts the read (the loop clears the line or prints the hint).
struct CtrlCAtPrompt {
    had_text: Arc<AtomicBool>,
}

impl ConditionalEventHandler for CtrlCAtPrompt {
    fn handle(
        &self,
        _evt: &Event,
        _n: RepeatCount,
        _positive: bool,
        ctx: &EventContext<'_>,
    ) -> Option<Cmd> {
        self.had_text
            .store(!ctx.line().is_empty(), Ordering::Release);
        Some(Cmd::Interrupt)
    }
}

/// `hermes chat` without `-z`: the interactive loop.
pub fn interactive(bench: Workbench, args: &ChatArgs) -> Result<i32, CliError> {
    let history_path = bench.settings.home.join(".cli_history");
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .build();
    let mut editor: Editor<SlashHelper, rustyline::history::DefaultHistory> =
        Editor::with_config(config)
            .map_err(|e| runtime(format!("cannot start line editing: {e}")))?;
    editor.set_helper(Some(SlashHelper));
    for key in [
        KeyEvent(KeyCode::Enter, Modifiers::ALT),
        KeyEvent(KeyCode::Char('J'), Modifiers::CTRL),
    ] {
        editor.bind_sequence(key, EventHandler::Simple(Cmd::Newline));
    }
    let had_text = Arc::new(AtomicBool::new(false));
    editor.bind_sequence(
        KeyEvent(KeyCode::Char('C'), Modifiers::CTRL),
        EventHandler::Conditional(Box::new(CtrlCAtPrompt {
            had_text: had_text.clone(),
        })),
    );
    let _ = editor.load_history(&history_path);
    // Type-ahead is held for the whole session, not only during turns: a
    // command takes a while too (`/model` asks the provider), and keys typed
    // between two prompts in the terminal's line mode would arrive with
    // Enter turned into Ctrl-J, which adds a line instead of sending. The
    // editor switches to raw mode for each line and back to this. Taken
    // before the greeting: a user (or a test) who types as soon as the
    // banner shows must not race the first prompt — a line typed there was
    // echoed by the terminal and its Enter became a new line in the editor,
    // so it was never sent (seen as a PTY test timing out under load).
    let held = TypeAhead::hold();
    // After the editor: it installs a SIGINT handler of its own when it is
    // created, and ours (set up by `open`) must be the one that runs while
    // a turn streams.
    let mut chat = Chat::open(bench, args, false)?;
    if !args.quiet {
        greet(&chat);
    }
    let prompt = if term().caps.in_tty { "› " } else { "" };
    // Background processes end with the session: leaving while some run
    // asks once, so the user can keep them by staying.
    let mut warned_running = false;
    loop {
        for notice in chat.bench().background_notices.take() {
            term().line(&notice);
        }
        for notice in chat.background_runs().take_notices() {
            term().line(&notice);
        }
        chat.at_prompt(true);
        let read = match chat.unanswered.take() {
            Some(text) => editor.readline_with_initial(prompt, (&text, "")),
            None => editor.readline(prompt),
        };
        chat.at_prompt(false);
        let line = match read {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => {
                if had_text.swap(false, Ordering::AcqRel) {
                    continue;
                }
                // At the prompt Ctrl-C never quits, also right after it
                // interrupted a turn: only Ctrl-D or /exit leave.
                term().line(&term().err_style().dim("(Ctrl-D or /exit to quit)"));
                continue;
            }
            Err(ReadlineError::Eof) if may_leave(&chat, &mut warned_running) => break,
            Err(ReadlineError::Eof) => continue,
            Err(e) => return Err(runtime(format!("cannot read input: {e}"))),
        };
        let input = line.trim();
        if input.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input);
        let to_send = match commands::handle(&mut chat, input)? {
            Action::Handled => continue,
            Action::Exit if may_leave(&chat, &mut warned_running) => break,
            Action::Exit => continue,
            Action::Send(text) => text,
        };
        let result = chat.turn(&to_send, true)?;
        chat.report_stop(&result);
    }
    if let Some(parent) = history_path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = editor.save_history(&history_path);
    chat.bench().background.kill_all();
    chat.background_runs().interrupt_all();
    drop(held);
    chat.close()?;
    if let Some(id) = chat.session_id() {
        term().line(&goodbye(id));
    }
    Ok(0)
}

/// Whether the user may leave now: yes unless background processes or
/// `/background` runs are in flight and the user was not told yet that
/// leaving ends them.
fn may_leave(chat: &Chat, warned: &mut bool) -> bool {
    let running = chat.bench().background.running();
    let runs = chat.background_runs().running();
    if (running.is_empty() && runs.is_empty()) || *warned {
        return true;
    }
    *warned = true;
    if !running.is_empty() {
        term().line(&format!(
            "{} background process(es) still running ({}); they end with this session. \
             Stay to keep them (the process tool shows them), or /exit (Ctrl-D) again to end them.",
            running.len(),
            running.join(", ")
        ));
    }
    if !runs.is_empty() {
        term().line(&format!(
            "{} background task(s) still working ({}); leaving stops them (what they did so far \
             stays in their sessions). Stay for their answers, or /exit (Ctrl-D) again to leave.",
            runs.len(),
            runs.join(", ")
        ));
    }
    false
}

/// The first lines: what is talking to what, or a recap of the resumed session.
fn greet(chat: &Chat) {
    let style = term().err_style();
    let bench = chat.bench();
    let Some(session) = chat.session() else {
        term().line(&format!(
            "Hermes · {} at {} · /help lists commands · Alt-Enter adds a line · Ctrl-D quits",
            style.bold(&bench.model),
            bench.settings.provider.display_url()
        ));
        return;
    };
    term().line(&format!(
        "Resumed {} ({}) · {} messages · last active {}",
        style.bold(&format!(
            "“{}”",
            session.title.as_deref().unwrap_or("untitled")
        )),
        session.id,
        chat.history().len(),
        ago(session.updated_at_ms)
    ));
    let cols = width().saturating_sub(10);
    let last_user = chat.history().iter().rev().find_map(|e| match &e.message {
        Message::User { content, .. } => Some(content.as_str()),
        _ => None,
    });
    let last_answer = chat.history().iter().rev().find_map(|e| match &e.message {
        Message::Assistant {
            content: Some(c), ..
        } if !c.trim().is_empty() => Some(c.as_str()),
        _ => None,
    });
    if let Some(u) = last_user {
        term().line(&format!("  {} {}", style.dim("you:"), one_line(u, cols)));
    }
    if let Some(a) = last_answer {
        term().line(&format!("  {} {}", style.dim("hermes:"), one_line(a, cols)));
    }
    if chat.unanswered.is_some() {
        term().line(&style.yellow(
            "Your last message got no answer; it is on the prompt line again: Enter sends it.",
        ));
    }
    term().line(&style.dim("/help lists commands · Ctrl-D quits"));
}
