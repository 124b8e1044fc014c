//! The runtime's integration tests, one test binary (issue 40: every test
//! binary costs a link in every CI run). Each module is what used to be its
//! own binary, so a test is named `store_sessions::...`.
//!
//! Test modules are loaded with `#[path]` so that their own `mod x;` lines
//! resolve to `tests/x/mod.rs` as they did when each was a crate root.
//! `features` stays a binary of its own: `.ci/run` also builds and runs it
//! with `--no-default-features`, where the other suites' toolsets are not
//! built in.

// Shared by several modules: a loopback provider and MCP servers, and the
// two store backends every store test runs against.
mod backends;
mod support;

// One module per former test binary.
#[path = "store/main.rs"]
mod store;
#[path = "tools/main.rs"]
mod tools;

#[path = "anthropic_aimock.rs"]
mod anthropic_aimock;
#[path = "bridge.rs"]
mod bridge;
#[path = "client_aimock.rs"]
mod client_aimock;
#[path = "client_deadlines.rs"]
mod client_deadlines;
#[path = "client_scripted.rs"]
mod client_scripted;
#[path = "fallback_aimock.rs"]
mod fallback_aimock;
#[path = "file_escapes.rs"]
mod file_escapes;
#[path = "hostile_bytes.rs"]
mod hostile_bytes;
#[cfg(feature = "mcp")]
#[path = "mcp.rs"]
mod mcp;
#[path = "media.rs"]
mod media;
#[path = "parallel_batch.rs"]
mod parallel_batch;
#[path = "prompt.rs"]
mod prompt;
#[path = "store_compaction.rs"]
mod store_compaction;
#[path = "store_durability.rs"]
mod store_durability;
#[path = "store_jobs.rs"]
mod store_jobs;
#[path = "store_kv.rs"]
mod store_kv;
#[path = "store_leases.rs"]
mod store_leases;
#[path = "store_sessions.rs"]
mod store_sessions;
#[path = "store_usage.rs"]
mod store_usage;
#[path = "terminal_sandbox.rs"]
mod terminal_sandbox;
#[path = "turn_driver.rs"]
mod turn_driver;
#[path = "web_search.rs"]
mod web_search;
