//! `hermes-core`: the agent loop of Hermes, with no IO and no std.
//!
//! This crate is what every front-end (the `hermes` CLI, the chat gateway)
//! shares: the conversation ledger ([`message`]), the shared iteration
//! wallet ([`budget`]), the interrupt flag ([`interrupt`]), the [`Model`] and
//! [`Tool`] traits, the synchronous loop ([`Agent::run_conversation`]), the
//! wire codecs ([`codec`]: OpenAI chat completions and Anthropic Messages)
//! used by every transport, and the policy that keeps a conversation within
//! the model's context window ([`context`]).
//!
//! # Invariants
//! - **No IO, no clock, no std.** The crate is `#![no_std]` + `alloc`; time
//!   comes from a caller's [`Clock`], bytes from a caller's `embedded-io`
//!   reader. `core/nostd-check` proves the dependency graph links without std.
//! - **Ledger fields reach the wire only where a provider requires them.**
//!   The encoders serialize [`Message`]; of [`EntryMeta`] only the stored
//!   reasoning is ever read, and only when an explicit encoder option asks
//!   for it (`RequestOptions::reasoning_echo`, Anthropic thinking) for a
//!   provider that refuses a tool loop without it. [`EntryMeta`] has no
//!   serde impl.
//! - **The system prompt is not a message.** [`Message`] has no system role.
//! - **Every tool call is answered once, in order**, whatever stops the run.
//!
//! # Features
//! None yet: the default build is already `no_std` + `alloc`.

#![no_std]
// The core's dependencies stay few: one it no longer uses is an error. Not
// where std is built from source (`-Zbuild-std`, the armv6 and riscv64
// builds: .cargo/config.toml): cargo hands every crate the standard
// library's crates by name there, and the lint counts them as unused.
#![cfg_attr(
    all(not(test), not(hermes_std_from_source)),
    deny(unused_crate_dependencies)
)]
#![warn(missing_docs)]

extern crate alloc;

pub mod agent;
pub mod attachment;
pub mod budget;
pub mod clock;
pub mod codec;
pub mod context;
#[doc(hidden)]
pub mod fuzz_entry;
pub mod interrupt;
pub mod message;
pub mod model;
pub mod tool;

pub use agent::{
    Agent, AgentEvent, AgentObserver, FnObserver, NoObserver, NoSteering, RepeatGuard,
    RepeatGuardError, RunOutcome, SKIPPED_TOOL_RESULT, Steering, StopReason,
};
pub use attachment::{Attachment, AttachmentKind, AttachmentResolver, TextReferences};
pub use budget::{DEFAULT_MAX_ITERATIONS, IterationBudget, Reserved};
pub use clock::{Clock, NoClock};
pub use codec::{
    DecodeError, EncodeError, RequestEncoder, RequestOptions, SseDecoder, SseStatus, StreamError,
};
pub use context::{
    CompactError, Compaction, ContextConfig, ContextPolicy, ContextUsage, ContextWindow,
    WindowSource,
};
pub use interrupt::InterruptFlag;
pub use message::{
    CompactionMark, EntryMeta, FinishReason, FunctionCall, LedgerEntry, Message, Role,
    SummaryPlacement, ToolCall, ToolCallKind, Usage, current_turn_start,
};
pub use model::{
    ChatRequest, Completion, Fallback, Flow, Model, ModelError, ModelErrorKind, NullSink,
    StreamSink, ToolChoice,
};
pub use tool::batch::{BatchCall, BatchResult, SequentialBatch, ToolBatchRunner};
pub use tool::{
    KeptOutput, OutputKeeper, SchemaText, Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
