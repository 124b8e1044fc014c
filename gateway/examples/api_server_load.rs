//! Measures the OpenAI-compatible API server (benchmarks/runs/2026-12-02-api-server.md).
//!
//! `cargo run --release -p hermes-gateway --example api_server_load [-- SECONDS]`
//!
//! The example re-executes itself as the gateway (`--serve`: exactly what
//! `hermes gateway run` does, with only the API server enabled), so the
//! gateway's RSS is its own process's. The loopback fake provider answers
//! every request at once with a short text (streamed in 8 pieces 50 ms
//! apart for the RSS measurement). Figures:
//!
//! 1. per-request latency calling the provider directly, then through the
//!    server (one client, keep-alive, sequential): the difference is the
//!    server's overhead per request (HTTP, parsing, a stored session, the
//!    agent's assembly and its provider call);
//! 2. requests/s and p50/p99 with 4 concurrent clients;
//! 3. the gateway's RSS idle, and its peak (`VmHWM`) with 4 concurrent
//!    streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_gateway::app::run_gateway;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_tests::{FakeProvider, Reply, Responder};
use serde_json::json;

const KEY: &str = "sk-bench-key-0123456789";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
}

fn post(agent: &ureq::Agent, url: &str, key: &str, body: &str) -> Duration {
    let start = Instant::now();
    let mut resp = agent
        .post(url)
        .header("authorization", &format!("Bearer {key}"))
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    assert_eq!(status, 200, "{text}");
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn sequential(url: &str, key: &str, body: &str, n: usize) -> Vec<Duration> {
    let agent = agent();
    for _ in 0..20 {
        post(&agent, url, key, body);
    }
    let mut t: Vec<Duration> = (0..n).map(|_| post(&agent, url, key, body)).collect();
    t.sort();
    t
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--serve") {
        let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
        if let Err(e) = run_gateway(&settings, false) {
            eprintln!("gateway error: {e}");
            std::process::exit(e.exit_code());
        }
        return;
    }
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let streaming = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = Arc::clone(&streaming);
    let responder: Responder = Arc::new(move |_req: &serde_json::Value| {
        if slow.load(std::sync::atomic::Ordering::Relaxed) {
            Reply::SlowText {
                pieces: (0..8).map(|i| format!("piece {i} ")).collect(),
                delay: Duration::from_millis(50),
            }
        } else {
            Reply::text("The answer is 42.")
        }
    });
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--serve")
        .env_clear()
        .env("HERMES_HOME", home.path())
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_API_KEY", "sk-provider")
        .env("HERMES_MODEL", "fake-model")
        .env("HERMES_TOOLSETS", "todo,memory")
        .env("API_SERVER_ENABLED", "true")
        .env("API_SERVER_KEY", KEY)
        .env("API_SERVER_PORT", port.to_string())
        .current_dir(home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/v1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while agent().get(&format!("{base}/health")).call().is_err() {
        assert!(Instant::now() < deadline, "the gateway did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id();
    let idle_rss = rss_kib(pid, "VmRSS:");

    let through_body = json!({"model": "hermes-agent", "messages": [
        {"role": "user", "content": "What is six times seven?"}]})
    .to_string();
    // What the agent itself sends: the same question under a system prompt.
    let direct_body = json!({"model": "fake-model", "messages": [
        {"role": "system", "content": "You are Hermes."},
        {"role": "user", "content": "What is six times seven?"}]})
    .to_string();
    let n = 300;
    let direct = sequential(
        &format!("{}/chat/completions", provider.base_url()),
        "sk-provider",
        &direct_body,
        n,
    );
    let through = sequential(&format!("{base}/chat/completions"), KEY, &through_body, n);

    // 4 concurrent clients for `seconds`.
    let stop = Instant::now() + Duration::from_secs(seconds);
    let url = format!("{base}/chat/completions");
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (url, body) = (url.clone(), through_body.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut t = Vec::new();
                while Instant::now() < stop {
                    t.push(post(&agent, &url, KEY, &body));
                }
                t
            })
        })
        .collect();
    let mut all: Vec<Duration> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    all.sort();
    let rps = all.len() as f64 / seconds as f64;

    // 4 concurrent streams, repeated, then the peak RSS.
    streaming.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut stream_body: serde_json::Value = serde_json::from_str(&through_body).unwrap();
    stream_body["stream"] = json!(true);
    let stream_body = stream_body.to_string();
    let streams: Vec<_> = (0..4)
        .map(|_| {
            let (url, body) = (url.clone(), stream_body.clone());
            std::thread::spawn(move || {
                let agent = agent();
                for _ in 0..10 {
                    post(&agent, &url, KEY, &body);
                }
            })
        })
        .collect();
    for s in streams {
        s.join().unwrap();
    }
    let peak_rss = rss_kib(pid, "VmHWM:");
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();

    let overhead = percentile(&through, 0.5).saturating_sub(percentile(&direct, 0.5));
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| provider directly, 1 client: p50 / p99 | {} / {} |",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99))
    );
    println!(
        "| through the API server, 1 client: p50 / p99 | {} / {} |",
        ms(percentile(&through, 0.5)),
        ms(percentile(&through, 0.99))
    );
    println!(
        "| overhead per request (p50 difference) | {} |",
        ms(overhead)
    );
    println!(
        "| 4 concurrent clients, {seconds} s: requests/s | {rps:.0} ({} requests) |",
        all.len()
    );
    println!(
        "| 4 concurrent clients: p50 / p99 | {} / {} |",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99))
    );
    println!("| gateway RSS idle (API server only) | {} KiB |", idle_rss);
    println!(
        "| gateway peak RSS (VmHWM) after 4 concurrent streams | {} KiB |",
        peak_rss
    );
}
