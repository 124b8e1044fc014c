//! The cross-crate end-to-end tests, one binary (issue 40 §3): each module
//! was a test binary of its own.

mod circles;
mod context_window;
mod providers;
mod spawns;
mod sqlite_opens;
mod stale_connections;
mod tier;
mod window_cache;
