//! Test support shared by the crates' process-level tests: a scripted,
//! loopback, OpenAI-compatible provider ([`FakeProvider`]), the launcher of
//! the third-party aimock emulator ([`aimock`]), and a private PostgreSQL
//! server ([`postgres`]).

pub mod aimock;
pub mod fuzz_inputs;
pub mod http;
pub mod multipart;
pub mod postgres;
mod provider;
pub use provider::{Advertise, FakeProvider, Overflow, Reply, Responder, Window, provider_tokens};
