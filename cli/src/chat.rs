//! `hermes chat`: one-shot and interactive conversations over stored sessions.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hermes_core::{InterruptFlag, IterationBudget, LedgerEntry, Message, StopReason, Usage};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{NewSession, SessionRecord};

use crate::app::{CliError, Workbench, provider_hint, runtime};
use crate::args::ChatArgs;
use crate::display::{Spinner, TurnObserver};

/// Routes Ctrl-C: interrupts a running turn (SPEC L11); outside a turn, or
/// pressed twice within two seconds, it exits with status 130.
struct CtrlC {
    running: AtomicBool,
    flag: InterruptFlag,
    last: Mutex<Option<Instant>>,
}

static CTRL_C: OnceLock<Arc<CtrlC>> = OnceLock::new();

fn ctrl_c(flag: &InterruptFlag) -> Arc<CtrlC> {
    CTRL_C
        .get_or_init(|| {
            let state = Arc::new(CtrlC {
                running: AtomicBool::new(false),
                flag: flag.clone(),
                last: Mutex::new(None),
            });
            let s = state.clone();
            let installed = ctrlc::set_handler(move || {
                if !s.running.load(Ordering::Acquire) {
                    eprintln!();
                    std::process::exit(130);
                }
                let mut last = s
                    .last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if last.is_some_and(|t| t.elapsed() < Duration::from_secs(2)) {
                    eprintln!("\nexiting");
                    std::process::exit(130);
                }
                *last = Some(Instant::now());
                s.flag.interrupt();
                eprintln!("\n(interrupting — press Ctrl-C again to quit)");
            });
            if let Err(e) = installed {
                tracing::warn!("cannot install the Ctrl-C handler: {e}");
            }
            state
        })
        .clone()
}

/// What a turn ended with.
pub struct TurnResult {
    /// The final (possibly partial) answer.
    pub final_text: String,
    /// Why it stopped.
    pub stop: StopReason,
}

/// One conversation: the session, its history and its counters.
pub struct Chat {
    bench: Workbench,
    session: Option<SessionRecord>,
    history: Vec<LedgerEntry>,
    system_prompt: Option<String>,
    tokens: Usage,
    budget_left: Option<u32>,
    interrupt: InterruptFlag,
    quiet: bool,
}

impl Chat {
    /// Opens the conversation `args` asks for (new, `--resume ID` or `--continue`).
    pub fn open(bench: Workbench, args: &ChatArgs, quiet: bool) -> Result<Self, CliError> {
        let mut chat = Chat {
            bench,
            session: None,
            history: Vec::new(),
            system_prompt: None,
            tokens: Usage::default(),
            budget_left: None,
            interrupt: InterruptFlag::new(),
            quiet,
        };
        let record = if let Some(id) = &args.resume {
            let found = chat.bench.store().session(id).map_err(runtime)?;
            Some(found.ok_or_else(|| {
                CliError::Config(format!(
                    "no session '{id}'; `hermes sessions list` shows the stored ones"
                ))
            })?)
        } else if args.continue_latest {
            // The most recently active *terminal* session: gateway sessions
            // of chat users are not the CLI's to continue.
            let found = chat
                .bench
                .store()
                .latest_session_on("cli")
                .map_err(runtime)?;
            Some(found.ok_or_else(|| {
                CliError::Config(
                    "there is no session to continue yet; start one with `hermes chat`".into(),
                )
            })?)
        } else {
            None
        };
        if let Some(record) = record {
            chat.attach(record)?;
        }
        Ok(chat)
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
        self.history = self.bench.store().load_view(&record.id).map_err(runtime)?;
        self.system_prompt = match &record.system_prompt {
            Some(p) => Some(p.clone()),
            None => {
                // A session stored without a prompt gets one now, kept from here on.
                let p = self.bench.assemble_prompt();
                self.bench
                    .store()
                    .set_system_prompt(&record.id, &p)
                    .map_err(runtime)?;
                Some(p)
            }
        };
        self.session = Some(record);
        Ok(())
    }

    /// The current session, created (with its prompt assembled once) on first use.
    fn ensure_session(&mut self) -> Result<(String, String), CliError> {
        if let (Some(s), Some(p)) = (&self.session, &self.system_prompt) {
            return Ok((s.id.clone(), p.clone()));
        }
        let prompt = self.bench.assemble_prompt();
        let record = self
            .bench
            .store()
            .create_session(&NewSession {
                platform: Some("cli"),
                model: Some(&self.bench.model),
                system_prompt: Some(&prompt),
                ..NewSession::default()
            })
            .map_err(runtime)?;
        let id = record.id.clone();
        self.session = Some(record);
        self.system_prompt = Some(prompt.clone());
        Ok((id, prompt))
    }

    /// Runs one user turn.
    pub fn turn(&mut self, text: &str, interactive: bool) -> Result<TurnResult, CliError> {
        let (session_id, prompt) = self.ensure_session()?;
        let agent = self
            .bench
            .agent(&prompt)
            .with_interrupt(self.interrupt.clone());
        let budget = IterationBudget::new(self.bench.settings.max_iterations);
        let spinner = Spinner::start(interactive && !self.quiet);
        let guard = ctrl_c(&self.interrupt);
        guard.running.store(true, Ordering::Release);
        let history = std::mem::take(&mut self.history);
        let mut observer = TurnObserver {
            stream_text: interactive,
            verbose: !self.quiet,
            writer: TurnWriter::new(&self.bench.store, &session_id),
            spinner: &spinner,
            interrupt: &self.interrupt,
            mid_line: false,
        };
        let outcome = agent.run(text, history, &budget, &mut observer);
        guard.running.store(false, Ordering::Release);
        let persist_error = observer.writer.failure().map(ToString::to_string);
        drop(observer);
        drop(spinner);
        self.history = outcome.messages;
        self.tokens.add(&outcome.usage);
        self.budget_left = Some(budget.remaining());
        if let Some(e) = persist_error {
            return Err(CliError::Runtime(format!(
                "the answer could not be saved to the session database: {e}"
            )));
        }
        Ok(TurnResult {
            final_text: outcome.final_text,
            stop: outcome.stop,
        })
    }

    /// Explains a non-completed stop on stderr; returns the exit code it deserves.
    pub fn report_stop(&self, stop: &StopReason) -> i32 {
        let notice = stop.notice(self.bench.settings.max_iterations);
        let code = match stop {
            StopReason::Completed => 0,
            StopReason::Interrupted => 130,
            _ => 1,
        };
        if let Some(n) = notice
            && (!self.quiet || code == 1)
        {
            match stop {
                StopReason::ModelError(_) => {
                    eprintln!("hermes: {n} {}", provider_hint(&self.bench.settings))
                }
                _ => eprintln!("hermes: {n}"),
            }
        }
        code
    }

    /// The current session id, if one was created.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.id.as_str())
    }

    /// `/new`: the next message starts a new session.
    fn new_session(&mut self) -> Result<(), CliError> {
        // Fresh tools too: per-session tool state (the todo list) must not
        // carry over into the new conversation.
        self.bench.reset_tools()?;
        self.session = None;
        self.system_prompt = None;
        self.history.clear();
        self.tokens = Usage::default();
        Ok(())
    }

    /// `/undo`: drops the last user turn; returns its text.
    fn undo(&mut self) -> Result<Option<String>, CliError> {
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
    fn compress(&mut self, focus: Option<&str>) -> Result<String, CliError> {
        let (Some(id), Some(prompt)) = (
            self.session_id().map(str::to_owned),
            self.system_prompt.clone(),
        ) else {
            return Ok("Nothing to compress yet.".into());
        };
        let agent = self.bench.agent(&prompt);
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
        let prompt = self
            .system_prompt
            .clone()
            .unwrap_or_else(|| self.bench.assemble_prompt());
        let agent = self.bench.agent(&prompt);
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

    fn status(&self) -> String {
        format!(
            "model: {} ({} at {})\nsession: {}\nmessages: {}\nbudget left after the last turn: {}\ntokens used: {} prompt + {} completion = {}\n{}",
            self.bench.model,
            self.bench.settings.provider.provider_name,
            self.bench.settings.provider.base_url,
            self.session_id().unwrap_or("(none yet)"),
            self.history.len(),
            self.budget_left.map_or_else(
                || format!("{} (no turn yet)", self.bench.settings.max_iterations),
                |b| b.to_string()
            ),
            self.tokens.prompt_tokens,
            self.tokens.completion_tokens,
            self.tokens.total_tokens,
            self.context_status(),
        )
    }
}

/// `hermes chat -q PROMPT` / `hermes -z PROMPT`.
pub fn oneshot(
    bench: Workbench,
    args: &ChatArgs,
    prompt: &str,
    quiet: bool,
) -> Result<i32, CliError> {
    let mut chat = Chat::open(bench, args, quiet)?;
    let result = chat.turn(prompt, false)?;
    if let StopReason::ModelError(e) = &result.stop
        && result.final_text.is_empty()
    {
        return Err(CliError::Runtime(format!(
            "{e} {}",
            provider_hint(&chat.bench.settings)
        )));
    }
    if !result.final_text.is_empty() {
        let mut out = std::io::stdout().lock();
        let written = writeln!(out, "{}", result.final_text).and_then(|_| out.flush());
        if let Err(e) = written {
            // A closed pipe (`hermes -z … | head -0`) is not an error worth a message.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(runtime(format!("cannot write the answer: {e}")));
            }
        }
    }
    Ok(chat.report_stop(&result.stop))
}

const HELP: &str = "\
Commands:
  /new          start a new session
  /model NAME   switch the model for the following turns
  /undo         drop the last turn (your message and the answer)
  /retry        drop the last turn and send the same message again
  /compress [TOPIC]  summarise older messages now to free context (focus on TOPIC)
  /status       model, session, budget left, tokens used, context window
  /help         this list
  /exit         quit (also Ctrl-D, or Ctrl-C at an empty prompt)
Ctrl-C while the agent works interrupts the turn and keeps the partial answer.";

/// `hermes chat` without `-q`: the interactive loop.
pub fn interactive(bench: Workbench, args: &ChatArgs, quiet: bool) -> Result<i32, CliError> {
    use rustyline::error::ReadlineError;

    let history_path = bench.settings.home.join(".cli_history");
    let mut chat = Chat::open(bench, args, quiet)?;
    let mut editor = rustyline::DefaultEditor::new()
        .map_err(|e| runtime(format!("cannot start line editing: {e}")))?;
    let _ = editor.load_history(&history_path);
    if !quiet {
        match chat.session_id() {
            Some(id) => eprintln!(
                "Resumed session {id} ({} messages). /help lists commands.",
                chat.history.len()
            ),
            None => eprintln!(
                "Hermes · model {} · /help lists commands, Ctrl-D quits.",
                chat.bench.model
            ),
        }
    }
    let prompt = if std::io::stdin().is_terminal() {
        "› "
    } else {
        ""
    };
    loop {
        let line = match editor.readline(prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => break,
            Err(e) => return Err(runtime(format!("cannot read input: {e}"))),
        };
        let input = line.trim();
        if input.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input);
        let to_send = match handle_command(&mut chat, input)? {
            Command::Handled => continue,
            Command::Exit => break,
            Command::Send(text) => text,
        };
        let result = chat.turn(&to_send, true)?;
        chat.report_stop(&result.stop);
    }
    if let Some(parent) = history_path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = editor.save_history(&history_path);
    Ok(0)
}

enum Command {
    Handled,
    Exit,
    Send(String),
}

fn handle_command(chat: &mut Chat, input: &str) -> Result<Command, CliError> {
    let Some(rest) = input.strip_prefix('/') else {
        return Ok(Command::Send(input.to_owned()));
    };
    let (name, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arg = arg.trim();
    match name {
        "exit" | "quit" => return Ok(Command::Exit),
        "help" => println!("{HELP}"),
        "new" | "reset" => {
            chat.new_session()?;
            println!("Started a new session.");
        }
        "status" => println!("{}", chat.status()),
        "compress" | "compact" => {
            let focus = (!arg.is_empty()).then_some(arg);
            println!("{}", chat.compress(focus)?);
        }
        "model" if arg.is_empty() => {
            println!("model: {} (use /model NAME to switch)", chat.bench.model)
        }
        "model" => {
            chat.bench.set_model(arg)?;
            if let Some(id) = chat.session_id().map(str::to_owned) {
                chat.bench.store().set_model(&id, arg).map_err(runtime)?;
            }
            println!("Model set to {arg}.");
        }
        "undo" => match chat.undo()? {
            Some(text) => println!(
                "Removed the last turn: {}",
                crate::display::summarize_args(&text, 60)
            ),
            None => println!("Nothing to undo."),
        },
        "retry" => match chat.undo()? {
            Some(text) => return Ok(Command::Send(text)),
            None => println!("Nothing to retry."),
        },
        // `/usr/bin/x`-like text is a message, not a command.
        _ if name.contains('/') => return Ok(Command::Send(input.to_owned())),
        other => println!("Unknown command /{other}. /help lists commands."),
    }
    Ok(Command::Handled)
}
