//! `hermes gateway run [--check]`: settings → adapters → runner → signals.
//!
//! The CLI resolves [`Settings`] (provider settings with the same precedence
//! as every other command) and calls [`run_gateway`]. Everything that can be
//! wrong with the configuration is found before anything connects, and each
//! error names the key or variable to fix ([`GatewayError::exit_code`] is 2
//! for those). `--check` stops after that validation.
//!
//! The gateway's tokio runtime is THE runtime of the process: adapters run on
//! it, turns run on its blocking pool, and async tools reach it through an
//! [`AsyncBridge`] made from its handle (SPEC L9).

use std::sync::{Arc, Mutex};

use hermes_runtime::assemble;
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::config::Settings;
use hermes_runtime::store::{BackendKind, Store, SystemClock};

use crate::lock::InstanceLock;
use crate::runner::{AgentFactory, GatewayRunner, RunnerDeps, ShutdownReport};
use crate::wiring::{adapters_beside, api_server_settings};

// Their old paths (`hermes_gateway::app::…`), for the CLI and the tests.
pub use crate::error::GatewayError;
pub use crate::factory::RuntimeAgentFactory;
pub use crate::wiring::{CheckSummary, build_adapters, check_config};

/// `hermes gateway run`: with `check_only`, validates the configuration,
/// prints a summary and returns. Otherwise runs until SIGINT/SIGTERM, then
/// stops gracefully within five seconds.
pub fn run_gateway(settings: &Settings, check_only: bool) -> Result<(), GatewayError> {
    // The bot tokens and the provider key live in this process: no other
    // process (a terminal command included) may read its memory.
    hermes_runtime::tools::forbid_inspection();
    if check_only {
        println!("{}", crate::check::check_live(settings)?);
        return Ok(());
    }
    let summary = check_config(settings)?;
    #[cfg(not(feature = "webhooks"))]
    if settings.file.contains_key("webhooks") {
        tracing::warn!(
            "[webhooks] is configured, but this hermes was built without the `webhooks` feature"
        );
    }
    let api = api_server_settings(settings)?;
    if summary.config.allow.is_empty()
        && !summary.config.pairing
        && summary.platforms.len() > usize::from(api.is_some())
    {
        tracing::warn!(
            "nobody is allowed to talk to the bot; every user will be refused (see `hermes gateway run --check`)"
        );
    }
    // A SQLite file belongs to one gateway (the home's lock); gateways
    // sharing a PostgreSQL database coordinate through leases in it (X8).
    let target = settings.store_target();
    let _lock = match target.kind() {
        BackendKind::Sqlite => Some(InstanceLock::acquire(&settings.home)?),
        BackendKind::Postgres => None,
    };
    let store = Arc::new(Mutex::new(Store::open_target(&target)?));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hermes-gateway")
        .enable_all()
        .build()?;
    let bridge = Arc::new(AsyncBridge::from_handle(rt.handle().clone()));
    let factory = Arc::new(
        RuntimeAgentFactory::new(settings, Some(bridge))?.with_window_cache(Arc::clone(&store)),
    );
    let adapters = adapters_beside(
        build_adapters(settings, Some(Arc::clone(&store))),
        api.is_some(),
    )?;
    // Scheduled jobs (SPEC Y1): the tool for chats, the scheduler below.
    let cron_settings = hermes_runtime::cron::CronSettings::load(settings)
        .map_err(|e| GatewayError::Provider(e.to_string()))?;
    let clock: Arc<dyn hermes_core::Clock> = Arc::new(SystemClock);
    factory.offer_session_search(Arc::clone(&store));
    let sendable = crate::cron::send::allowed_targets(&settings.file);
    let mut offer = crate::cron::CronOffer::new(
        Arc::clone(&store),
        cron_settings.clone(),
        adapters.iter().map(|a| a.platform().to_owned()).collect(),
        Arc::clone(&clock),
        settings.toolsets.as_deref(),
    )
    .with_send_message(sendable, settings.toolsets.as_deref());
    // `send_message`'s files come from the working directory, read as the
    // file tools read (a missing one: messages without files only).
    match hermes_runtime::tools::ConfinedFiles::new(&assemble::script_env(settings)) {
        Ok(files) => offer = offer.with_send_files(files, settings.home.join("outbox")),
        Err(e) => tracing::warn!(error = %e, "send_message: no files (the working directory)"),
    }
    factory.offer_cron(offer);
    // Background processes; those the last run left are announced lost.
    factory.offer_background(
        crate::cron::background::start(
            &settings.home,
            &settings.file,
            Arc::clone(&store),
            Arc::clone(&clock),
        )
        .map_err(|e| GatewayError::Provider(format!("background processes: {e}")))?,
    );
    let factory: Arc<dyn AgentFactory> = factory;
    // With only the API server there is no chat runner to start, and no
    // chat for the scheduler to deliver to.
    let runner = (!adapters.is_empty()).then(|| {
        GatewayRunner::new(RunnerDeps {
            adapters,
            factory: Arc::clone(&factory),
            store: Arc::clone(&store),
            clock: Arc::clone(&clock),
            config: summary.config.clone(),
        })
    });
    let report: (ShutdownReport, Option<String>) = rt.block_on(async {
        // Install the handlers before connecting, so a signal during start-up
        // still stops the gateway gracefully.
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let ops = crate::ops::start(
            &settings.home,
            &summary.platforms,
            summary.config.metrics_port,
        )
        .await?;
        let scheduler = match &runner {
            Some(runner) => {
                runner.start().await?;
                Some(crate::cron::Scheduler::start(crate::cron::SchedulerDeps {
                    runner: runner.clone(),
                    factory: Arc::clone(&factory),
                    store: Arc::clone(&store),
                    clock,
                    settings: cron_settings,
                    timing: crate::cron::SchedulerTiming::default(),
                    scripts: Some(hermes_runtime::assemble::script_env(settings)),
                }))
            }
            None => None,
        };
        // Webhooks in: events become one-off jobs of the scheduler above.
        #[cfg(feature = "webhooks")]
        let webhooks =
            crate::webhook::start(settings, Arc::clone(&store), scheduler.is_some()).await?;
        #[cfg(feature = "api_server")]
        let api_server = match api {
            Some(config) => Some(
                crate::api_server::ApiServer::bind(config, factory, Arc::clone(&store)).await?,
            ),
            None => None,
        };
        #[cfg(feature = "api_server")]
        if api_server.is_some() {
            crate::ops::ops()
                .platform_state(crate::api_server::PLATFORM, crate::ops::PlatformState::Connected);
        }
        #[cfg(not(feature = "api_server"))]
        let _ = (api, factory);
        tracing::info!(platforms = ?summary.platforms, busy_mode = summary.config.busy_mode.as_str(), "gateway running");
        let gave_up = tokio::select! {
            r = tokio::signal::ctrl_c() => { r?; None }
            _ = term.recv() => None,
            why = async {
                match &runner {
                    Some(runner) => runner.gave_up().await,
                    None => std::future::pending().await,
                }
            } => Some(why),
        };
        tracing::info!("stopping the gateway");
        #[cfg(feature = "webhooks")]
        if let Some(webhooks) = webhooks {
            webhooks.stop().await;
        }
        if let Some(scheduler) = scheduler {
            scheduler.stop(std::time::Duration::from_secs(2)).await;
        }
        #[cfg(feature = "api_server")]
        if let Some(server) = api_server {
            server.stop().await;
        }
        let report = match &runner {
            Some(runner) => runner.shutdown().await,
            None => ShutdownReport {
                all_turns_finished: true,
                marked_clean: false,
            },
        };
        ops.stop().await;
        Ok::<_, GatewayError>((report, gave_up))
    })?;
    let (report, gave_up) = report;
    // Turns still stuck in a provider call must not hold the process.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    if !report.all_turns_finished {
        tracing::warn!(
            "some turns did not finish in time; their sessions will be suspended at the next start"
        );
    }
    match gave_up {
        Some(why) => Err(GatewayError::AdapterStopped(why)),
        None => Ok(()),
    }
}
