//! `gateway_routing`: the gateway's own cost per message.
//!
//! 1000 sessions × 10 messages through the in-process test adapter with an
//! instant model, on a real SQLite store in a temp dir and on a real
//! PostgreSQL database (the test support's private server on a unix socket,
//! `hermes_tests::postgres`, started with `fsync = on`). Reported:
//! - messages per second with every session active at once (rounds of 1000
//!   concurrent messages, default worker bound);
//! - per-message routing overhead — inject → reply sent, one message in
//!   flight at a time, so no queueing is counted — p50/p99, with the store
//!   at `synchronous = NORMAL` (SQLite CPU work counted, no fsync;
//!   PostgreSQL `synchronous_commit = off`) and at the gateway's default
//!   `FULL` (one fsync per commit, the E3 guarantee; PostgreSQL's default
//!   `synchronous_commit = on`, a WAL flush per commit);
//! - peak RSS of the process (`VmHWM`).
//!
//! The instant model returns at once, so everything measured is the
//! gateway: dedup, allow-list, session key, queueing, worker hand-off, the
//! blocking-pool hop, session resolution, transcript load, two appends, the
//! agent cache, the agent loop's own bookkeeping, and the adapter send.
//!
//! Run with `cargo bench -p hermes-benches --bench gateway_routing`. Without
//! `--bench` (as under `cargo test --benches`) a reduced scenario runs once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use hermes_core::{LedgerEntry, Message};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{EchoModel, TestAdapter, TestAgentFactory, event};
use hermes_runtime::store::{Store, Synchronous, SystemClock};

/// Which database the gateway runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

struct Bench {
    rt: tokio::runtime::Runtime,
    adapter: Arc<TestAdapter>,
    runner: GatewayRunner,
    next_id: u64,
    _dir: tempfile::TempDir,
    /// The PostgreSQL database, when on PostgreSQL.
    url: Option<String>,
}

impl Bench {
    /// Another connection to the bench's database.
    fn open_store(&self) -> Store {
        match &self.url {
            Some(url) => Store::open_url(url).unwrap(),
            None => Store::open(&self._dir.path().join("state.db")).unwrap(),
        }
    }
}

/// A fresh database on the private server, started durable (`fsync` on:
/// the test support's default is off, tests need no durability), so a
/// committed turn costs what it costs on a real server.
fn postgres_database() -> String {
    hermes_tests::postgres::durable_server();
    hermes_tests::postgres::fresh_database()
}

fn setup(backend: Backend, sync: Synchronous) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let url = matches!(backend, Backend::Postgres).then(postgres_database);
    let mut store = match &url {
        Some(url) => Store::open_url(url).unwrap(),
        None => Store::open(&dir.path().join("state.db")).unwrap(),
    };
    store.set_synchronous(sync).unwrap();
    let mut config = GatewayConfig::default();
    config.allow.allow_all = true;
    // 2-core machine: the default bound (4) is right, state it explicitly.
    config.max_workers = 4;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let adapter = TestAdapter::new("bench");
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: TestAgentFactory::new(EchoModel::new()),
        store: Arc::new(Mutex::new(store)),
        clock: Arc::new(SystemClock),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    Bench {
        rt,
        adapter,
        runner,
        next_id: 0,
        _dir: dir,
        url,
    }
}

impl Bench {
    fn inject(&mut self, session: usize, text: &str) -> String {
        self.next_id += 1;
        let id = format!("b{}", self.next_id);
        let chat = format!("chat-{session}");
        self.adapter.inject(event(
            "bench",
            ChatType::Dm,
            &chat,
            &format!("user-{session}"),
            &id,
            text,
        ));
        id
    }

    fn wait_sent(&self, n: usize) {
        self.adapter
            .wait_until(Duration::from_secs(600), |s| s.len() >= n)
            .expect("replies did not arrive");
    }

    /// One message in flight: inject → reply sent.
    fn roundtrip(&mut self, session: usize) -> Duration {
        self.adapter.take_sent();
        let start = Instant::now();
        self.inject(session, "ping");
        self.wait_sent(1);
        self.adapter.take_sent()[0].at.duration_since(start)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn memory(stage: &str) {
    println!(
        "gateway_routing: {stage}: VmRSS {} KiB, peak (VmHWM) {} KiB",
        status_kib("VmRSS:"),
        status_kib("VmHWM:")
    );
}

fn scenario(backend: Backend, sessions: usize, per_session: usize, sync: Synchronous) {
    let mut b = setup(backend, sync);
    memory("runner started");
    // Throughput: every session active at once, round after round.
    let start = Instant::now();
    let mut queued: Vec<Duration> = Vec::with_capacity(sessions * per_session);
    for round in 0..per_session {
        let mut injected: HashMap<String, Instant> = HashMap::with_capacity(sessions);
        for s in 0..sessions {
            let id = b.inject(s, &format!("message {round}"));
            injected.insert(id, Instant::now());
        }
        b.wait_sent(sessions);
        queued.extend(b.adapter.take_sent().iter().filter_map(|s| {
            let id = s.reply_to.as_ref()?;
            Some(s.at.duration_since(*injected.get(id)?))
        }));
    }
    let elapsed = start.elapsed();
    let total = sessions * per_session;
    queued.sort();
    println!(
        "gateway_routing/{backend:?}/{sync:?}: {total} messages ({sessions} sessions x {per_session}) in {:.2} s = {:.0} messages/s; \
         latency under full load p50 {:?} p99 {:?}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        percentile(&queued, 0.5),
        percentile(&queued, 0.99),
    );

    // Routing overhead: one message in flight, sessions with history.
    let n = sessions.min(1000);
    let mut lat: Vec<Duration> = (0..n).map(|s| b.roundtrip(s)).collect();
    lat.sort();
    println!(
        "gateway_routing/{backend:?}/{sync:?}: routing overhead (inject -> reply, 1 in flight, {n} msgs, history {} msgs): \
         p50 {:?} p99 {:?} max {:?}; agent cache {:?}",
        per_session * 2,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
        b.runner.cache_stats(),
    );
    // The store's share of that path, measured alone on a second
    // connection: look up the session, load its transcript, append the
    // user message, append the reply.
    let mut store = b.open_store();
    store.set_synchronous(sync).unwrap();
    let mut st: Vec<Duration> = (0..n)
        .map(|s| {
            let t = Instant::now();
            let key = format!("agent:main:bench:dm:chat-{s}");
            let id = store.active_session_for_key(&key).unwrap().unwrap().id;
            let history = store.load_transcript(&id).unwrap();
            assert!(!history.is_empty());
            store
                .append_messages(&id, &[LedgerEntry::at(Message::user("ping"), 0)])
                .unwrap();
            store
                .append_messages(
                    &id,
                    &[LedgerEntry::at(Message::assistant("reply to: ping"), 0)],
                )
                .unwrap();
            t.elapsed()
        })
        .collect();
    st.sort();
    println!(
        "gateway_routing/{backend:?}/{sync:?}: store share of a turn alone (lookup + load + 2 appends): p50 {:?} p99 {:?}",
        percentile(&st, 0.5),
        percentile(&st, 0.99),
    );
    memory("after the scenario");
    let report = b.rt.block_on(b.runner.shutdown());
    assert!(report.all_turns_finished);
}

fn criterion_roundtrip(c: &mut Criterion) {
    let mut b = setup(Backend::Sqlite, Synchronous::Normal);
    // Warm one session so the measured path is the steady state.
    b.roundtrip(0);
    c.bench_function("gateway_routing/roundtrip_normal", |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                total += b.roundtrip((i % 16) as usize);
            }
            total
        })
    });
    b.rt.block_on(b.runner.shutdown());
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    if full {
        memory("process start");
        for backend in [Backend::Sqlite, Backend::Postgres] {
            scenario(backend, 1000, 10, Synchronous::Normal);
            scenario(backend, 1000, 10, Synchronous::Full);
        }
    } else {
        scenario(Backend::Sqlite, 10, 2, Synchronous::Normal);
        scenario(Backend::Postgres, 10, 2, Synchronous::Full);
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_roundtrip(&mut c);
    c.final_summary();
}
