//! `hermes`: a thin shell over `hermes-runtime` and `hermes-gateway`.
//!
//! Exit codes: 0 success, 1 runtime failure (provider unreachable, model
//! error, storage), 2 usage or configuration error, 130 interrupted.

mod admin;
mod app;
mod args;
mod chat;
mod display;

use std::io::IsTerminal;

use clap::Parser;

use crate::app::{CliError, Workbench, load_settings};
use crate::args::{ChatArgs, Cli, Command, ConfigCommand, GatewayCommand, SessionsCommand};

fn main() {
    // Before any secret is read: no other process of the user (a terminal
    // command included) may read this one's memory or environment.
    hermes_runtime::tools::forbid_inspection();
    let cli = Cli::parse();
    init_logging(cli.provider.quiet);
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hermes: {}", e.message());
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// Logs to stderr; level from `RUST_LOG` (default: warnings); colours only on a terminal.
fn init_logging(quiet: bool) {
    let default = if quiet { "error" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn run(cli: Cli) -> Result<i32, CliError> {
    let quiet = cli.provider.quiet;
    let command = match (cli.oneshot, cli.command) {
        (Some(_), Some(_)) => {
            return Err(CliError::Config(
                "-z PROMPT cannot be combined with a subcommand; use `hermes chat -q PROMPT`"
                    .into(),
            ));
        }
        (Some(prompt), None) => Command::Chat(ChatArgs {
            query: Some(prompt),
            ..ChatArgs::default()
        }),
        (None, Some(c)) => c,
        (None, None) => Command::Chat(ChatArgs::default()),
    };
    let settings = load_settings(&cli.provider)?;
    match command {
        Command::Chat(args) => {
            let bench = Workbench::new(settings)?;
            match &args.query {
                Some(q) if q.trim().is_empty() => Err(CliError::Config(
                    "the prompt given to -q/-z is empty".into(),
                )),
                Some(q) => chat::oneshot(bench, &args, q, quiet),
                None => chat::interactive(bench, &args, quiet),
            }
        }
        Command::Sessions { command } => match command {
            SessionsCommand::List { limit } => admin::sessions_list(&settings, limit),
            SessionsCommand::Export { id } => admin::sessions_export(&settings, &id),
            SessionsCommand::Search { query, limit } => {
                admin::sessions_search(&settings, &query, limit)
            }
        },
        Command::Doctor => Ok(admin::doctor(&settings)),
        Command::Config {
            command: ConfigCommand::Show,
        } => {
            admin::config_show(&settings);
            Ok(0)
        }
        Command::Gateway {
            command: GatewayCommand::Run { check },
        } => gateway(&settings, check),
    }
}

fn gateway(settings: &hermes_runtime::config::Settings, check: bool) -> Result<i32, CliError> {
    hermes_gateway::app::run_gateway(settings, check)
        .map(|()| 0)
        .map_err(|e| match e.exit_code() {
            2 => CliError::Config(e.to_string()),
            _ => CliError::Runtime(e.to_string()),
        })
}
