//! Why the gateway did not run, or stopped, and the exit code that says so.

use hermes_runtime::store::StoreError;

use crate::config::GatewayConfigError;
use crate::lock::LockError;
use crate::runner::StartError;

/// Why the gateway did not run (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A `[gateway]` key or gateway variable is invalid (exit 2).
    #[error(transparent)]
    Config(#[from] GatewayConfigError),
    /// Provider or tool settings cannot work (exit 2).
    #[error("invalid provider/tool configuration: {0}")]
    Provider(String),
    /// A platform's settings cannot work (exit 2).
    #[error("invalid platform configuration: {0}")]
    Platform(String),
    /// No platform has credentials (exit 2). The text names how to enable
    /// each platform of this build ([`crate::platform::no_platform_text`]).
    #[error("{}", crate::platform::no_platform_text())]
    NoPlatform,
    /// Another gateway runs on this `$HERMES_HOME` (exit 1).
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The session store could not be opened (exit 1).
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    /// The runner could not start (exit 1).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The async runtime or signal handling could not be set up (exit 1).
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// A platform adapter stopped for good while serving (exit 1, so a
    /// service manager restarts the gateway).
    #[error("stopped: {0}")]
    AdapterStopped(String),
}

impl GatewayError {
    /// The process exit code: 2 for configuration the operator must fix,
    /// 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            GatewayError::Config(_)
            | GatewayError::Provider(_)
            | GatewayError::Platform(_)
            | GatewayError::NoPlatform => 2,
            GatewayError::Locked(_)
            | GatewayError::Store(_)
            | GatewayError::Start(_)
            | GatewayError::Runtime(_)
            | GatewayError::AdapterStopped(_) => 1,
        }
    }
}
