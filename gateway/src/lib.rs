//! `hermes-gateway`: the app that puts the Hermes agent loop behind chat
//! platforms — `hermes gateway run`, `--check`, the scheduler, the API
//! server, webhooks and the operator's status and metrics.
//!
//! It gathers two crates that stand side by side over the platform kit:
//! the runner (`hermes-runner`, re-exported here under its old module
//! paths), which routes each [`event::MessageEvent`] to its session and
//! runs one turn at a time per session, and the platform crates, whose
//! adapters ([`adapter::PlatformAdapter`]) translate platform payloads.
//!
//! **Invariant:** each platform describes itself once
//! ([`platform::Platform`], in its crate's `descriptor.rs`); the registry
//! ([`platform::platforms`]) is the only place here that names a platform
//! crate, and it is handed to the runner where a setting depends on it.

pub use hermes_platform_kit::adapter;
#[cfg(feature = "api_server")]
pub mod api_server;
pub mod app;
// The runner and what it owns are their own crate, which names no platform
// (issue 40); they keep their paths here for the app and the tests.
pub use hermes_runner::{
    approval, cache, clarify, config, cron_chat, inbox, media, outbox, pairing, personality,
    runner, session, voice,
};
pub mod check;
pub mod error;
pub mod factory;
pub use hermes_platform_kit::command;
pub mod cron;
pub use hermes_platform_kit::dedup;
pub use hermes_platform_kit::delivery;
pub use hermes_platform_kit::event;
#[doc(hidden)]
pub mod fuzz_entry;
#[cfg(any(feature = "api_server", feature = "metrics", feature = "webhooks"))]
use hermes_platform_kit::http_server;
pub use hermes_platform_kit::lease;
pub mod lock;
pub mod ops;
pub use hermes_platform_kit::overflow;
pub mod platform;
pub mod prompt_context;
pub use hermes_platform_kit::split;
#[cfg(feature = "webhooks")]
pub mod webhook;
pub mod wiring;
