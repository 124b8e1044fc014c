//! Test support shared by the crates' process-level tests: a scripted,
//! loopback, OpenAI-compatible provider ([`FakeProvider`]), the launcher of
//! the third-party aimock emulator ([`aimock`]), a private PostgreSQL
//! server ([`postgres`]), a private Synapse homeserver ([`synapse`]), and a
//! private mail system: Dovecot and an SMTP server ([`dovecot`]).

pub mod aimock;
pub mod dovecot;
pub mod fuzz_inputs;
pub mod http;
pub mod imports;
pub mod multipart;
pub mod postgres;
mod provider;
pub mod synapse;
pub mod tier;
pub use provider::{Advertise, FakeProvider, Overflow, Reply, Responder, Window, provider_tokens};
