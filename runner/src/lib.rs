//! `hermes-runner`: the Hermes agent loop behind chat platforms, without
//! the platforms.
//!
//! The runner ([`runner::GatewayRunner`]) takes the
//! [`event::MessageEvent`]s an adapter ([`adapter::PlatformAdapter`])
//! produces, routes each to its session, runs one turn at a time per
//! session on the synchronous core loop and sends the reply back through
//! the adapter. Around it: the durable inbox and outbox, sessions, the
//! approval and clarify hubs, pairing, media and voice, the gateway's
//! settings and its counters.
//!
//! **Invariant:** this crate cannot name a platform — cargo enforces it,
//! since it depends on the platform kit and on no platform crate; the
//! registry of platforms is the app's (the gateway's `platform` module) and is
//! handed in where a setting depends on it
//! ([`config::GatewayConfig::from_settings`]). Nor does it name the
//! scheduler: what a chat asks of it is store operations
//! ([`cron_chat`]).

pub use hermes_platform_kit::{adapter, command, dedup, delivery, event, lease, overflow, split};

pub mod approval;
pub mod cache;
pub mod clarify;
pub mod config;
pub mod cron_chat;
pub mod inbox;
pub mod media;
pub mod ops;
pub mod outbox;
pub mod pairing;
pub mod personality;
pub mod runner;
pub mod session;
pub mod voice;
