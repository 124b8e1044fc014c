//! From the settings to what the gateway serves, without connecting: the
//! adapters of the platforms with credentials, the API server's settings,
//! and the validation `--check` and `run` share ([`check_config`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::config::Settings;
use hermes_runtime::store::Store;
use hermes_runtime::tools::SandboxMode;

use crate::adapter::PlatformAdapter;
use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::factory::RuntimeAgentFactory;

/// What `--check` found: a valid configuration, summarised (no secrets).
#[derive(Clone, Debug)]
pub struct CheckSummary {
    /// Enabled platforms.
    pub platforms: Vec<&'static str>,
    /// The validated gateway settings.
    pub config: GatewayConfig,
    /// Provider label, base URL and model.
    pub provider: String,
    /// The terminal sandbox's mode (on / off).
    pub sandbox: SandboxMode,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "gateway configuration OK")?;
        writeln!(f, "  platforms: {}", self.platforms.join(", "))?;
        writeln!(f, "  provider: {}", self.provider)?;
        writeln!(f, "  busy mode: {}", self.config.busy_mode.as_str())?;
        let hours = |d: Option<std::time::Duration>| {
            d.map_or("off".to_owned(), |d| format!("{} h", d.as_secs() / 3600))
        };
        writeln!(f, "  idle reset: {}", hours(self.config.idle_reset))?;
        let daily = self
            .config
            .daily_reset_hour
            .map_or("off".to_owned(), |h| format!("{h:02}:00"));
        writeln!(f, "  daily reset: {daily}")?;
        writeln!(f, "  max workers: {}", self.config.max_workers)?;
        write!(f, "  terminal sandbox: {}", self.sandbox)
    }
}

/// Builds every platform adapter whose credentials are present, in the
/// registry's order ([`crate::platform::platforms`]): compiled-out
/// platforms are simply absent. Adapters keep their state (Telegram's poll
/// offset, Matrix's sync token, …) in `store` when one is given.
pub fn build_adapters(
    settings: &Settings,
    store: Option<Arc<Mutex<Store>>>,
) -> Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError> {
    let env = |name: &str| settings.var(name).map(str::to_owned);
    let ctx = crate::platform::BuildContext {
        settings,
        env: &env,
        store,
    };
    let mut adapters: Vec<Arc<dyn PlatformAdapter>> = Vec::new();
    for build in crate::platform::platforms().iter().filter_map(|p| p.build) {
        if let Some(built) = build(&ctx) {
            adapters.push(built.map_err(GatewayError::Platform)?);
        }
    }
    if adapters.is_empty() {
        return Err(GatewayError::NoPlatform);
    }
    Ok(adapters)
}

/// Refuses a gateway whose terminal would run commands unconfined without
/// the operator having opted out: the sandbox is on but this kernel cannot
/// provide it (the tool would refuse every command; better to say so now).
fn check_sandbox(settings: &Settings) -> Result<(), GatewayError> {
    let terminal_on = settings
        .toolsets
        .as_ref()
        .is_none_or(|t| t.iter().any(|n| n == "terminal"));
    if !terminal_on || settings.sandbox == SandboxMode::Off {
        return Ok(());
    }
    match hermes_runtime::sandbox::unavailable_reason() {
        None => Ok(()),
        Some(why) => Err(GatewayError::Provider(format!(
            "the terminal's sandbox is unavailable: {why}. The gateway does not serve an \
             unconfined terminal: set [agent] sandbox = \"off\" (or pass --no-sandbox) to opt \
             out, or leave the terminal out of [agent] toolsets"
        ))),
    }
}

/// Validates everything `run` would use, without connecting or locking.
pub fn check_config(settings: &Settings) -> Result<CheckSummary, GatewayError> {
    let config = GatewayConfig::from_settings(settings, crate::platform::platforms())?;
    hermes_runtime::cron::CronSettings::load(settings)
        .map_err(|e| GatewayError::Provider(e.to_string()))?;
    check_sandbox(settings)?;
    #[cfg(feature = "webhooks")]
    crate::webhook::settings(settings).map_err(|e| GatewayError::Platform(e.to_string()))?;
    // The tools are built as `run` builds them: with an async bridge, or an
    // explicit `web` toolset would be refused here and `run` never start.
    let bridge = Arc::new(AsyncBridge::new()?);
    RuntimeAgentFactory::new(settings, Some(bridge))?;
    let api = api_server_settings(settings)?;
    let adapters = adapters_beside(build_adapters(settings, None), api.is_some())?;
    #[cfg_attr(not(feature = "api_server"), allow(unused_mut))]
    let mut platforms: Vec<&'static str> = adapters.iter().map(|a| a.platform()).collect();
    #[cfg(feature = "api_server")]
    if api.is_some() {
        platforms.push(crate::api_server::PLATFORM);
    }
    let p = &settings.provider;
    Ok(CheckSummary {
        platforms,
        config,
        provider: format!(
            "{} ({}), model {}",
            p.provider_name,
            p.display_url(),
            p.model
        ),
        sandbox: settings.sandbox,
    })
}

/// The API server's settings when the feature is built and it is enabled.
#[cfg(feature = "api_server")]
pub(crate) fn api_server_settings(
    settings: &Settings,
) -> Result<Option<crate::api_server::ApiServerConfig>, GatewayError> {
    crate::api_server::settings(settings).map_err(|e| GatewayError::Platform(e.to_string()))
}

#[cfg(not(feature = "api_server"))]
pub(crate) fn api_server_settings(_settings: &Settings) -> Result<Option<()>, GatewayError> {
    Ok(None)
}

/// The chat adapters; none at all is fine when the API server runs.
pub(crate) fn adapters_beside(
    built: Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError>,
    api_server: bool,
) -> Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError> {
    match built {
        Err(GatewayError::NoPlatform) if api_server => Ok(Vec::new()),
        other => other,
    }
}
