//! What the X7 tools cost per call: the danger check every terminal
//! command goes through (`dangers_in`, on an ordinary and a dangerous
//! command), and one MCP tool call (`echo`) through the registry to
//! server-everything over stdio — the bridge, rmcp, the pipe and node's
//! answer. The MCP part needs `npm ci --prefix tests/emulators/mcp`.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_core::{InterruptFlag, IterationBudget, ToolContext};
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::mcp::{McpManager, ServerConfig, Transport};
use hermes_runtime::tools::approval::dangers_in;
use hermes_runtime::tools::{ToolEnv, build_registry};

fn danger_check(c: &mut Criterion) {
    let ordinary = "cargo build --release 2>&1 | tail -n 20 && ls -la target/release";
    let dangerous = "cd build && rm -rf ../dist && git push --force origin main";
    c.bench_function("dangers_in_ordinary_command", |b| {
        b.iter(|| dangers_in(std::hint::black_box(ordinary)))
    });
    c.bench_function("dangers_in_dangerous_command", |b| {
        b.iter(|| dangers_in(std::hint::black_box(dangerous)))
    });
}

fn mcp_call(c: &mut Criterion) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/emulators/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if !script.is_file() {
        eprintln!(
            "mcp_echo skipped: run `npm ci --prefix tests/emulators/mcp` to install the server"
        );
        return;
    }
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let bridge = Arc::new(AsyncBridge::new().unwrap_or_else(|e| panic!("runtime: {e}")));
    let config = ServerConfig {
        name: "everything".into(),
        transport: Transport::Stdio {
            command: "node".into(),
            args: vec![script.display().to_string(), "stdio".into()],
            env: Default::default(),
            cwd: None,
        },
        call_timeout: std::time::Duration::from_secs(60),
        max_call_time: std::time::Duration::from_secs(60),
        startup_timeout: std::time::Duration::from_secs(60),
        tools: Some(vec!["echo".into()]),
    };
    let mcp = Arc::new(McpManager::new(vec![config], work.path(), bridge.clone()));
    mcp.start();
    let mut env = ToolEnv::new(work.path(), work.path());
    env.bridge = Some(bridge);
    env.mcp = Some(mcp);
    let reg =
        build_registry(&env, Some(&["mcp".to_owned()])).unwrap_or_else(|e| panic!("registry: {e}"));
    let budget = IterationBudget::new(u32::MAX);
    let interrupt = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "bench",
    };
    c.bench_function("mcp_echo_stdio", |b| {
        b.iter(|| {
            reg.dispatch("mcp_everything_echo", r#"{"message":"ping"}"#, &ctx)
                .unwrap_or_else(|e| panic!("mcp: {e}"))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = danger_check, mcp_call
}
criterion_main!(benches);
