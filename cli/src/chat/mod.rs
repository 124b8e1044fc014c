//! `hermes chat`: one conversation over a stored session, driven one-shot
//! ([`oneshot`]) or interactively ([`repl`]), with slash commands
//! ([`commands`]).

pub mod background;
pub mod commands;
pub mod oneshot;
pub mod repl;
mod sigint;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hermes_core::{InterruptFlag, IterationBudget, LedgerEntry, Message, StopReason, Usage};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{NewSession, SessionRecord, SessionStatus};
use hermes_runtime::sync::lock;
use hermes_runtime::turn::drive;

use crate::app::{CliError, Workbench, find_session, provider_hint, runtime};
use crate::args::ChatArgs;
use crate::display::TurnObserver;
use crate::markdown::Markdown;
use crate::term::{TypeAhead, restore_terminal, term, width};

/// The session the process is in, for the goodbye line printed when a
/// second Ctrl-C exits from the signal handler.
static CURRENT_SESSION: Mutex<Option<String>> = Mutex::new(None);

fn set_current_session(id: Option<&str>) {
    *lock(&CURRENT_SESSION) = id.map(str::to_owned);
    if sigint::installed() {
        sigint::set_goodbye(exit_text(id));
    }
}

/// What a one-shot's Ctrl-C handler writes (`sigint`): `lines`, after the
/// spinner's line is erased, as `Term::line` does for the interactive one.
fn ctrl_c_text(lines: &[&str]) -> String {
    let mut text = if term().caps.err_ansi {
        "\r\x1b[2K".to_owned()
    } else {
        String::new()
    };
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The interrupting hint of a first Ctrl-C.
fn hint_text() -> String {
    ctrl_c_text(&[&term().err_style().dim(HINT)])
}

/// What an exit by Ctrl-C leaves: an empty line, and the goodbye line of
/// the session, if there is one.
fn exit_text(session: Option<&str>) -> String {
    match session {
        Some(id) => ctrl_c_text(&["", &goodbye(id)]),
        None => ctrl_c_text(&[""]),
    }
}

/// A second Ctrl-C this soon after the first exits (SPEC L11).
const AGAIN_WITHIN: Duration = Duration::from_secs(2);

/// What a first Ctrl-C during a turn says.
const HINT: &str = "(interrupting — press Ctrl-C again to quit)";

/// Routes Ctrl-C while a turn runs (the line editor handles it at the
/// prompt): the first press interrupts the turn (SPEC L11), a second one
/// within two seconds exits with status 130.
struct CtrlC {
    running: AtomicBool,
    /// The interactive loop is waiting for input. A line editor in raw
    /// mode reads Ctrl-C as a key; without one (`TERM=dumb`) it arrives
    /// here, where it must not end the program either.
    at_prompt: AtomicBool,
    flag: InterruptFlag,
    last: Mutex<Option<Instant>>,
}

static CTRL_C: OnceLock<Arc<CtrlC>> = OnceLock::new();

fn ctrl_c(flag: &InterruptFlag) -> Arc<CtrlC> {
    CTRL_C
        .get_or_init(|| {
            let state = Arc::new(CtrlC {
                running: AtomicBool::new(false),
                at_prompt: AtomicBool::new(false),
                flag: flag.clone(),
                last: Mutex::new(None),
            });
            let s = state.clone();
            let installed = ctrlc::set_handler(move || {
                let exit = |s: &CtrlC| {
                    restore_terminal();
                    term().spinner_stop();
                    let current = lock(&CURRENT_SESSION).clone();
                    term().line("");
                    if let Some(id) = current {
                        term().line(&goodbye(&id));
                    }
                    let _ = s;
                    std::process::exit(130);
                };
                // At the prompt — also right after an interrupt — Ctrl-C
                // only reminds how to leave.
                if s.at_prompt.load(Ordering::Acquire) {
                    term().line(&term().err_style().dim("(Ctrl-D or /exit to quit)"));
                    return;
                }
                if !s.running.load(Ordering::Acquire) {
                    exit(&s);
                }
                let mut last = lock(&s.last);
                if last.is_some_and(|t| t.elapsed() < AGAIN_WITHIN) {
                    exit(&s);
                }
                *last = Some(Instant::now());
                s.flag.interrupt();
                term().line(&term().err_style().dim(HINT));
            });
            if let Err(e) = installed {
                tracing::warn!("cannot install the Ctrl-C handler: {e}");
            }
            state
        })
        .clone()
}

/// The line printed when leaving a session: its id and how to come back.
pub fn goodbye(id: &str) -> String {
    let style = term().err_style();
    format!(
        "Session {} saved. Resume it with {} (latest in this directory) or {}.",
        style.bold(id),
        style.cyan("hermes -c"),
        style.cyan(&format!("hermes -r {id}"))
    )
}

/// What a turn ended with.
pub struct TurnResult {
    /// The final (possibly partial) answer.
    pub final_text: String,
    /// Why it stopped.
    pub stop: StopReason,
    /// Tokens this turn used, when the provider reported them.
    pub usage: Option<Usage>,
    /// The turn produced no answer at all and was taken back out of the
    /// session (so a resumed session never holds two user messages in a
    /// row, and a failed first turn leaves no empty session).
    pub rolled_back: bool,
}

/// How the conversation is shown.
#[derive(Clone, Copy, Debug)]
pub struct View {
    /// Silence progress and notices.
    pub quiet: bool,
    /// Render markdown and colour on stdout.
    pub styled: bool,
    /// Show streamed reasoning, dimmed, on stderr.
    pub show_reasoning: bool,
}

impl View {
    /// From the command-line options and the terminal.
    pub fn new(args: &ChatArgs) -> Self {
        View {
            quiet: args.quiet,
            styled: !args.plain && term().caps.out_ansi,
            show_reasoning: args.show_reasoning && !args.quiet,
        }
    }
}

/// One conversation: the session, its history and its counters.
pub struct Chat {
    bench: Workbench,
    session: Option<SessionRecord>,
    history: Vec<LedgerEntry>,
    system_prompt: Option<String>,
    tokens: Usage,
    usage_reported: bool,
    /// Token counts of the last turn, for `/usage`.
    last_turn: Option<Usage>,
    turns: u32,
    budget_left: Option<u32>,
    interrupt: InterruptFlag,
    view: View,
    /// A user message found unanswered at the end of a resumed session; it
    /// was taken out of the transcript and is offered again.
    pub unanswered: Option<String>,
    /// `/background` runs.
    runs: background::BackgroundRuns,
    /// A one-shot run: Ctrl-C is answered in the signal handler
    /// (`sigint`), not by `ctrlc`'s thread.
    one_shot: bool,
}

impl Chat {
    /// Opens the conversation `args` asks for (new, `--resume ID` or
    /// `--continue`), for one turn (`one_shot`) or an interactive chat.
    pub fn open(bench: Workbench, args: &ChatArgs, one_shot: bool) -> Result<Self, CliError> {
        let mut chat = Chat {
            bench,
            session: None,
            history: Vec::new(),
            system_prompt: None,
            tokens: Usage::default(),
            usage_reported: false,
            last_turn: None,
            turns: 0,
            budget_left: None,
            interrupt: InterruptFlag::new(),
            view: View::new(args),
            unanswered: None,
            runs: background::BackgroundRuns::default(),
            one_shot,
        };
        let record = if let Some(id) = &args.resume {
            Some(find_session(&chat.bench.store(), id)?)
        } else if args.continue_latest {
            Some(chat.latest_here()?)
        } else {
            None
        };
        if let Some(record) = record {
            chat.attach(record)?;
        }
        if one_shot {
            sigint::install(&chat.interrupt, hint_text(), exit_text(None));
        } else {
            ctrl_c(&chat.interrupt);
        }
        Ok(chat)
    }

    /// The latest terminal session of the working directory (gateway
    /// sessions of chat users are not the CLI's to continue).
    fn latest_here(&self) -> Result<SessionRecord, CliError> {
        let dir = self.bench.settings.workdir.display().to_string();
        let store = self.bench.store();
        if let Some(found) = store.latest_session_in("cli", &dir).map_err(runtime)? {
            return Ok(found);
        }
        let elsewhere = store.latest_session_on("cli").map_err(runtime)?;
        Err(CliError::Config(match elsewhere {
            Some(s) => format!(
                "no session to continue in {dir}; the latest one is {} (in {}): `hermes -r {}` resumes it",
                s.id,
                s.workdir.as_deref().unwrap_or("an unknown directory"),
                s.id
            ),
            None => "there is no session to continue yet; start one with `hermes`".into(),
        }))
    }

    /// Makes `record` the current session: its transcript and its stored
    /// system prompt, byte for byte (SPEC L6).
    fn attach(&mut self, record: SessionRecord) -> Result<(), CliError> {
        // The session's own model (it may have been switched with /model),
        // unless --model/HERMES_MODEL/… chose one for this invocation.
        let model_from_defaults = matches!(
            self.bench.settings.origins.get("model"),
            None | Some(hermes_runtime::config::Origin::Default)
        );
        if let Some(model) = record.model.as_deref()
            && model_from_defaults
            && model != self.bench.model
        {
            self.bench.set_model(model)?;
        }
        // The compacted view the model is given, not every original (SPEC X1).
        let mut history = self.bench.store().load_view(&record.id).map_err(runtime)?;
        // A user message with nothing after it (a process killed while the
        // model was thinking) would make the next turn send two user
        // messages in a row; it is taken out and offered again instead.
        if let Some(LedgerEntry {
            message: Message::User { content, .. },
            ..
        }) = history.last()
        {
            self.unanswered = Some(content.clone());
            self.bench
                .store()
                .undo_last_turn(&record.id)
                .map_err(runtime)?;
            history.pop();
        }
        self.history = history;
        self.bench.bind_session(&record.id)?;
        self.system_prompt = match &record.system_prompt {
            Some(p) => Some(p.clone()),
            None => {
                // A session stored without a prompt gets one now, kept from here on.
                let p = self.bench.assemble_prompt()?;
                self.bench
                    .store()
                    .set_system_prompt(&record.id, &p)
                    .map_err(runtime)?;
                Some(p)
            }
        };
        if record.status != SessionStatus::Active {
            self.bench
                .store()
                .set_status(&record.id, SessionStatus::Active)
                .map_err(runtime)?;
        }
        set_current_session(Some(&record.id));
        self.session = Some(record);
        Ok(())
    }

    /// The current session, created (with its prompt assembled once) on
    /// first use; `true` when it was created now.
    fn ensure_session(&mut self, first_message: &str) -> Result<(String, String, bool), CliError> {
        if let (Some(s), Some(p)) = (&self.session, &self.system_prompt) {
            return Ok((s.id.clone(), p.clone(), false));
        }
        let workdir = self.bench.settings.workdir.display().to_string();
        let title = title_from(first_message);
        let mut record = self
            .bench
            .store()
            .create_session(&NewSession {
                platform: Some("cli"),
                model: Some(&self.bench.model),
                workdir: Some(&workdir),
                title: Some(&title),
                ..NewSession::default()
            })
            .map_err(runtime)?;
        let id = record.id.clone();
        // The session exists first, so its tools are built once, for it,
        // and the prompt from them (the tools are built lazily).
        self.bench.bind_session(&id)?;
        let prompt = match self.bench.assemble_prompt() {
            Ok(p) => p,
            Err(e) => {
                // Nothing was said in it yet: no empty session is left.
                let _ = self.bench.store().delete_session(&id);
                return Err(e);
            }
        };
        self.bench
            .store()
            .set_system_prompt(&id, &prompt)
            .map_err(runtime)?;
        record.system_prompt = Some(prompt.clone());
        set_current_session(Some(&id));
        self.session = Some(record);
        self.system_prompt = Some(prompt.clone());
        Ok((id, prompt, true))
    }

    /// Runs one user turn; `interactive` streams the answer to stdout.
    pub fn turn(&mut self, text: &str, interactive: bool) -> Result<TurnResult, CliError> {
        let (session_id, prompt, created) = self.ensure_session(text)?;
        let agent = self
            .bench
            .agent(&prompt)?
            .with_interrupt(self.interrupt.clone());
        let budget = IterationBudget::new(self.bench.settings.max_iterations);
        let stream = interactive.then(|| Markdown::new(self.view.styled, width()));
        let spinner = !self.view.quiet && term().caps.err_tty;
        let history = std::mem::take(&mut self.history);
        let before = history.len();
        let held = interactive.then(TypeAhead::hold);
        self.set_running(true);
        let mut observer = TurnObserver::new(stream, !self.view.quiet, spinner);
        observer.show_reasoning = self.view.show_reasoning;
        let driven = drive(
            &agent,
            Message::user(text),
            history,
            &budget,
            TurnWriter::new(&self.bench.store, &session_id),
            &mut observer,
        );
        observer.finish();
        self.set_running(false);
        drop(held);
        let persist_error = driven.store_failure().map(ToString::to_string);
        let answered = driven.answered();
        let outcome = driven.outcome;
        let usage_reported = observer.usage_reported;
        drop(observer);
        self.interrupt.clear();
        // A limit learned from a context-length error is kept for later runs.
        self.bench.windows.record_learned();
        self.turns += 1;
        self.budget_left = Some(budget.remaining());
        if let Some(e) = persist_error {
            self.history = outcome.messages;
            return Err(CliError::Runtime(format!(
                "the answer could not be saved to the session database: {e}"
            )));
        }
        let mut rolled_back = false;
        if answered {
            self.history = outcome.messages;
        } else {
            // Nothing but the user message: take it back out.
            let mut messages = outcome.messages;
            messages.truncate(before);
            self.history = messages;
            rolled_back = true;
            let mut store = self.bench.store();
            if created {
                store.delete_session(&session_id).map_err(runtime)?;
                drop(store);
                self.session = None;
                self.system_prompt = None;
                set_current_session(None);
            } else {
                store.undo_last_turn(&session_id).map_err(runtime)?;
            }
        }
        if usage_reported {
            self.usage_reported = true;
            self.tokens.add(&outcome.usage);
        }
        self.last_turn = usage_reported.then_some(outcome.usage);
        Ok(TurnResult {
            final_text: outcome.final_text,
            stop: outcome.stop,
            usage: usage_reported.then_some(outcome.usage),
            rolled_back,
        })
    }

    /// Explains a non-completed stop on stderr; returns the exit code it deserves.
    pub fn report_stop(&self, result: &TurnResult) -> i32 {
        let style = term().err_style();
        let code = match &result.stop {
            StopReason::Completed => 0,
            StopReason::Interrupted => 130,
            _ => 1,
        };
        let unsaved = if result.rolled_back {
            " Nothing was saved; press ↑ to get your message back."
        } else {
            ""
        };
        match &result.stop {
            StopReason::Completed => {}
            StopReason::Interrupted if !self.view.quiet => {
                let kept = if result.rolled_back {
                    "Interrupted before an answer."
                } else {
                    "Interrupted; the partial answer is kept."
                };
                term().line(&style.yellow(kept));
            }
            StopReason::Interrupted => {}
            StopReason::ModelError(e) => term().line(&format!(
                "hermes: {}: {e}{unsaved}\n  {}",
                style.red("error"),
                provider_hint(&self.bench.settings, e)
            )),
            other => {
                if let Some(n) = other.notice(self.bench.settings.max_iterations) {
                    term().line(&format!("hermes: {n}"));
                }
            }
        }
        code
    }

    /// Starts `prompt` as a background run (`/background`); returns the
    /// line that says so.
    pub fn start_background(&self, prompt: &str) -> Result<String, CliError> {
        self.runs.start(&self.bench, prompt, self.view.styled)
    }

    /// The `/background` runs.
    pub fn background_runs(&self) -> &background::BackgroundRuns {
        &self.runs
    }

    /// Tells the Ctrl-C handler whether a turn runs.
    fn set_running(&self, running: bool) {
        if self.one_shot {
            sigint::set_running(running);
        } else {
            ctrl_c(&self.interrupt)
                .running
                .store(running, Ordering::Release);
        }
    }

    /// Tells the Ctrl-C handler whether the loop is waiting for input.
    pub fn at_prompt(&self, waiting: bool) {
        ctrl_c(&self.interrupt)
            .at_prompt
            .store(waiting, Ordering::Release);
    }

    /// The current session id, if one was created.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.id.as_str())
    }

    /// The current session.
    pub fn session(&self) -> Option<&SessionRecord> {
        self.session.as_ref()
    }

    /// The conversation so far.
    pub fn history(&self) -> &[LedgerEntry] {
        &self.history
    }

    /// The workbench (settings, store, model).
    pub fn bench(&self) -> &Workbench {
        &self.bench
    }

    /// The workbench, to change the model or the tools.
    pub fn bench_mut(&mut self) -> &mut Workbench {
        &mut self.bench
    }

    /// Marks the current session ended (leaving, or `/new`).
    pub fn close(&mut self) -> Result<(), CliError> {
        if let Some(id) = self.session_id().map(str::to_owned) {
            self.bench
                .store()
                .set_status(&id, SessionStatus::Ended)
                .map_err(runtime)?;
        }
        Ok(())
    }

    /// `/new`: the next message starts a new session, with a fresh budget.
    pub fn new_session(&mut self) -> Result<(), CliError> {
        self.close()?;
        // Fresh tools too: per-session tool state (the todo list) must not
        // carry over into the new conversation.
        self.bench.reset_tools()?;
        self.session = None;
        self.system_prompt = None;
        self.history.clear();
        self.tokens = Usage::default();
        self.usage_reported = false;
        self.last_turn = None;
        self.turns = 0;
        self.budget_left = None;
        set_current_session(None);
        Ok(())
    }

    /// `/undo`: drops the last user turn; returns its text.
    pub fn undo(&mut self) -> Result<Option<String>, CliError> {
        let Some(id) = self.session_id().map(str::to_owned) else {
            return Ok(None);
        };
        // What the user wrote, without a compaction summary merged before it.
        let last_user = self.history.iter().rev().find_map(|e| match &e.message {
            Message::User { .. } => {
                hermes_core::context::summary::original_text(e).map(str::to_owned)
            }
            _ => None,
        });
        let removed = self.bench.store().undo_last_turn(&id).map_err(runtime)?;
        self.history = self.bench.store().load_view(&id).map_err(runtime)?;
        Ok(last_user.filter(|_| removed > 0))
    }

    /// `/compress [focus]`: compacts the conversation now (SPEC X1) and
    /// says what it saved.
    pub fn compress(&mut self, focus: Option<&str>) -> Result<String, CliError> {
        let (Some(id), Some(prompt)) = (
            self.session_id().map(str::to_owned),
            self.system_prompt.clone(),
        ) else {
            return Ok("Nothing to compress yet.".into());
        };
        let agent = self.bench.agent(&prompt)?;
        let before = self.history.len();
        let mut history = self.history.clone();
        match agent.compact(&mut history, focus) {
            Ok(c) => {
                self.bench
                    .store()
                    .record_compaction(&id, &c)
                    .map_err(runtime)?;
                self.history = history;
                let window = self.bench.context.window.tokens();
                let pct = |t: u64| (t * 100).checked_div(u64::from(window)).unwrap_or(0);
                Ok(format!(
                    "Compressed: {} older messages became one summary, {} kept as they were; context ~{} → ~{} tokens of {window} ({} % → {} %).",
                    c.replaced,
                    c.head + c.tail,
                    c.tokens_before,
                    c.tokens_after,
                    pct(c.tokens_before),
                    pct(c.tokens_after)
                ))
            }
            Err(hermes_core::CompactError::NothingToCompact) => Ok(format!(
                "Nothing to compress yet ({before} messages in context)."
            )),
            Err(e) => Ok(format!(
                "Could not compress the conversation ({e}); nothing was changed."
            )),
        }
    }

    /// `context: 1234 / 8192 tokens (15 %)` and where the window came from.
    fn context_status(&self) -> String {
        let agent = match self
            .system_prompt
            .clone()
            .map_or_else(|| self.bench.assemble_prompt(), Ok)
            .and_then(|prompt| self.bench.agent(&prompt))
        {
            Ok(agent) => agent,
            Err(e) => return format!("context: unknown ({})", e.message()),
        };
        let from = self.bench.window().map_or_else(
            || "unknown".to_owned(),
            |w| format!("{} ({})", w.source, w.detail),
        );
        match agent.context_usage(&self.history) {
            Some(u) => format!(
                "context: {} / {} tokens ({} %), {} messages in context\nwindow from: {from}",
                u.used,
                u.window,
                u.percent(),
                self.history.len()
            ),
            None => "context: not managed".into(),
        }
    }

    /// `/usage`: the last turn's tokens, then the whole session's (from the
    /// store, so a resumed session counts its earlier turns), with the
    /// cache share and the cost where prices are known.
    pub fn usage(&self) -> Result<String, CliError> {
        use hermes_runtime::pricing::{cache_line, session_usage_text};
        let Some(session) = &self.session else {
            return Ok("No turn yet.".into());
        };
        let last = match &self.last_turn {
            Some(t) => format!(
                "last turn: {} prompt + {} completion tokens; {}",
                t.prompt_tokens,
                t.completion_tokens,
                cache_line(t)
            ),
            None => "last turn: no token counts reported".to_owned(),
        };
        let now = hermes_core::Clock::now_ms(&hermes_runtime::store::SystemClock);
        let report = session_usage_text(&self.bench.settings, &self.bench.store, &session.id, now)
            .map_err(runtime)?;
        Ok(format!("{last}\nthis session:\n{report}"))
    }

    /// `/status`.
    pub fn status(&self) -> String {
        let settings = &self.bench.settings;
        let tokens = if self.usage_reported {
            format!(
                "{} prompt + {} completion = {}\n{}",
                self.tokens.prompt_tokens,
                self.tokens.completion_tokens,
                self.tokens.total_tokens,
                hermes_runtime::pricing::cache_line(&self.tokens)
            )
        } else if self.turns == 0 {
            "none yet".to_owned()
        } else {
            "not reported by the provider".to_owned()
        };
        let session = match &self.session {
            Some(s) => format!("{} ({})", s.id, s.title.as_deref().unwrap_or("untitled")),
            None => "(none yet: the next message starts one)".to_owned(),
        };
        format!(
            "model: {} ({} at {})\nsession: {session}\nmessages: {}\nbudget: {}\ntokens: {tokens}\n{}",
            self.bench.model,
            settings.provider.provider_name,
            settings.provider.display_url(),
            self.history.len(),
            self.budget_left.map_or_else(
                || format!("{} model calls per turn", settings.max_iterations),
                |b| format!(
                    "{b} of {} model calls left after the last turn",
                    settings.max_iterations
                )
            ),
            self.context_status(),
        )
    }
}

/// A session title from its first message: the first line, cut at a word
/// boundary near 60 characters.
pub fn title_from(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= 60 {
        return line.to_owned();
    }
    let cut: String = line.chars().take(60).collect();
    let at_word = cut.rfind(' ').filter(|i| *i > 30).unwrap_or(cut.len());
    format!("{}…", cut[..at_word].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_come_from_the_first_line() {
        assert_eq!(title_from("\n  Fix the build \nplease"), "Fix the build");
        let long = "word ".repeat(30);
        let t = title_from(&long);
        assert!(t.ends_with('…') && t.chars().count() <= 61, "{t}");
    }
}
