//! `hermes-platform-kit`: what every chat platform of the Hermes gateway
//! plugs into, and nothing that knows a platform.
//!
//! An adapter ([`adapter::PlatformAdapter`]) translates a platform's payloads
//! into [`event::MessageEvent`]s and sends replies back; a platform describes
//! itself once in a [`platform::Platform`] descriptor. The helpers every
//! adapter shares live here too: splitting long replies at the platform's
//! limit ([`split`], [`overflow`]), the platform connection's lease in a
//! cluster ([`lease`]), redelivery dedup ([`dedup`]), failures a platform
//! reports after accepting a message ([`delivery`]), chat commands typed as
//! text ([`command`]), a receiving loop's start and stop ([`running`]), reading a platform's variables and `config.toml`
//! section ([`settings`]), and a hardened loopback HTTP/1.1 server with the
//! webhook endpoint platforms put on it (`http_server`, `webhook`, feature
//! `http-server`).
//!
//! **Invariant:** this crate names no platform, and the gateway's runner
//! depends on it, never on a platform crate. No platform crate (under
//! `platforms/`) depends on the gateway or on another platform, and this
//! crate on neither: `layering.rs` checks the manifests and sources.

pub mod adapter;
pub mod command;
pub mod dedup;
pub mod delivery;
pub mod event;
#[doc(hidden)]
pub mod fuzz_entry;
#[cfg(feature = "http-server")]
pub mod http_server;
#[cfg(test)]
mod layering;
pub mod lease;
pub mod overflow;
pub mod platform;
pub mod running;
pub mod settings;
pub mod split;
#[cfg(feature = "http-server")]
pub mod webhook;
#[cfg(feature = "websocket")]
pub mod websocket;
