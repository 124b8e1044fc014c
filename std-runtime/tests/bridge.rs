//! The async bridge (SPEC L9): one persistent runtime, connections that
//! survive between tool calls, panics and timeouts contained, usable from
//! plain threads, blocking threads and runtime workers, and driven by a real
//! `hermes_core::Agent` run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use hermes_core::{
    Agent, ChatRequest, Completion, FinishReason, Message, Model, ModelError, StopReason,
    StreamSink, Tool, ToolCall, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use hermes_runtime::bridge::{AsyncBridge, BridgeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

const GENEROUS: Duration = Duration::from_secs(30);

/// A line-echo server on 127.0.0.1 (plain threads) that counts accepted
/// connections, so a test can prove a connection was reused.
struct EchoServer {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl EchoServer {
    fn start() -> Self {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        EchoServer { addr, accepted }
    }
}

/// An async tool that keeps ONE tokio TCP connection across calls.
struct EchoTool {
    spec: ToolSpec,
    bridge: Arc<AsyncBridge>,
    addr: std::net::SocketAddr,
    conn: Arc<Mutex<Option<TcpStream>>>,
}

impl EchoTool {
    fn new(bridge: Arc<AsyncBridge>, addr: std::net::SocketAddr) -> Self {
        EchoTool {
            spec: ToolSpec::new(
                "echo",
                "Echoes text through a persistent TCP connection",
                serde_json::json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
            ),
            bridge,
            addr,
            conn: Arc::new(Mutex::new(None)),
        }
    }
}

impl Tool for EchoTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: serde_json::Value =
            serde_json::from_str(arguments).map_err(|e| ToolError::Failed(e.to_string()))?;
        let text = args["text"].as_str().unwrap_or_default().to_owned();
        let conn = self.conn.clone();
        let addr = self.addr;
        self.bridge.run_tool(GENEROUS, async move {
            let mut guard = conn.lock().await;
            if guard.is_none() {
                *guard = Some(
                    TcpStream::connect(addr)
                        .await
                        .map_err(|e| ToolError::Failed(format!("connect: {e}")))?,
                );
            }
            let stream = guard.as_mut().unwrap();
            stream
                .write_all(text.as_bytes())
                .await
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            let mut buf = vec![0u8; text.len()];
            stream
                .read_exact(&mut buf)
                .await
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            Ok(format!("echo: {}", String::from_utf8_lossy(&buf)))
        })
    }
}

fn ctx_call(tool: &dyn Tool, args: &str) -> Result<String, ToolError> {
    let budget = hermes_core::IterationBudget::new(10);
    let interrupt = hermes_core::InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "call_test",
    };
    tool.call(args, &ctx)
}

#[test]
fn every_call_runs_on_the_same_runtime() {
    let bridge = AsyncBridge::new().unwrap();
    let first = bridge
        .run_tool(GENEROUS, async {
            Ok(tokio::runtime::Handle::current().id().to_string())
        })
        .unwrap();
    let second = bridge
        .run_tool(GENEROUS, async {
            Ok(tokio::runtime::Handle::current().id().to_string())
        })
        .unwrap();
    let third = bridge
        .block_on(async { tokio::runtime::Handle::current().id().to_string() })
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(second, third);
    assert_eq!(first, bridge.handle().id().to_string());
}

#[test]
fn a_connection_opened_in_one_tool_call_is_reused_by_the_next() {
    let server = EchoServer::start();
    let bridge = Arc::new(AsyncBridge::new().unwrap());
    let tool = EchoTool::new(bridge, server.addr);

    assert_eq!(
        ctx_call(&tool, r#"{"text":"first"}"#).unwrap(),
        "echo: first"
    );
    assert_eq!(
        ctx_call(&tool, r#"{"text":"second"}"#).unwrap(),
        "echo: second"
    );
    assert_eq!(
        ctx_call(&tool, r#"{"text":"third"}"#).unwrap(),
        "echo: third"
    );
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        1,
        "the TCP connection must survive between tool calls"
    );
}

#[test]
fn a_panicking_tool_becomes_a_tool_error_and_the_runtime_survives() {
    let bridge = AsyncBridge::new().unwrap();
    let err = bridge
        .run_tool(GENEROUS, async {
            if std::hint::black_box(true) {
                panic!("disk on fire");
            }
            Ok(String::new())
        })
        .unwrap_err();
    match err {
        ToolError::Failed(msg) => {
            assert!(msg.starts_with("tool panicked: "), "{msg}");
            assert!(msg.contains("disk on fire"), "{msg}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // A formatted (String) panic payload keeps its message too.
    let err = bridge
        .block_on(async {
            let n = std::hint::black_box(7);
            if n == 7 {
                panic!("bad value {n}");
            }
        })
        .unwrap_err();
    assert_eq!(err, BridgeError::Panicked("bad value 7".into()));
    assert_eq!(
        bridge.run_tool(GENEROUS, async { Ok("still alive".into()) }),
        Ok("still alive".into())
    );
}

#[test]
fn a_slow_tool_times_out_and_is_aborted() {
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let bridge = AsyncBridge::new().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = SetOnDrop(dropped.clone());
    let err = bridge
        .run_tool(Duration::from_millis(200), async move {
            let _guard = guard;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok("never".into())
        })
        .unwrap_err();
    match err {
        ToolError::Failed(msg) => assert!(msg.contains("timed out after 200ms"), "{msg}"),
        other => panic!("expected Failed, got {other:?}"),
    }
    // The body was aborted, not left running: its state is dropped soon.
    let deadline = Instant::now() + GENEROUS;
    while !dropped.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "timed-out task was never aborted"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn works_from_a_blocking_thread_and_from_a_worker_of_the_same_runtime() {
    let bridge = Arc::new(AsyncBridge::new().unwrap());
    let expected = bridge.handle().id().to_string();

    // From spawn_blocking on the bridge's own runtime.
    let b = bridge.clone();
    let join = bridge.handle().spawn_blocking(move || {
        b.run_tool(GENEROUS, async {
            Ok(tokio::runtime::Handle::current().id().to_string())
        })
    });
    let from_blocking = bridge.block_on(join).unwrap().unwrap().unwrap();
    assert_eq!(from_blocking, expected);

    // From inside an async task on a worker thread (goes through block_in_place).
    let b = bridge.clone();
    let from_worker = bridge
        .block_on(async move {
            b.run_tool(GENEROUS, async {
                tokio::task::yield_now().await;
                Ok(tokio::runtime::Handle::current().id().to_string())
            })
        })
        .unwrap()
        .unwrap();
    assert_eq!(from_worker, expected);
}

#[test]
fn from_handle_uses_the_callers_runtime_and_leaves_it_running() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bridge = AsyncBridge::from_handle(runtime.handle().clone());
    let id = bridge
        .block_on(async { tokio::runtime::Handle::current().id().to_string() })
        .unwrap();
    assert_eq!(id, runtime.handle().id().to_string());
    drop(bridge);
    // The runtime still works after the bridge is gone.
    let after = runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        5
    });
    assert_eq!(after, 5);
}

/// A model that asks for the echo tool twice (two turns), then answers with
/// what the tools returned.
struct ScriptedModel {
    calls: StdMutex<u32>,
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let mut calls = self.calls.lock().unwrap();
        *calls += 1;
        match *calls {
            1 | 2 => Ok(Completion {
                tool_calls: vec![ToolCall::new(
                    format!("call_{calls}"),
                    "echo",
                    format!(r#"{{"text":"round {calls}"}}"#),
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }),
            _ => {
                let results: Vec<&str> = request
                    .messages
                    .iter()
                    .filter_map(|e| match &e.message {
                        Message::Tool { content, .. } => Some(content.as_str()),
                        _ => None,
                    })
                    .collect();
                Ok(Completion {
                    content: Some(results.join(" | ")),
                    finish_reason: Some(FinishReason::Stop),
                    ..Completion::default()
                })
            }
        }
    }
}

#[test]
fn an_agent_run_drives_an_async_tool_through_the_bridge() {
    let server = EchoServer::start();
    let bridge = Arc::new(AsyncBridge::new().unwrap());
    let tools = ToolRegistry::new().with(EchoTool::new(bridge.clone(), server.addr));
    let agent = Agent::new(
        Arc::new(ScriptedModel {
            calls: StdMutex::new(0),
        }),
        Arc::new(tools),
        "You are a test agent.",
    );
    let outcome = agent.run_conversation("echo twice please", Vec::new());
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(outcome.final_text, "echo: round 1 | echo: round 2");
    assert_eq!(outcome.iterations, 3);
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}
