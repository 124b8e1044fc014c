//! `hermes mcp list`: every configured MCP server, started once to show
//! its state and tools, then stopped. Secrets (env and header values) are
//! never shown.

#[cfg(feature = "mcp")]
use std::sync::Arc;

#[cfg(feature = "mcp")]
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::config::Settings;
#[cfg(feature = "mcp")]
use hermes_runtime::mcp::{McpManager, ServerState, render};

use crate::app::CliError;
#[cfg(feature = "mcp")]
use crate::app::runtime;
#[cfg(feature = "mcp")]
use crate::display::one_line;

/// In a build without the MCP client: says so, naming the feature.
#[cfg(not(feature = "mcp"))]
pub fn list(_settings: &Settings) -> Result<i32, CliError> {
    Err(CliError::Config(
        "this hermes was built without the `mcp` feature: it cannot start MCP servers \
         (rebuild with `--features mcp`, or use a default build)"
            .into(),
    ))
}

/// Prints the servers; exit code 1 when one of them could not be started.
#[cfg(feature = "mcp")]
pub fn list(settings: &Settings) -> Result<i32, CliError> {
    if settings.mcp_servers.is_empty() {
        println!(
            "No MCP servers are configured. Add one to {}, e.g.\n\n\
             [mcp.servers.files]\n\
             command = \"npx\"\n\
             args = [\"-y\", \"@modelcontextprotocol/server-filesystem\", \"/path/to/notes\"]",
            settings.home.join("config.toml").display()
        );
        return Ok(0);
    }
    let bridge = Arc::new(
        AsyncBridge::new().map_err(|e| runtime(format!("cannot start the async runtime: {e}")))?,
    );
    let manager = McpManager::new(
        settings.mcp_servers.clone(),
        &settings.workdir,
        bridge.clone(),
    );
    manager.start();
    let mut failed = false;
    for (i, status) in manager.status().iter().enumerate() {
        if i > 0 {
            println!();
        }
        let kind = if status.target.starts_with("http://") || status.target.starts_with("https://")
        {
            "http"
        } else {
            "stdio"
        };
        println!("{}  [{kind}] {}", status.name, status.target);
        let mut state = format!("  state: {}", status.state);
        if let Some(pid) = status.pid {
            state.push_str(&format!(" (pid {pid})"));
        }
        if let Some(info) = &status.server_info {
            state.push_str(&format!(" · {info}"));
        }
        println!("{state}");
        if matches!(status.state, ServerState::Failed(_)) {
            failed = true;
            for line in &status.stderr {
                println!("  stderr: {line}");
            }
            continue;
        }
        println!("  tools ({}):", status.tools.len());
        for tool in &status.tools {
            let name = render::tool_name(&status.name, &tool.name);
            let about = tool.description.lines().next().unwrap_or("");
            println!("    {name}  {}", one_line(about, 70));
        }
    }
    manager.shutdown();
    Ok(i32::from(failed))
}
