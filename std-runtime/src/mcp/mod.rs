//! MCP client (SPEC X7): the servers in `[mcp.servers.*]`, their tools
//! offered to the model as `mcp_SERVER_TOOL`, through the official SDK
//! (`rmcp`).
//!
//! - **One server set per process** ([`McpManager`]), started once and
//!   kept alive on the persistent runtime (SPEC L9); every session's
//!   registry gets tools that share it. In the gateway that means all
//!   chats talk to the same server processes: a server that keeps state
//!   (a browser, a scratch directory) keeps it for everyone — configure
//!   only servers whose state may be shared between the gateway's users.
//! - **Transports**: stdio servers are started by hermes ([`stdio`]:
//!   explicit environment, own process group, death signal); streamable
//!   HTTP goes through rmcp's transport over ureq ([`http`]).
//! - **Failures** (see [`server`]): a crash or hang becomes a clear tool
//!   error and the server is restarted on its next use; a timeout cancels
//!   the call on the server.
//! - **Results** ([`render`]): text as is, images and binary resources
//!   described, structured content appended, `isError` results as tool
//!   errors; capped like every tool result.

//!
//! The client is the cargo feature `mcp` (on by default). Without it the
//! configuration is still read and checked ([`config`]), and asking for the
//! `mcp` toolset is refused with an error that names the feature.

pub mod config;
#[cfg(feature = "mcp")]
mod http;
#[cfg(feature = "mcp")]
mod manager;
#[cfg(feature = "mcp")]
pub mod render;
#[cfg(feature = "mcp")]
mod server;
#[cfg(feature = "mcp")]
mod stdio;

pub use config::{McpConfigError, ServerConfig, Transport};
#[cfg(feature = "mcp")]
pub use http::{UreqHttpClient, UreqHttpError};
#[cfg(feature = "mcp")]
#[cfg(feature = "mcp")]
pub use manager::{McpManager, ServerState, ServerStatus, ToolInfo};
