//! The gateway's integration tests, one test binary (issue 40: every test
//! binary costs a link in every CI run). Each module is what used to be its
//! own binary, so a test is named `telegram_fake::...`; the fakes and helpers
//! several of them share are the top-level `*_support` modules below.
//!
//! Test modules are loaded with `#[path]` so that their own `mod x;` lines
//! resolve to `tests/x/mod.rs` as they did when each was a crate root.

// Shared fakes and helpers.
#[cfg(feature = "api_server")]
mod api_server_support;
#[macro_use]
mod conformance_kit;
#[cfg(feature = "discord")]
mod discord_support;
mod openai_schema;
#[cfg(feature = "signal")]
mod signal_support;
#[cfg(feature = "slack")]
mod slack_support;
mod speech_support;
#[cfg(feature = "telegram")]
mod telegram_emulator_support;
#[cfg(feature = "telegram")]
mod telegram_gateway;
mod telegram_support;
#[cfg(feature = "wecom_callback")]
mod wecom_callback_support;
#[cfg(feature = "wecom")]
mod wecom_support;
#[cfg(feature = "whatsapp")]
mod whatsapp_support;

// One module per former test binary.
#[path = "api_server.rs"]
mod api_server;
#[path = "api_server_python.rs"]
mod api_server_python;
#[path = "app.rs"]
mod app;
#[path = "chat_ergonomics/main.rs"]
mod chat_ergonomics;
#[path = "cluster.rs"]
mod cluster;
#[path = "conformance.rs"]
mod conformance;
#[path = "context.rs"]
mod context;
#[path = "cron.rs"]
mod cron;
#[path = "cron_process.rs"]
mod cron_process;
#[path = "discord.rs"]
mod discord;
#[path = "discord_media.rs"]
mod discord_media;
#[path = "discord_restart.rs"]
mod discord_restart;
#[path = "discord_voice.rs"]
mod discord_voice;
#[path = "email.rs"]
mod email;
#[path = "failover.rs"]
mod failover;
#[path = "fallback.rs"]
mod fallback;
#[path = "hostile_bytes.rs"]
mod hostile_bytes;
#[path = "long_replies.rs"]
mod long_replies;
#[path = "matrix.rs"]
mod matrix;
#[path = "mcp_shared.rs"]
mod mcp_shared;
#[path = "media.rs"]
mod media;
#[path = "progress.rs"]
mod progress;
#[path = "runner/main.rs"]
mod runner;
#[path = "session_search.rs"]
mod session_search;
#[path = "telegram_approval.rs"]
mod telegram_approval;
#[path = "telegram_emulator.rs"]
mod telegram_emulator;
#[path = "telegram_fake.rs"]
mod telegram_fake;
#[path = "voice.rs"]
mod voice;
#[path = "wecom.rs"]
mod wecom;
#[path = "wecom_callback.rs"]
mod wecom_callback;
#[path = "wecom_callback_app.rs"]
mod wecom_callback_app;
#[path = "wecom_callback_crypto.rs"]
mod wecom_callback_crypto;
#[path = "wecom_callback_props.rs"]
mod wecom_callback_props;
#[path = "wecom_media.rs"]
mod wecom_media;
#[path = "wecom_merge.rs"]
mod wecom_merge;
#[path = "whatsapp.rs"]
mod whatsapp;
#[path = "window_cache.rs"]
mod window_cache;
