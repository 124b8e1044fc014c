//! Slash commands of the interactive loop. [`COMMANDS`] is the one list:
//! `/help`, Tab completion and did-you-mean all read it.

use crate::app::{CliError, runtime};
use crate::chat::Chat;
use crate::term::term;

/// A slash command: its name, its argument (for `/help`) and what it does.
#[derive(Clone, Copy, Debug)]
pub struct SlashCommand {
    /// Without the slash.
    pub name: &'static str,
    /// Argument synopsis, `""` for none.
    pub args: &'static str,
    /// One line of help.
    pub help: &'static str,
}

const fn cmd(name: &'static str, args: &'static str, help: &'static str) -> SlashCommand {
    SlashCommand { name, args, help }
}

/// Every command, in `/help` order.
pub const COMMANDS: &[SlashCommand] = &[
    cmd(
        "new",
        "",
        "end this session; the next message starts a new one",
    ),
    cmd(
        "model",
        "[NAME] [--force]",
        "show or switch the model (checked against the provider's list)",
    ),
    cmd("models", "", "list the models the provider offers"),
    cmd("tools", "", "list the tools the model may use"),
    cmd(
        "undo",
        "",
        "drop the last turn (your message and the answer)",
    ),
    cmd(
        "retry",
        "",
        "drop the last turn and send the same message again",
    ),
    cmd("title", "TEXT", "rename this session"),
    cmd(
        "compress",
        "[TOPIC]",
        "summarise older messages now to free context (focus on TOPIC)",
    ),
    cmd(
        "status",
        "",
        "model, session, budget, tokens used, cache share, context window",
    ),
    cmd(
        "usage",
        "",
        "tokens of the last turn and of the session, cost where prices are known",
    ),
    cmd(
        "background",
        "PROMPT",
        "work on PROMPT as a separate session while you keep chatting; its answer shows at a prompt",
    ),
    cmd("help", "", "this list"),
    cmd("exit", "", "leave (also /quit or Ctrl-D)"),
];

/// Other spellings.
const ALIASES: &[(&str, &str)] = &[
    ("quit", "exit"),
    ("reset", "new"),
    ("clear", "new"),
    ("rename", "title"),
    ("compact", "compress"),
    ("bg", "background"),
];

/// The `/help` text.
pub fn help() -> String {
    let style = term().out_style();
    let mut out = String::from("Commands:\n");
    for c in COMMANDS {
        let synopsis = if c.args.is_empty() {
            format!("/{}", c.name)
        } else {
            format!("/{} {}", c.name, c.args)
        };
        let aliases: Vec<String> = ALIASES
            .iter()
            .filter(|(_, real)| *real == c.name)
            .map(|(alias, _)| format!("/{alias}"))
            .collect();
        let also = if aliases.is_empty() {
            String::new()
        } else {
            format!(" (also {})", aliases.join(", "))
        };
        out.push_str(&format!(
            "  {}  {}{also}\n",
            style.bold(&format!("{synopsis:<26}")),
            c.help
        ));
    }
    out.push_str(
        "\nKeys:\n  \
         Enter               send\n  \
         Alt-Enter, Ctrl-J   new line (pasted text keeps its lines too)\n  \
         Tab                 complete a /command\n  \
         ↑ ↓, Ctrl-R         history, search history\n  \
         Ctrl-C              clear the line; while the agent works, interrupt it (twice while it works: quit)\n  \
         Ctrl-D, /exit       quit",
    );
    out
}

/// What the loop should do with a line.
pub enum Action {
    /// The command ran; read the next line.
    Handled,
    /// Leave.
    Exit,
    /// Send this text as a user message.
    Send(String),
}

/// Runs `input` if it is a slash command; anything else is sent.
pub fn handle(chat: &mut Chat, input: &str) -> Result<Action, CliError> {
    let Some(rest) = input.strip_prefix('/') else {
        return Ok(Action::Send(input.to_owned()));
    };
    let (name, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    // `/usr/bin/x`-like text is a message, not a command.
    if name.contains('/') || name.is_empty() {
        return Ok(Action::Send(input.to_owned()));
    }
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, real)| *real);
    let arg = arg.trim();
    let say = |text: &str| term().println(text);
    match name {
        "exit" => return Ok(Action::Exit),
        "help" => say(&help()),
        "new" => {
            chat.new_session()?;
            say("Started a new session.");
        }
        "status" => say(&chat.status()),
        "usage" => say(&chat.usage()?),
        "compress" => {
            let focus = (!arg.is_empty()).then_some(arg);
            say(&chat.compress(focus)?);
        }
        "model" => model(chat, arg)?,
        "background" if arg.is_empty() => say(
            "Usage: /background PROMPT (works on PROMPT as a separate session while you keep chatting)",
        ),
        "background" => match chat.start_background(arg) {
            Ok(line) => say(&line),
            Err(e) => say(&format!(
                "Cannot start the background task: {}",
                e.message()
            )),
        },
        "tools" => say(&tools(chat)),
        "models" => match chat.bench().client.list_models() {
            Ok(models) => say(&crate::admin::model_table(&models, &chat.bench().model)),
            Err(e) => say(&format!("Cannot list the models: {e}")),
        },
        "undo" => match chat.undo()? {
            Some(text) => say(&format!(
                "Removed the last turn: {}",
                crate::display::one_line(&text, 60)
            )),
            None => say("Nothing to undo."),
        },
        "retry" => match chat.undo()? {
            Some(text) => return Ok(Action::Send(text)),
            None => say("Nothing to retry."),
        },
        "title" if arg.is_empty() => say(&format!(
            "Title: {} (/title TEXT renames the session)",
            chat.session()
                .and_then(|s| s.title.as_deref())
                .unwrap_or("(none)")
        )),
        "title" => match chat.session_id().map(str::to_owned) {
            Some(id) => {
                chat.bench()
                    .store()
                    .set_title(&id, Some(arg))
                    .map_err(runtime)?;
                say(&format!("Session renamed to “{arg}”."));
            }
            None => say("No session yet: send a message first."),
        },
        other => say(&unknown(other)),
    }
    Ok(Action::Handled)
}

/// `/tools`: each tool the model may use, with the first sentence of what
/// it does.
fn tools(chat: &Chat) -> String {
    let tools = match chat.bench().tools() {
        Ok(tools) => tools,
        Err(e) => return format!("The tools could not be built: {}", e.message()),
    };
    let specs = tools.specs();
    if specs.is_empty() {
        return "No tools: the model only talks ([agent] toolsets is empty).".to_owned();
    }
    let style = term().out_style();
    let mut out = format!(
        "{} tool{}:\n",
        specs.len(),
        if specs.len() == 1 { "" } else { "s" }
    );
    for spec in specs {
        let first = spec
            .description
            .split_once(". ")
            .map_or(spec.description.as_str(), |(first, _)| first);
        out.push_str(&format!(
            "  {}  {}\n",
            style.bold(&format!("{:<18}", spec.name)),
            crate::display::one_line(first, 70)
        ));
    }
    out.truncate(out.trim_end().len());
    out
}

/// "Unknown command /x. Did you mean /y?"
pub fn unknown(name: &str) -> String {
    let names = COMMANDS
        .iter()
        .map(|c| c.name)
        .chain(ALIASES.iter().map(|(a, _)| *a));
    match hermes_runtime::config::did_you_mean(name, names) {
        Some(m) => format!("Unknown command /{name}. Did you mean /{m}? (/help lists commands)"),
        None => format!("Unknown command /{name}. /help lists commands."),
    }
}

/// `/model`, `/model NAME`, `/model NAME --force`.
fn model(chat: &mut Chat, arg: &str) -> Result<(), CliError> {
    let say = |text: &str| term().println(text);
    if arg.is_empty() {
        say(&format!(
            "model: {} (/model NAME switches, /models lists)",
            chat.bench().model
        ));
        return Ok(());
    }
    let mut force = false;
    let mut name = None;
    for word in arg.split_whitespace() {
        match word {
            "--force" | "-f" => force = true,
            w => name = Some(w.to_owned()),
        }
    }
    let Some(name) = name else {
        say("Usage: /model NAME [--force]");
        return Ok(());
    };
    if !force {
        match chat.bench().client.list_models() {
            Ok(models) if !models.is_empty() && !models.contains(&name) => {
                let hint =
                    hermes_runtime::config::did_you_mean(&name, models.iter().map(String::as_str))
                        .map(|m| format!(" Did you mean {m}?"))
                        .unwrap_or_default();
                say(&format!(
                    "The provider does not offer '{name}'.{hint} /models lists what it offers; \
                     /model {name} --force uses it anyway."
                ));
                return Ok(());
            }
            Ok(_) => {}
            Err(e) => say(&format!(
                "(could not check the name against the provider's list: {e})"
            )),
        }
    }
    chat.bench_mut().set_model(&name)?;
    if let Some(id) = chat.session_id().map(str::to_owned) {
        chat.bench()
            .store()
            .set_model(&id, &name)
            .map_err(runtime)?;
    }
    say(&format!("Model set to {name}."));
    Ok(())
}
