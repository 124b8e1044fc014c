//! Slash commands handled by the gateway itself, never sent to the model
//! (SPEC G12).
//!
//! A command is a `/` followed by a word of ASCII letters, digits or `_`,
//! optionally `@botname` (Telegram appends the bot's name in groups), then
//! whitespace or the end. Anything else that starts with `/` — a path such
//! as `/usr/bin/x`, a lone `/` — is ordinary text for the agent.

/// A recognised command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `/new` or `/reset`: start a fresh conversation.
    New,
    /// `/model` (show) or `/model NAME` (switch).
    Model(Option<String>),
    /// `/undo`: drop the last exchange.
    Undo,
    /// `/compress [focus]`: compact the conversation now (SPEC X1),
    /// optionally steering the summary toward a topic.
    Compress(Option<String>),
    /// `/status`: what this session is doing.
    Status,
    /// `/usage`: tokens, cache share and cost of this conversation.
    Usage,
    /// `/stop`: interrupt the running turn and drop waiting messages.
    Stop,
    /// `/help`: the list of commands.
    Help,
    /// `/approve` (once) or `/approve always` (this kind of command for the
    /// rest of the conversation): answers a waiting approval question.
    Approve {
        /// `/approve always`.
        always: bool,
    },
    /// `/deny`: refuses a waiting approval question.
    Deny,
    /// `/sethome`: this chat becomes its platform's home channel (SPEC Y2).
    SetHome,
    /// `/cron` (this chat's scheduled jobs) or `/cron remove ID` (SPEC Y1).
    Cron(Option<String>),
    /// `/skills`: the saved skills (SPEC Y8).
    Skills,
    /// `/title` (show) or `/title TEXT` (name this conversation).
    Title(Option<String>),
    /// `/sessions`: this chat's recent conversations.
    Sessions,
    /// `/queue TEXT`: answer TEXT after the running turn, without
    /// interrupting it (whatever the busy mode).
    Queue(String),
    /// `/retry`: remove the last exchange and send its message again.
    Retry,
    /// `/background PROMPT`: run PROMPT as a separate session in the
    /// background; its answer comes to this chat when done (issue 46).
    Background(String),
    /// `/steer TEXT`: hand TEXT to the running turn, which the model reads
    /// at its next step (SPEC Y5); a plain message when nothing runs.
    Steer(String),
    /// `/resume` (list) or `/resume ID_OR_TITLE`: continue an earlier
    /// conversation of this chat.
    Resume(Option<String>),
    /// `/reasoning` (show) or `/reasoning none|low|medium|high|on|off|show|hide`:
    /// this chat's reasoning effort and whether the reasoning is shown.
    Reasoning(Option<String>),
    /// `/personality` (list) or `/personality NAME|none`: this chat's
    /// personality, a named overlay on the system prompt.
    Personality(Option<String>),
    /// `/voice` (show) or `/voice on|off|auto`: whether this chat's answers
    /// are spoken (the gateway's `voice`).
    Voice(Option<String>),
    /// `/memory`: what the bot remembers about the sender (issue 44).
    Memory,
    /// `/forget`: erase the sender's own memory and profile.
    Forget,
    /// A word that looks like a command but is none of ours.
    Unknown(String),
}

/// Every command word, for suggestions.
pub const NAMES: &[&str] = &[
    "new",
    "reset",
    "model",
    "undo",
    "compress",
    "status",
    "usage",
    "stop",
    "help",
    "approve",
    "deny",
    "title",
    "sessions",
    "queue",
    "retry",
    "sethome",
    "cron",
    "skills",
    "steer",
    "resume",
    "reasoning",
    "personality",
    "voice",
    "memory",
    "forget",
    "background",
];

/// The reply to an unknown command: the closest command, if one is close.
pub fn unknown_text(word: &str) -> String {
    let hint = hermes_runtime::config::did_you_mean(word, NAMES.iter().copied())
        .map(|c| format!(" Did you mean /{c}?"))
        .unwrap_or_default();
    format!("Unknown command /{word}.{hint} Send /help for the list.")
}

/// The `/help` text.
pub const HELP: &str = "Commands:\n\
/new or /reset: start a new conversation\n\
/model NAME: switch model (/model alone shows it)\n\
/undo: remove the last exchange\n\
/compress [topic]: summarise older messages now to free context (focus on a topic)\n\
/status: show this session's state\n\
/usage: tokens, cache share and cost of this conversation\n\
/stop: stop the current reply and drop waiting messages\n\
/approve, /approve always, /deny: answer a request to run a dangerous command\n\
/sethome: make this chat the home channel scheduled jobs deliver to\n\
/cron, /cron remove ID: this chat's scheduled jobs\n\
/skills: the skills the agent has saved\n\
/retry: remove the last exchange and send its message again\n\
/title [TEXT]: show or set this conversation's title\n\
/sessions: this chat's recent conversations\n\
/queue TEXT: answer TEXT after the current reply, without interrupting it\n\
/steer TEXT: add TEXT to the current reply; the model reads it at its next step\n\
/background PROMPT: work on PROMPT separately; the answer comes here when done\n\
/resume [ID or title]: continue an earlier conversation of this chat (alone: the list)\n\
/reasoning [none|low|medium|high|on|off|show|hide]: reasoning effort, and whether to show it\n\
/personality [NAME|none]: answer in a personality (alone: the list)\n\
/voice [on|off|auto]: spoken replies in this chat (auto: a voice note gets one)\n\
/memory: what I remember about you (yours only; the shared memory is shown too)\n\
/forget: erase what I remember about you\n\
/help: this list";

/// The command menu a platform shows (Telegram's `setMyCommands`): each
/// line of [`HELP`], its first command and its description — so the menu
/// and `/help` never disagree.
pub fn menu() -> Vec<(&'static str, &'static str)> {
    HELP.lines()
        .skip(1)
        .filter_map(|line| {
            let (names, description) = line.split_once(": ")?;
            let name = names.strip_prefix('/')?;
            let end = name
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            Some((&name[..end], description))
        })
        .collect()
}

/// Parses `text` as a command; `None` means it is ordinary text.
pub fn parse_command(text: &str) -> Option<Command> {
    let text = text.trim_start();
    let rest = text.strip_prefix('/')?;
    let word_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (word, after) = rest.split_at(word_end);
    if word.is_empty() {
        return None;
    }
    // `/cmd@botname`: skip the bot name.
    let after = match after.strip_prefix('@') {
        Some(bot) => {
            let end = bot
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(bot.len());
            if end == 0 {
                return None;
            }
            &bot[end..]
        }
        None => after,
    };
    if !(after.is_empty() || after.starts_with(char::is_whitespace)) {
        return None;
    }
    let arg = after.trim();
    let command = match word.to_ascii_lowercase().as_str() {
        "new" | "reset" => Command::New,
        "model" => Command::Model((!arg.is_empty()).then(|| arg.to_owned())),
        "undo" => Command::Undo,
        "compress" | "compact" => Command::Compress((!arg.is_empty()).then(|| arg.to_owned())),
        "status" => Command::Status,
        "usage" => Command::Usage,
        "stop" => Command::Stop,
        "help" | "start" => Command::Help,
        "approve" => Command::Approve {
            always: arg.eq_ignore_ascii_case("always"),
        },
        "deny" => Command::Deny,
        "sethome" => Command::SetHome,
        "cron" => Command::Cron((!arg.is_empty()).then(|| arg.to_owned())),
        "skills" => Command::Skills,
        "title" => Command::Title((!arg.is_empty()).then(|| arg.to_owned())),
        "sessions" => Command::Sessions,
        "queue" => Command::Queue(arg.to_owned()),
        "retry" => Command::Retry,
        "background" | "bg" => Command::Background(arg.to_owned()),
        "steer" => Command::Steer(arg.to_owned()),
        "resume" => Command::Resume((!arg.is_empty()).then(|| arg.to_owned())),
        "reasoning" => Command::Reasoning((!arg.is_empty()).then(|| arg.to_ascii_lowercase())),
        "personality" => Command::Personality((!arg.is_empty()).then(|| arg.to_owned())),
        "voice" => Command::Voice((!arg.is_empty()).then(|| arg.to_ascii_lowercase())),
        "memory" => Command::Memory,
        "forget" => Command::Forget,
        _ => Command::Unknown(word.to_owned()),
    };
    Some(command)
}

/// The `/skills` answer: each skill's name and description.
pub fn skills_text(skills: &[hermes_runtime::skills::SkillSummary]) -> String {
    if skills.is_empty() {
        return "No skills yet. The agent saves one when a procedure is worth keeping; \
                `hermes skills install PATH` adds one."
            .to_owned();
    }
    let mut text = format!("Skills ({}):", skills.len());
    for s in skills {
        text.push_str(&format!("\n- {}: {}", s.name, s.description));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_text() {
        assert_eq!(parse_command("/new"), Some(Command::New));
        assert_eq!(parse_command("/reset"), Some(Command::New));
        assert_eq!(parse_command("  /NEW  "), Some(Command::New));
        assert_eq!(parse_command("/new@hermes_bot"), Some(Command::New));
        assert_eq!(
            parse_command("/model@hermes_bot gpt-4o"),
            Some(Command::Model(Some("gpt-4o".into())))
        );
        assert_eq!(parse_command("/model"), Some(Command::Model(None)));
        assert_eq!(parse_command("/undo"), Some(Command::Undo));
        assert_eq!(parse_command("/compress"), Some(Command::Compress(None)));
        assert_eq!(
            parse_command("/compress@hermes_bot  the deployment plan "),
            Some(Command::Compress(Some("the deployment plan".into())))
        );
        assert_eq!(parse_command("/status"), Some(Command::Status));
        assert_eq!(parse_command("/usage"), Some(Command::Usage));
        assert_eq!(parse_command("/stop"), Some(Command::Stop));
        assert_eq!(parse_command("/help"), Some(Command::Help));
        assert_eq!(
            parse_command("/approve"),
            Some(Command::Approve { always: false })
        );
        assert_eq!(
            parse_command("/approve@hermes_bot ALWAYS"),
            Some(Command::Approve { always: true })
        );
        assert_eq!(parse_command("/deny"), Some(Command::Deny));
        assert_eq!(parse_command("/sethome@hermes_bot"), Some(Command::SetHome));
        assert_eq!(parse_command("/cron"), Some(Command::Cron(None)));
        assert_eq!(
            parse_command("/cron remove j12"),
            Some(Command::Cron(Some("remove j12".into())))
        );
        assert_eq!(parse_command("/skills"), Some(Command::Skills));
        assert_eq!(parse_command("/memory@hermes_bot"), Some(Command::Memory));
        assert_eq!(parse_command("/forget"), Some(Command::Forget));
        assert_eq!(
            parse_command("/frobnicate x"),
            Some(Command::Unknown("frobnicate".into()))
        );
        assert_eq!(
            parse_command("/title  Trip planning "),
            Some(Command::Title(Some("Trip planning".into())))
        );
        assert_eq!(parse_command("/sessions"), Some(Command::Sessions));
        assert_eq!(
            parse_command("/queue and then this"),
            Some(Command::Queue("and then this".into()))
        );
        assert_eq!(parse_command("/retry"), Some(Command::Retry));
        assert_eq!(
            parse_command("/steer  look at B too "),
            Some(Command::Steer("look at B too".into()))
        );
        assert_eq!(
            parse_command("/resume 20260101-abc"),
            Some(Command::Resume(Some("20260101-abc".into())))
        );
        assert_eq!(parse_command("/resume"), Some(Command::Resume(None)));
        assert_eq!(
            parse_command("/reasoning HIGH"),
            Some(Command::Reasoning(Some("high".into())))
        );
        assert_eq!(
            parse_command("/personality@hermes_bot pirate"),
            Some(Command::Personality(Some("pirate".into())))
        );
        assert_eq!(parse_command("/usr/bin/x"), None);
        assert_eq!(parse_command("/"), None);
        assert_eq!(parse_command("/ new"), None);
        assert_eq!(parse_command("/new@"), None);
        assert_eq!(parse_command("/new.txt"), None);
        assert_eq!(parse_command("hello /new"), None);
    }

    #[test]
    fn unknown_commands_get_the_closest_one_and_help_lists_every_command() {
        assert!(unknown_text("stauts").contains("Did you mean /status?"));
        assert!(unknown_text("retyr").contains("Did you mean /retry?"));
        assert!(unknown_text("stear").contains("Did you mean /steer?"));
        assert!(unknown_text("resum").contains("Did you mean /resume?"));
        assert!(unknown_text("reasonning").contains("Did you mean /reasoning?"));
        assert!(unknown_text("personalty").contains("Did you mean /personality?"));
        assert!(!unknown_text("zzzzzz").contains("Did you mean"));
        for name in NAMES {
            assert!(
                HELP.contains(&format!("/{name}")),
                "/{name} missing from /help"
            );
        }
    }

    #[test]
    fn the_menu_is_the_help_text_and_fits_telegram() {
        let menu = menu();
        assert_eq!(menu.len(), HELP.lines().count() - 1, "{menu:?}");
        for (name, description) in &menu {
            assert!(NAMES.contains(name), "{name}");
            // Telegram: 1-32 of a-z, 0-9, _; a description of 1-256.
            assert!(
                (1..=32).contains(&name.len())
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
            assert!(
                (1..=256).contains(&description.chars().count()),
                "{description}"
            );
        }
        assert!(menu.contains(&("new", "start a new conversation")));
        assert!(menu.iter().any(|(n, _)| *n == "help"));
    }
}
