//! hermes-core's integration tests, one binary (issue 40 §3): each module
//! was a test binary of its own. `plan_alloc` stays apart — it installs a
//! counting global allocator, which would count every other test's
//! allocations too.

mod agent;
mod anthropic_codec;
mod attachments;
#[path = "codec/main.rs"]
mod codec;
mod codec_decorations;
mod context;
mod frugal_loop;
mod hostile_bytes;
mod kept_outputs;
mod steer;
