//! The built-in tools, through the registry the agent loop uses: happy paths,
//! error paths, confinement, truncation, real processes and a loopback HTTP
//! server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod confinement;
mod delegate;
#[cfg(feature = "documents")]
mod documents;
mod files;
mod kept_outputs;
mod memory_scope;
mod memory_todo;
mod registry;
mod send_file;
mod session_search;
mod skills;
mod spill;
mod support;
mod terminal;
mod vision;
mod web;
