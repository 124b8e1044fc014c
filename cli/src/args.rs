// The command line, as clap sees it. Also read by `build.rs` (through
// `include!`) to generate the completions and the man page, so it holds
// only the definition: no inner attributes, nothing but clap and std.

use std::path::PathBuf;

use clap::{ArgMatches, Args, Error, FromArgMatches, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Examples:
  hermes                          interactive chat (/help lists commands)
  hermes -z \"explain this error\"  one-shot: print the answer and exit
  git diff | hermes -z \"review\"   the piped text follows the prompt
  hermes -c                       continue the latest session of this directory
  hermes setup                    choose a provider and a model

Data: $HERMES_HOME (default ~/.hermes). hermes-agent, the Python program, also uses ~/.hermes
and also installs a `hermes`: beside it, give this one its own home, HERMES_HOME=~/.hermes-rs.

Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error, 130 interrupted.";

/// Hermes: an AI agent that uses tools, in your terminal or behind chat platforms.
#[derive(Debug, Parser)]
#[command(
    name = "hermes",
    version,
    about,
    after_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub chat: ChatArgs,

    #[command(flatten)]
    pub provider: ProviderArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Provider and agent settings; they override the environment and config files.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Provider and agent")]
pub struct ProviderArgs {
    /// OpenAI-compatible base URL, e.g. https://openrouter.ai/api/v1 [env: HERMES_BASE_URL]
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// API key for the provider [env: HERMES_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY]
    #[arg(long, value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model name as the provider spells it (`hermes models` lists them) [env: HERMES_MODEL]
    #[arg(long, short = 'm', value_name = "NAME")]
    pub model: Option<String>,
    /// Most model calls one turn may make (default 90)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    /// Toolsets to enable, comma-separated: file, terminal, web, memory, todo, skills, delegate, mcp, cronjob, send_message; `none` for no tools (default: all)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub toolsets: Option<Vec<String>>,
    /// Working directory the file tools and the terminal's sandbox are confined to (default: the current directory)
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run terminal commands without the sandbox (Landlock): they can then read and write
    /// anything you can [config: [agent] sandbox = "off"]
    #[arg(long)]
    pub no_sandbox: bool,
    /// Let the file tools reach paths outside the working directory ($HERMES_HOME's secrets
    /// stay refused) [config: [agent] allow_outside_workdir = true]
    #[arg(long)]
    pub allow_outside_workdir: bool,
}

impl ProviderArgs {
    /// These settings, with `outer`'s (given before the subcommand, as in
    /// `hermes --no-sandbox doctor`) filling what these leave unset.
    pub fn or(self, outer: &ProviderArgs) -> ProviderArgs {
        ProviderArgs {
            base_url: self.base_url.or_else(|| outer.base_url.clone()),
            api_key: self.api_key.or_else(|| outer.api_key.clone()),
            model: self.model.or_else(|| outer.model.clone()),
            max_iterations: self.max_iterations.or(outer.max_iterations),
            toolsets: self.toolsets.or_else(|| outer.toolsets.clone()),
            cwd: self.cwd.or_else(|| outer.cwd.clone()),
            no_sandbox: self.no_sandbox || outer.no_sandbox,
            allow_outside_workdir: self.allow_outside_workdir || outer.allow_outside_workdir,
        }
    }
}

impl ChatArgs {
    /// Whether any chat option was given.
    pub fn any(&self) -> bool {
        self.query.is_some()
            || self.continue_latest
            || self.resume.is_some()
            || self.json
            || self.plain
    }
}

/// How a conversation is run and shown.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Chat")]
pub struct ChatArgs {
    /// One-shot: answer PROMPT, print only the answer, and exit; `-` reads the prompt from stdin,
    /// and piped stdin is appended to PROMPT
    #[arg(short = 'z', long = "query", short_alias = 'q', value_name = "PROMPT")]
    pub query: Option<String>,
    /// Continue the latest session started in this directory
    #[arg(long = "continue", short = 'c')]
    pub continue_latest: bool,
    /// Resume the session with this id (or a unique prefix of it)
    #[arg(
        long,
        short = 'r',
        value_name = "ID",
        conflicts_with = "continue_latest"
    )]
    pub resume: Option<String>,
    /// With -z: print one JSON object (answer, usage, session id, stop reason) instead of the answer
    #[arg(long, requires = "query")]
    pub json: bool,
    /// No markdown rendering or colour (also when stdout is not a terminal, or NO_COLOR is set)
    #[arg(long)]
    pub plain: bool,
    /// Silence progress, tool activity and warnings on stderr
    #[arg(long, short = 'Q')]
    pub quiet: bool,
    /// Show the model's reasoning, dimmed, on stderr while it streams
    #[arg(long)]
    pub show_reasoning: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Chat with the agent: interactive, or one-shot with -z (the default command)
    Chat(Deferred<ChatCommand>),
    /// Choose a provider and a model, test the connection, write config.toml
    Setup,
    /// List the models the provider offers
    Models(Deferred<ProviderArgs>),
    /// List, show, export, rename, delete and search stored sessions
    Sessions {
        #[command(subcommand)]
        command: Deferred<SessionsCommand>,
    },
    /// Check configuration, provider, database and prompt files, and say how to fix problems
    Doctor(Deferred<ProviderArgs>),
    /// Show the effective configuration (the default) or where it lives
    Config {
        #[command(subcommand)]
        command: Option<Deferred<ConfigCommand>>,
    },
    /// Run the chat-platform gateway: every platform set up in this home (`hermes gateway setup`)
    #[cfg(feature = "gateway")]
    Gateway {
        #[command(subcommand)]
        command: Deferred<GatewayCommand>,
    },
    /// Let strangers in: list pending pairing codes and approved users, approve, revoke
    #[cfg(feature = "gateway")]
    Pairing {
        #[command(subcommand)]
        command: Deferred<PairingCommand>,
    },
    /// Print a shell completion script: `hermes completions bash > ~/.local/share/bash-completion/completions/hermes`
    Completions {
        /// The shell
        shell: Shell,
    },
    /// Print the manual page (roff): `hermes man | man -l -`
    Man,
    /// MCP servers configured in config.toml ([mcp.servers.NAME])
    Mcp {
        #[command(subcommand)]
        command: Deferred<McpCommand>,
    },
    /// Scheduled jobs: the gateway runs them and delivers their answers
    Cron {
        #[command(subcommand)]
        command: Deferred<CronCommand>,
    },
    /// Webhook routes of the gateway ([webhooks.NAME] in config.toml)
    #[cfg(feature = "webhooks")]
    Webhook {
        #[command(subcommand)]
        command: Deferred<WebhookCommand>,
    },
    /// Skills in $HERMES_HOME/skills: list, show, install, remove, restore
    Skills {
        #[command(subcommand)]
        command: Deferred<SkillsCommand>,
    },
    /// Write one archive of this home: the sessions (a consistent copy, also while a gateway runs), memories, skills, personalities, scripts, config.toml
    Backup {
        /// The archive to write (default: hermes-backup-<time>.tar in the current directory)
        file: Option<PathBuf>,
        /// Include $HERMES_HOME/.env (keys and tokens); the archive is mode 0600 either way
        #[arg(long)]
        with_secrets: bool,
    },
    /// Import another program's home into $HERMES_HOME, reading it only: hermes-agent's sessions and memory
    #[cfg(feature = "import")]
    Import {
        /// The program whose home it is
        from: ImportFrom,
        /// Its home (default ~/.hermes)
        path: Option<PathBuf>,
        /// Show what would be imported; change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Restore a `hermes backup` archive into $HERMES_HOME (checked whole before anything changes)
    Restore {
        /// The archive
        file: PathBuf,
        /// Restore into a home that is not empty: what is there is moved to $HERMES_HOME/.replaced-<time>/
        #[arg(long)]
        force: bool,
    },
    /// Everyone's spending today and this month, against the [limits] caps
    Usage,
    /// Chat users' memories (each user's own): list, show, edit, forget
    Memory {
        #[command(subcommand)]
        command: Deferred<MemoryCommand>,
    },
}

/// `hermes memory` subcommands; a user is `PLATFORM:USER_ID`.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Whose memories exist (the owner first)
    List,
    /// Print a user's memory and profile, and the shared memory
    Show {
        /// PLATFORM:USER_ID, e.g. telegram:123456
        id: String,
    },
    /// Open a user's MEMORY.md (or USER.md with --profile) in $EDITOR
    Edit {
        /// PLATFORM:USER_ID
        id: String,
        /// Edit the profile (USER.md) instead
        #[arg(long)]
        profile: bool,
    },
    /// Erase a user's memory and profile
    Forget {
        /// PLATFORM:USER_ID
        id: String,
    },
}

/// The programs `hermes import` reads.
#[cfg(feature = "import")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFrom {
    /// hermes-agent, the Python program (0.19)
    HermesAgent,
}

/// `hermes cron` subcommands. IDs accept unique prefixes.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// List jobs: id, name, schedule, next run (local time), state, last outcome
    List {
        /// Also jobs that have finished
        #[arg(long)]
        all: bool,
        /// One JSON object per job
        #[arg(long)]
        json: bool,
    },
    /// Create a job and print its id. SCHEDULE: 30m, "every 2h", "0 9 * * *", 2026-12-24T09:00
    Create {
        /// When it runs
        schedule: String,
        /// What the agent does at each run (not needed with --no-agent)
        #[arg(required_unless_present = "no_agent", num_args = 1..)]
        prompt: Vec<String>,
        /// A short name
        #[arg(long)]
        name: Option<String>,
        /// Where answers go: local (default here), telegram (its home channel), telegram:CHAT_ID[:THREAD_ID]
        #[arg(long)]
        deliver: Option<String>,
        /// How many runs in all
        #[arg(long)]
        repeat: Option<u32>,
        /// A script in $HERMES_HOME/scripts/ run (sandboxed, like the terminal) before each run; its stdout is the agent's context
        #[arg(long, value_name = "PATH")]
        script: Option<String>,
        /// With --script: deliver the script's stdout as it is, without the agent (empty output sends nothing)
        #[arg(long, requires = "script")]
        no_agent: bool,
        /// Deliver an answer only when it differs from the last one delivered (the runs are recorded)
        #[arg(long)]
        silent_unless_changed: bool,
    },
    /// Pause a job
    Pause {
        /// Job id or a unique prefix of it
        id: String,
    },
    /// Resume a paused job
    Resume {
        /// Job id or a unique prefix of it
        id: String,
    },
    /// Make a job due now (the running gateway runs it within a second)
    Run {
        /// Job id or a unique prefix of it
        id: String,
    },
    /// Remove a job; it never runs again
    Remove {
        /// Job id or a unique prefix of it
        id: String,
    },
    /// A job's recent runs with their outcome and delivery status
    Runs {
        /// Job id or a unique prefix of it
        id: String,
        /// How many runs to show
        #[arg(long, short = 'n', default_value_t = 10)]
        limit: usize,
    },
    /// Whether a gateway runs the scheduler, and when it last ticked
    Status,
}

/// `hermes webhook` subcommands.
#[cfg(feature = "webhooks")]
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Add a route POST /hooks/NAME with a fresh secret (printed once)
    Add {
        /// The route's name (letters, digits, '-', '_')
        name: String,
        /// Where answers go: telegram (its home channel), telegram:CHAT_ID[:THREAD_ID], local
        #[arg(long)]
        deliver: String,
        /// The agent's prompt: {payload} is the body, {payload.a.b} a JSON field
        #[arg(long)]
        prompt: Option<String>,
        /// Deliver the rendered prompt itself, without the agent
        #[arg(long)]
        no_agent: bool,
    },
}

/// `hermes skills` subcommands.
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// List the skills (name and description)
    List,
    /// Print a skill's SKILL.md and the names of its other files
    Show {
        /// The skill's name
        name: String,
    },
    /// Copy a skill folder (or the folder of a SKILL.md) into $HERMES_HOME/skills, checked
    Install {
        /// The folder holding SKILL.md, or the SKILL.md file
        path: PathBuf,
    },
    /// Delete a skill (`hermes skills restore NAME` brings it back)
    Remove {
        /// The skill's name
        name: String,
    },
    /// Undo the last change to a skill (an edit, a patch, a delete, an install)
    Restore {
        /// The skill's name
        name: String,
    },
}

/// `hermes mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start every configured server once and show its state and tools (exit 1 if one fails)
    List(ProviderArgs),
}

/// `hermes chat`.
#[derive(Debug, Clone, Default, Args)]
pub struct ChatCommand {
    #[command(flatten)]
    pub chat: ChatArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// Shells `hermes completions` has a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// Bash
    Bash,
    /// Zsh
    Zsh,
    /// Fish
    Fish,
}

/// Export formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Markdown, for reading and sharing
    #[default]
    Md,
    /// JSON: the session, its messages and its compactions
    Json,
    /// JSON lines: the session, then every stored message (also those a
    /// compaction replaced in the model's view), then every compaction
    Jsonl,
}

/// `hermes sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first
    List {
        /// How many to show
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: usize,
    },
    /// Show a session's conversation
    Show {
        /// Session id or a unique prefix of it
        id: String,
    },
    /// Export a session as markdown or JSON (to stdout, or to a file)
    Export {
        /// Session id or a unique prefix of it
        id: String,
        /// Output format
        #[arg(long, short = 'f', value_enum, default_value_t = ExportFormat::Md)]
        format: ExportFormat,
        /// Write to this file instead of stdout
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Give a session a title
    Rename {
        /// Session id or a unique prefix of it
        id: String,
        /// The new title
        #[arg(required = true, num_args = 1..)]
        title: Vec<String>,
    },
    /// Delete sessions and their messages
    Delete {
        /// Session ids or unique prefixes
        #[arg(required = true, num_args = 1..)]
        ids: Vec<String>,
    },
    /// Search past messages (full text)
    Search {
        /// Words to look for
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// How many hits to show
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: usize,
    },
}

/// `hermes config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration and where each value comes from (secrets masked)
    Show(ProviderArgs),
    /// Print the path of config.toml
    Path,
}

/// `hermes gateway` subcommands.
#[cfg(feature = "gateway")]
#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Start every enabled platform adapter and serve until SIGINT/SIGTERM
    Run {
        /// Check the configuration and the platforms' credentials (live), warn if the provider does not answer, and exit
        #[arg(long)]
        check: bool,
        /// Log level: error, warn, info (default), debug, trace — or a filter such as hermes_gateway=debug; overrides HERMES_LOG
        #[arg(long, value_name = "LEVEL")]
        log_level: Option<String>,
        #[command(flatten)]
        provider: ProviderArgs,
    },
    /// Is a gateway running for this home: pid, since when, each platform's connection, last activity (exit 0 running, 1 a platform not connected, 3 not running)
    Status,
    /// Connect a chat platform: the bot token (verified live), who may talk to the bot; saved to $HERMES_HOME/.env (mode 0600)
    Setup,
}

/// `hermes pairing` subcommands (SPEC Y4).
#[cfg(feature = "gateway")]
#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Pending codes (code, platform, user id, name, age) and approved users
    List,
    /// Let in the user who got CODE on PLATFORM (works while the gateway runs; exit 1 on a wrong, expired or used code)
    Approve {
        /// The platform (telegram, wecom, wecom_callback, …)
        platform: String,
        /// The 8-character code the user got
        code: String,
    },
    /// Take back an approval
    Revoke {
        /// The platform
        platform: String,
        /// The user's platform id
        user_id: String,
    },
    /// Drop every pending code (and the failed-approval count)
    ClearPending,
}

/// A subcommand's arguments (or its own subcommands) that clap defines only
/// when that subcommand is the one given (`Command::defer`): a one-shot
/// built every subcommand's arguments to parse `-z`, ≈ 0.75 M of its
/// 7.6 M instructions (issue 39). What the user sees is unchanged: the
/// subcommand keeps its own `about` (the inner type's doc comment would
/// replace it), and `build.rs` expands everything at once
/// ([`EXPAND_ALL`]) so that the completions' `help` tree is whole.
#[derive(Debug, Clone, Default)]
pub struct Deferred<T>(pub T);

/// Defines deferred parts at once (`build.rs`, for the completions and the
/// man page): clap copies the subcommands into its `help` subcommand
/// before it expands deferred ones.
pub static EXPAND_ALL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `augment` applied to `cmd` now or when clap reaches it, keeping `cmd`'s
/// own descriptions.
fn defer(cmd: clap::Command, augment: fn(clap::Command) -> clap::Command) -> clap::Command {
    if EXPAND_ALL.load(std::sync::atomic::Ordering::Relaxed) {
        return augment(cmd);
    }
    cmd.defer(augment)
}

/// [`Deferred`]'s expansion: `augment` without touching the subcommand's
/// `about` and `long_about`.
fn keep_about(cmd: clap::Command, augment: fn(clap::Command) -> clap::Command) -> clap::Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let cmd = augment(cmd);
    let cmd = match about {
        Some(a) => cmd.about(a),
        None => cmd,
    };
    match long_about {
        Some(a) => cmd.long_about(a),
        None => cmd,
    }
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        defer(cmd, |c| keep_about(c, T::augment_args))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        defer(cmd, |c| keep_about(c, T::augment_args_for_update))
    }

    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

impl<T: Subcommand> Subcommand for Deferred<T> {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        defer(cmd, |c| keep_about(c, T::augment_subcommands))
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        defer(cmd, |c| keep_about(c, T::augment_subcommands_for_update))
    }

    fn has_subcommand(name: &str) -> bool {
        T::has_subcommand(name)
    }
}
