//! The model's tool arguments parsed into each built-in tool's argument
//! type, without running the tool: the `tool_arguments` fuzz target and its
//! proptest drive this (through `crate::fuzz_entry::tool_arguments`).

use hermes_core::ToolError;
use serde::de::DeserializeOwned;

#[cfg(feature = "delegate")]
use super::delegate::DelegateArgs;
use super::fs::{PatchArgs, ReadArgs, WriteArgs};
use super::memory::MemoryArgs;
use super::parse_args;
use super::search::SearchArgs;
use super::terminal::TerminalArgs;
use super::todo::TodoArgs;
#[cfg(feature = "web")]
use super::web::FetchArgs;
use super::web_search::WebSearchArgs;

/// Parses `arguments` the way tool `name` does before it acts; `None` for a
/// tool this list does not know.
pub(crate) fn parse(name: &str, arguments: &str) -> Option<Result<(), ToolError>> {
    fn as_type<T: DeserializeOwned>(name: &str, arguments: &str) -> Result<(), ToolError> {
        parse_args::<T>(name, arguments).map(drop)
    }
    Some(match name {
        "read_file" => as_type::<ReadArgs>(name, arguments),
        "write_file" => as_type::<WriteArgs>(name, arguments),
        "patch" => as_type::<PatchArgs>(name, arguments),
        "search_files" => as_type::<SearchArgs>(name, arguments),
        "terminal" => as_type::<TerminalArgs>(name, arguments),
        #[cfg(feature = "web")]
        "web_fetch" => as_type::<FetchArgs>(name, arguments),
        "web_search" => as_type::<WebSearchArgs>(name, arguments),
        "memory" => as_type::<MemoryArgs>(name, arguments),
        "todo" => as_type::<TodoArgs>(name, arguments),
        #[cfg(feature = "delegate")]
        "delegate_task" => as_type::<DelegateArgs>(name, arguments),
        _ => return None,
    })
}
