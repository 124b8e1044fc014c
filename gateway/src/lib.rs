//! `hermes-gateway`: the Hermes agent loop behind chat platforms.
//!
//! Adapters ([`adapter::PlatformAdapter`]) translate platform payloads into
//! [`event::MessageEvent`]s; the runner routes each event to its session,
//! runs one turn at a time per session on the synchronous core loop, and
//! sends the reply back through the adapter.
//!
//! **Invariant:** only the adapter modules know Telegram or WeCom JSON/XML;
//! the runner never branches on a platform. Each platform describes itself
//! once ([`platform::Platform`], in its module's `descriptor.rs`); the
//! registry ([`platform::platforms`]) is the only other place that names a
//! platform's module.

pub use hermes_platform_kit::adapter;
#[cfg(feature = "api_server")]
pub mod api_server;
pub mod app;
pub mod approval;
pub mod cache;
pub mod check;
pub mod clarify;
pub use hermes_platform_kit::command;
pub mod config;
pub mod cron;
pub use hermes_platform_kit::dedup;
pub use hermes_platform_kit::delivery;
pub use hermes_platform_kit::event;
#[doc(hidden)]
pub mod fuzz_entry;
#[cfg(any(feature = "api_server", feature = "metrics", feature = "webhooks"))]
use hermes_platform_kit::http_server;
pub mod inbox;
pub use hermes_platform_kit::lease;
pub mod lock;
pub mod media;
pub mod ops;
pub mod outbox;
pub use hermes_platform_kit::overflow;
pub mod pairing;
pub mod personality;
pub mod platform;
pub mod prompt_context;
pub mod runner;
pub mod session;
pub use hermes_platform_kit::split;
pub mod testing;
pub mod voice;
#[cfg(feature = "webhooks")]
pub mod webhook;
