//! Measures the Discord adapter (benchmarks/runs/2026-12-02-discord.md).
//!
//! `cargo run --release -p hermes-gateway --example discord_load [-- USERS ROUNDS]`
//!
//! The example re-executes itself as the gateway (`--serve`: exactly what
//! `hermes gateway run` does), against the loopback fake Discord of the
//! tests (`tests/discord_support`, REST + Gateway, heartbeat interval as
//! Discord's 41.25 s, rate-limit buckets wide enough not to be what is
//! measured) and the fake provider, which answers at once. Figures:
//!
//! 1. idle RSS of a gateway with only the API server, then of one with the
//!    API server and Discord connected: the difference is what the adapter
//!    adds;
//! 2. messages/s through the adapter and the runner: USERS (default 8)
//!    users each DM the bot, ROUNDS (default 50) times, each round waiting
//!    until every one of them is answered (a user's next message never
//!    meets a turn still running, so none is merged into another).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

#[path = "../tests/discord_support/mod.rs"]
mod discord_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use discord_support::{Behaviour, FakeDiscord, TOKEN};
use hermes_gateway::app::run_gateway;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_tests::{FakeProvider, Reply};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A gateway process on `home`; with Discord when `discord_api` is given.
fn spawn(home: &Path, provider: &str, discord_api: Option<&str>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--serve")
        .env_clear()
        .env("HERMES_HOME", home)
        .env("HERMES_BASE_URL", provider)
        .env("HERMES_API_KEY", "sk-provider")
        .env("HERMES_MODEL", "fake-model")
        .env("HERMES_TOOLSETS", "todo,memory")
        .env("API_SERVER_ENABLED", "true")
        .env("API_SERVER_KEY", "sk-bench-key-0123456789")
        .env("API_SERVER_PORT", free_port().to_string())
        .env("GATEWAY_ALLOW_ALL_USERS", "true")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(api) = discord_api {
        cmd.env("DISCORD_BOT_TOKEN", TOKEN)
            .env("DISCORD_API_URL", api);
    }
    cmd.spawn().unwrap()
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
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (users, rounds) = (arg(1, 8), arg(2, 50));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(FakeDiscord::start(Behaviour {
        heartbeat_ms: 41_250,
        bucket_limit: 100_000,
        bucket_window: Duration::from_secs(1),
        ..Behaviour::default()
    }));
    let responder: hermes_tests::Responder =
        std::sync::Arc::new(|_req: &serde_json::Value| Reply::text("The answer is 42."));
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();

    // 1. Idle RSS without and with the adapter.
    let settle = Duration::from_secs(3);
    let home = tempfile::tempdir().unwrap();
    let mut plain = spawn(home.path(), &provider.base_url(), None);
    std::thread::sleep(settle);
    let rss_plain = rss_kib(plain.id());
    plain.kill().unwrap();
    plain.wait().unwrap();

    let home = tempfile::tempdir().unwrap();
    let mut child = spawn(home.path(), &provider.base_url(), Some(&fake.api_url()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fake.is_live() {
        assert!(Instant::now() < deadline, "the gateway did not connect");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(settle);
    let rss_discord = rss_kib(child.id());

    // 2. Messages per second, closed loop per user.
    let user_ids: Vec<String> = (0..users).map(|u| format!("{}", 5000 + u)).collect();
    let start = Instant::now();
    let mut expected = 0;
    for _ in 0..rounds {
        for u in &user_ids {
            fake.dm(u, "What is six times seven?");
        }
        expected += users;
        let deadline = Instant::now() + Duration::from_secs(60);
        while fake.posted().len() < expected {
            assert!(Instant::now() < deadline, "answers stopped coming");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let elapsed = start.elapsed();
    let answered = fake.posted().len();
    child.kill().unwrap();
    child.wait().unwrap();

    println!("| figure | value |");
    println!("|---|---|");
    println!("| gateway RSS idle, API server only | {rss_plain} KiB |");
    println!("| gateway RSS idle, API server + Discord connected | {rss_discord} KiB |");
    println!(
        "| idle RSS added by the Discord adapter | {} KiB |",
        rss_discord.saturating_sub(rss_plain)
    );
    println!(
        "| messages/s through Discord ({users} users × {rounds} rounds, answered {answered}) | {:.0} |",
        expected as f64 / elapsed.as_secs_f64()
    );
}
