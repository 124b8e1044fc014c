//! `hermes-runtime`: everything the `no_std` core needs from an operating system.
//!
//! - [`client`]: the OpenAI-compatible provider client (blocking `ureq`), an
//!   implementation of the core's `Model`, with retries (SPEC L10, L12).
//! - [`http`]: the one HTTP client stack (a shared ureq agent) every
//!   caller uses, with interruptible waits.
//! - [`bridge`]: the one persistent tokio runtime that runs async tools for
//!   the synchronous loop (SPEC L9).
//! - [`store`]: persistence of sessions and transcripts (SPEC E3), in SQLite
//!   (the embedded default) or PostgreSQL (several gateways): the
//!   `hermes-store` crate, re-exported under its old name.
//! - [`prompt`]: system prompt assembly, once per session (SPEC L6).
//! - [`tools`]: the built-in tools.
//! - [`skills`]: `SKILL.md` folders in `$HERMES_HOME/skills`, and the one
//!   confined way they are written (SPEC Y8).
//! - [`assemble`]: the one recipe (client, tools, prompt, agent) the CLI
//!   and the gateway share.
//! - [`fallback`]: the fallback chain, a `Model` over several clients
//!   (SPEC X2); [`pricing`]: token prices and usage reports.
//! - [`persist`]: storing a run's ledger as it grows (CLI and gateway).
//! - [`mcp`]: the MCP client: configured servers' tools, kept alive on
//!   the bridge (SPEC X7).
//! - [`config`]: loading and validating the settings (their precedence is
//!   shared by the CLI and the gateway).
//! - [`context`]: the model's context window and where it came from (SPEC X1).
//! - [`media`]: images, voice and documents users send (SPEC X6).
//! - [`sandbox`]: what a command the terminal, a script or an MCP server
//!   runs may touch, inherit, and how long it may live (SPEC E1, E2).
//! - [`spill`]: a tool result cut to its cap, and kept whole on disk
//!   (SPEC Y6) — the tools and MCP both cap through it.
//! - Below every feature: [`redact`] (masking keys and URL credentials),
//!   [`secret`] (keys that cannot be printed), [`env`] (the environment
//!   snapshot and the variables hermes reads), [`price`] (a model's token
//!   prices), [`sync`] (the one poison-tolerant lock), [`task`] (tokio
//!   tasks spawned boxed), `fsutil` (atomic
//!   writes) and `text` (char-boundary cuts). The features own their
//!   settings types and never import [`config`], which loads and hands
//!   them out; no two top-level modules import each other, directly or
//!   round a longer circle (ARCHITECTURE.md, "Invariants"; both checked by
//!   `layering.rs`).
//!
//! **Invariant:** only this crate (and the front-ends above it) knows HTTP
//! and tokio, only `hermes-store` below it SQLite and PostgreSQL; the core
//! never does.

pub mod assemble;
pub mod bridge;
pub mod client;
pub mod config;
pub mod context;
pub mod cron;
#[cfg(feature = "documents")]
pub mod documents;
pub mod env;
pub mod fallback;
mod fsutil;
#[doc(hidden)]
pub mod fuzz_entry;
pub mod http;
#[cfg(test)]
mod layering;
pub mod mcp;
pub mod media;
pub mod memory_scope;
pub mod parallel;
pub mod persist;
pub mod price;
pub mod pricing;
pub mod prompt;
pub mod redact;
pub mod sandbox;
pub mod secret;
pub mod skills;
pub mod spending;
pub mod spill;
// The store is a crate of its own below this one (it imports nothing of the
// runtime); `hermes_runtime::store::…` keeps naming it.
pub use hermes_store as store;
pub mod sync;
pub mod task;
pub mod text;
pub mod tools;
pub mod turn;
pub mod zone;
