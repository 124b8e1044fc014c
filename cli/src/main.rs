//! `hermes`: a thin shell over `hermes-runtime` and `hermes-gateway`.
//!
//! Exit codes: 0 success, 1 runtime failure (provider unreachable, model
//! error, storage), 2 usage or configuration error, 130 interrupted.

mod admin;
mod app;
mod approval;
// The musl builds' start-up arena; its tests run on every build.
#[cfg(any(target_env = "musl", test))]
mod arena;
mod args;
mod backup;
mod chat;
mod clarify;
mod cron_cmd;
mod dbcheck;
mod display;
mod foreign_home;
#[cfg(feature = "gateway")]
mod gateway_log;
#[cfg(feature = "gateway")]
mod gateway_setup;
#[cfg(feature = "gateway")]
mod gateway_status;
mod heap;
#[cfg(feature = "import")]
mod import_cmd;
#[cfg(feature = "import")]
mod import_config;
#[cfg(feature = "import")]
mod import_files;
mod log;
mod markdown;
mod mcp_cmd;
mod memory_cmd;
#[cfg(feature = "gateway")]
mod pairing_cmd;
mod restore;
mod sessions;
mod setup;
mod skills_cmd;
// Where build.rs makes `hermes_start` the entry.
#[cfg(hermes_static_entry)]
mod start;
mod term;
mod usage_cmd;
// Its memcmp and bcmp replace musl's at link time; nothing calls it by name.
#[cfg(target_env = "musl")]
use hermes_mem as _;
#[cfg(feature = "webhooks")]
mod webhook_cmd;

use clap::Parser;
use hermes_runtime::config::{self, Environment};

use crate::app::{CliError, Workbench, load_settings};
#[cfg(feature = "gateway")]
use crate::args::GatewayCommand;
use crate::args::{ChatArgs, Cli, Command, ConfigCommand, Deferred, McpCommand, ProviderArgs};

#[global_allocator]
static HEAP: heap::Heap = heap::Heap;

fn main() {
    // Before any secret is read: no other process of the user (a terminal
    // command included) may read this one's memory or environment.
    hermes_runtime::tools::forbid_inspection();
    // `hermes --version` is answered before clap builds the command tree:
    // building it was ≈ a third of the instructions of the whole run
    // (issue 39: BENCHMARKS.md "Start-up"). The text is clap's own.
    if let Some(version) = version_only(std::env::args_os()) {
        println!("{version}");
        return;
    }
    let cli = Cli::parse();
    if !runs_once(&cli) {
        heap::close_arena();
    }
    // A running gateway logs as a service does (`gateway_log`), once its
    // settings say how.
    #[cfg(feature = "gateway")]
    let serving = matches!(
        cli.command,
        Some(Command::Gateway {
            command: Deferred(GatewayCommand::Run { check: false, .. })
        })
    );
    #[cfg(not(feature = "gateway"))]
    let serving = false;
    if !serving {
        log::init(cli.chat.quiet);
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let style = term::term().err_style();
            term::term().line(&format!("hermes: {}: {}", style.red("error"), e.message()));
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// Whether the command line is a one-shot run (`-z`, with or without
/// `chat`): the one run that keeps the start-up arena (`heap`).
fn runs_once(cli: &Cli) -> bool {
    match &cli.command {
        None => cli.chat.query.is_some(),
        Some(Command::Chat(Deferred(c))) => c.chat.query.is_some(),
        Some(_) => false,
    }
}

/// What `hermes --version` (or `-V`) prints, when that is the whole command
/// line; `None` for anything else, which clap parses.
fn version_only(mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    let _program = args.next();
    let first = args.next()?;
    if args.next().is_some() || !(first == "--version" || first == "-V") {
        return None;
    }
    Some(format!("hermes {}", env!("CARGO_PKG_VERSION")))
}

fn run(cli: Cli) -> Result<i32, CliError> {
    let outer = cli.provider;
    let command = match cli.command {
        None => Command::Chat(Deferred(args::ChatCommand {
            chat: cli.chat,
            provider: outer.clone(),
        })),
        Some(_) if cli.chat.any() => {
            return Err(CliError::Config(
                "-z, -c, --resume, --json and --plain go with chat: `hermes -z …` or `hermes chat -z …`, not before another command"
                    .into(),
            ));
        }
        Some(c) => c,
    };
    let with_outer = |p: ProviderArgs| p.or(&outer);
    if !matches!(command, Command::Completions { .. } | Command::Man) {
        // Before anything reads settings from the home or opens its store.
        // Only the two variables the home's path is made of: the whole
        // environment is copied once, by the settings (issue 39).
        if let Ok(home) = config::hermes_home(&Environment::of_process(&["HERMES_HOME", "HOME"])) {
            foreign_home::check(&home).map_err(CliError::Config)?;
        }
    }
    match command {
        Command::Chat(Deferred(c)) => chat(&c.chat, &with_outer(c.provider)),
        Command::Setup => setup::run(&Environment::from_process()),
        Command::Models(Deferred(p)) => admin::models(&load_settings(&with_outer(p))?),
        Command::Sessions {
            command: Deferred(command),
        } => sessions::run(&load_settings(&outer)?, command),
        Command::Doctor(Deferred(p)) => Ok(match app::load_config(&with_outer(p)) {
            Ok(settings) => admin::doctor(&settings),
            Err(e) => admin::doctor_config_error(&e),
        }),
        Command::Config { command } => match command {
            None => {
                admin::config_show(&load_settings(&outer)?);
                Ok(0)
            }
            Some(Deferred(ConfigCommand::Show(p))) => {
                admin::config_show(&load_settings(&with_outer(p))?);
                Ok(0)
            }
            Some(Deferred(ConfigCommand::Path)) => {
                let home = config::hermes_home(&Environment::from_process())
                    .map_err(|e| CliError::Config(e.to_string()))?;
                println!("{}", home.join("config.toml").display());
                Ok(0)
            }
        },
        #[cfg(feature = "gateway")]
        Command::Gateway {
            command:
                Deferred(GatewayCommand::Run {
                    check,
                    log_level,
                    provider,
                }),
        } => {
            // Warnings while reading the settings go to the terminal.
            let settings = tracing::subscriber::with_default(log::subscriber(false), || {
                load_settings(&with_outer(provider))
            })?;
            gateway(&settings, check, log_level.as_deref())
        }
        #[cfg(feature = "gateway")]
        Command::Gateway {
            command: Deferred(GatewayCommand::Status),
        } => Ok(gateway_status::print(&load_settings(&outer)?)),
        #[cfg(feature = "gateway")]
        Command::Gateway {
            command: Deferred(GatewayCommand::Setup),
        } => gateway_setup::run(&load_settings(&outer)?),
        #[cfg(feature = "gateway")]
        Command::Pairing {
            command: Deferred(command),
        } => pairing_cmd::run(&load_settings(&outer)?, command),
        // Generated from the clap definition by build.rs: the binary carries
        // the text, not the generators.
        Command::Completions { shell } => {
            print!(
                "{}",
                match shell {
                    args::Shell::Bash => include_str!(concat!(env!("OUT_DIR"), "/hermes.bash")),
                    args::Shell::Zsh => include_str!(concat!(env!("OUT_DIR"), "/_hermes")),
                    args::Shell::Fish => include_str!(concat!(env!("OUT_DIR"), "/hermes.fish")),
                }
            );
            Ok(0)
        }
        Command::Man => {
            print!("{}", include_str!(concat!(env!("OUT_DIR"), "/hermes.1")));
            Ok(0)
        }
        Command::Mcp {
            command: Deferred(McpCommand::List(p)),
        } => mcp_cmd::list(&load_settings(&with_outer(p))?),
        Command::Cron {
            command: Deferred(command),
        } => cron_cmd::run(&load_settings(&outer)?, command),
        Command::Skills {
            command: Deferred(command),
        } => skills_cmd::run(command),
        #[cfg(feature = "webhooks")]
        Command::Webhook {
            command:
                Deferred(args::WebhookCommand::Add {
                    name,
                    deliver,
                    prompt,
                    no_agent,
                }),
        } => webhook_cmd::add(
            &load_settings(&outer)?,
            &name,
            &deliver,
            prompt.as_deref(),
            no_agent,
        ),
        Command::Backup { file, with_secrets } => {
            backup::run(&load_settings(&outer)?, file, with_secrets)
        }
        #[cfg(feature = "import")]
        Command::Import {
            from: args::ImportFrom::HermesAgent,
            path,
            dry_run,
        } => import_cmd::run(&load_settings(&outer)?, path, dry_run),
        Command::Restore { file, force } => restore::run(&load_settings(&outer)?, &file, force),
        Command::Memory {
            command: Deferred(command),
        } => memory_cmd::run(&load_settings(&outer)?, command),
        Command::Usage => usage_cmd::run(&load_settings(&outer)?),
    }
}

fn chat(args: &ChatArgs, provider: &ProviderArgs) -> Result<i32, CliError> {
    // Read piped stdin before anything else can block on it.
    let prompt = args
        .query
        .as_deref()
        .map(chat::oneshot::prompt_from)
        .transpose()?;
    let bench = Workbench::new(load_settings(provider)?)?;
    match prompt {
        Some(p) => chat::oneshot::oneshot(bench, args, &p),
        None => {
            // Interactive: a tool set that cannot be built, or the notice of
            // a small window, is said before the first prompt.
            bench.tools()?;
            chat::repl::interactive(bench, args)
        }
    }
}

#[cfg(feature = "gateway")]
fn gateway(
    settings: &config::Settings,
    check: bool,
    log_level: Option<&str>,
) -> Result<i32, CliError> {
    if check {
        return gateway_check(settings);
    }
    let format = hermes_gateway::config::GatewayConfig::from_settings(
        settings,
        hermes_gateway::platform::platforms(),
    )
    .map_err(|e| CliError::Config(e.to_string()))?
    .log_format;
    let (spec, source) = match (log_level, settings.var("HERMES_LOG")) {
        (Some(level), _) => (Some(level.to_owned()), "--log-level"),
        (None, Some(v)) => (Some(v.to_owned()), "HERMES_LOG"),
        (None, None) => (std::env::var("RUST_LOG").ok(), "RUST_LOG"),
    };
    let filter = gateway_log::filter(spec.as_deref(), source).map_err(CliError::Config)?;
    gateway_log::init(format, filter);
    hermes_gateway::app::run_gateway(settings, false)
        .map(|()| 0)
        .map_err(|e| match e.exit_code() {
            2 => CliError::Config(e.to_string()),
            _ => CliError::Runtime(e.to_string()),
        })
}

/// `gateway run --check`: the configuration and each platform's credentials
/// (exit 2 naming what to fix), then the provider — only a warning when it
/// does not answer: a local model that starts after the gateway is no reason
/// for the gateway not to start (its turns retry).
#[cfg(feature = "gateway")]
fn gateway_check(settings: &config::Settings) -> Result<i32, CliError> {
    let report = hermes_gateway::check::check_live(settings).map_err(|e| match e.exit_code() {
        2 => CliError::Config(e.to_string()),
        _ => CliError::Runtime(e.to_string()),
    })?;
    println!("{report}");
    pairing_cmd::check_summary(settings);
    let listed = app::client(settings, &settings.provider.model)?.list_models();
    match listed {
        Ok(models) => println!(
            "provider reachable at {} ({} model{})",
            settings.provider.display_url(),
            models.len(),
            if models.len() == 1 { "" } else { "s" }
        ),
        Err(e) => {
            let style = term::term().err_style();
            term::term().line(&format!(
                "hermes: {}: the provider is not reachable now: {e}; the gateway starts anyway and each turn retries (`hermes doctor` says more)",
                style.yellow("warning")
            ));
        }
    }
    Ok(0)
}
