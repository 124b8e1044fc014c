//! The command line, as clap sees it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Hermes: an AI agent that uses tools, in your terminal or behind chat platforms.
#[derive(Debug, Parser)]
#[command(name = "hermes", version, about, propagate_version = true)]
pub struct Cli {
    /// One-shot: answer PROMPT, print only the answer, and exit (same as `hermes chat -q`).
    #[arg(short = 'z', value_name = "PROMPT", global = false)]
    pub oneshot: Option<String>,

    #[command(flatten)]
    pub provider: ProviderArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Provider and agent settings; they override the environment and config files.
#[derive(Debug, Clone, Default, Args)]
pub struct ProviderArgs {
    /// OpenAI-compatible base URL, e.g. https://openrouter.ai/api/v1 [env: HERMES_BASE_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub base_url: Option<String>,
    /// API key for the provider [env: HERMES_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY]
    #[arg(long, global = true, value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model name as the provider spells it [env: HERMES_MODEL]
    #[arg(long, global = true, value_name = "NAME")]
    pub model: Option<String>,
    /// Most model calls one turn may make (default 90)
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    /// Comma-separated toolsets to enable: file, terminal, web, memory, todo, delegate (default: all)
    #[arg(long, global = true, value_name = "LIST", value_delimiter = ',')]
    pub toolsets: Option<Vec<String>>,
    /// Working directory the file tools and the terminal's sandbox are confined to (default: the current directory)
    #[arg(long, global = true, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run terminal commands without the sandbox (Landlock): they can then read and write
    /// anything you can [config: [agent] sandbox = "off"]
    #[arg(long, global = true)]
    pub no_sandbox: bool,
    /// Let the file tools reach paths outside the working directory ($HERMES_HOME's secrets
    /// stay refused) [config: [agent] allow_outside_workdir = true]
    #[arg(long, global = true)]
    pub allow_outside_workdir: bool,
    /// Silence progress, tool activity and warnings on stderr
    #[arg(long, short = 'Q', global = true)]
    pub quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Chat with the agent: interactive, or one-shot with -q
    Chat(ChatArgs),
    /// List and inspect stored sessions
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Check configuration, provider, database and prompt files, and say how to fix problems
    Doctor,
    /// Show configuration
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Run the chat-platform gateway (Telegram, WeCom)
    Gateway {
        #[command(subcommand)]
        command: GatewayCommand,
    },
}

/// `hermes chat` options.
#[derive(Debug, Clone, Default, Args)]
pub struct ChatArgs {
    /// One-shot: answer PROMPT, print only the answer to stdout, and exit
    #[arg(short = 'q', long = "query", value_name = "PROMPT")]
    pub query: Option<String>,
    /// Resume the session with this id
    #[arg(long, value_name = "ID", conflicts_with = "continue_latest")]
    pub resume: Option<String>,
    /// Continue the most recent session
    #[arg(long = "continue", short = 'c')]
    pub continue_latest: bool,
}

/// `hermes sessions` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first
    List {
        /// How many to show
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Print every stored message and compaction of a session as JSON lines
    Export {
        /// The session id (see `hermes sessions list`)
        id: String,
    },
    /// Search past messages (full text)
    Search {
        /// Words to look for
        query: String,
        /// How many hits to show
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

/// `hermes config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration and where each value comes from (secrets masked)
    Show,
}

/// `hermes gateway` subcommands.
#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Start every enabled platform adapter and serve until SIGINT/SIGTERM
    Run {
        /// Validate the configuration and exit
        #[arg(long)]
        check: bool,
    },
}
