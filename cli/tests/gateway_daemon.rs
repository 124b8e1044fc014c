//! `hermes gateway run` as a service an operator can trust (issue 31): the
//! real binary against the loopback Telegram Bot API fake (with Telegram's
//! 409 rule: a newer `getUpdates` ends a held one) and a scripted provider.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_support;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};
use telegram_support::{Fake, TOKEN};

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");
const USER: i64 = 7;
const WAIT: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn provider() -> FakeProvider {
    FakeProvider::start_with(
        Vec::new(),
        None,
        Some(std::sync::Arc::new(|_: &Value| Reply::text("pong"))),
    )
    .unwrap()
}

fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `hermes gateway run` on its own home, talking to `telegram` with `token`.
fn gateway_cmd(home: &Path, telegram: &str, token: &str, provider_url: &str) -> Command {
    let mut c = Command::new(HERMES);
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HERMES_HOME", home)
        .env("TELEGRAM_BOT_TOKEN", token)
        .env("TELEGRAM_API_URL", telegram)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", USER.to_string())
        .env("HERMES_BASE_URL", provider_url)
        .env("HERMES_MODEL", "fake-model")
        .env("HERMES_TOOLSETS", "todo")
        .env("GATEWAY_STREAM_REPLIES", "false")
        .current_dir(home)
        .stdin(Stdio::null());
    c
}

/// A running gateway; killed if the test fails while it runs.
struct Gateway {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    fn spawn(mut cmd: Command, home: &Path) -> Gateway {
        let log = home.join("gateway.log");
        let child = cmd
            .args(["gateway", "run"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Gateway { child, log }
    }

    /// SIGTERM, then the exit code (within 10 s).
    fn stop(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        self.wait_exit(Duration::from_secs(10))
            .expect("the gateway did not stop on SIGTERM")
    }

    /// The exit code once the process ended within `within`; `None` inside
    /// means it was killed by a signal.
    fn wait_exit(&mut self, within: Duration) -> Option<Option<i32>> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status.code());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn dm(update_id: i64, message_id: i64, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": message_id, "date": 0, "text": text,
        "from": {"id": USER, "is_bot": false, "first_name": "Ann", "username": "ann"},
        "chat": {"id": USER, "type": "private"}}})
}

/// Waits for the bot's reply to `message_id`; returns the door it came through.
fn reply_to(fake: &Fake, message_id: i64, within: Duration, what: &str) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let sent = fake.requests("sendMessage");
        if let Some(r) = sent
            .iter()
            .find(|r| r.body["reply_parameters"]["message_id"].as_i64() == Some(message_id))
        {
            return r.door;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no reply to message {message_id}; sent: {:?}",
            sent.iter().map(|r| &r.body).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 31, item 1: a second poller of the same token (another home: an
/// admin's shell beside the service) is waited out; once it leaves, the
/// first gateway serves again — within 30 s — instead of sitting there
/// healthy-looking and deaf.
#[test]
fn a_second_poller_is_waited_out_and_the_first_serves_again() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let door_b = rt.block_on(fake.open_door());
    let provider = provider();
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Gateway::spawn(
        gateway_cmd(home_a.path(), &fake.base, TOKEN, &provider.base_url()),
        home_a.path(),
    );
    fake.push_update(dm(1, 11, "first"));
    assert_eq!(reply_to(&fake, 11, WAIT, "before the second gateway"), 0);

    let mut b = Gateway::spawn(
        gateway_cmd(home_b.path(), &door_b, TOKEN, &provider.base_url()),
        home_b.path(),
    );
    // Both poll: each cuts the other's held poll (409) for a while.
    let deadline = Instant::now() + WAIT;
    while !(fake.polls().iter().any(|p| p.door == 0 && p.conflict)
        && fake.polls().iter().any(|p| p.door == 1))
    {
        assert!(Instant::now() < deadline, "no conflict: {:?}", fake.polls());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(b.stop(), Some(0), "{}", b.log());
    let left = Instant::now();

    assert!(a.wait_exit(Duration::ZERO).is_none(), "{}", a.log());
    fake.push_update(dm(2, 12, "second"));
    let door = reply_to(&fake, 12, WAIT, "after the second gateway left");
    assert_eq!(door, 0, "answered by the first gateway");
    assert!(left.elapsed() < WAIT);
    assert_eq!(a.stop(), Some(0), "{}", a.log());
    let log = a.log();
    assert!(
        log.contains("another process is polling this bot token"),
        "{log}"
    );
}

/// Issue 31, item 1: an adapter that stops for good while serving (the
/// token was revoked) ends the process non-zero, so systemd restarts it
/// and the failure shows.
#[test]
fn an_adapter_that_gives_up_ends_the_process_non_zero() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    fake.script(
        "getUpdates",
        401,
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
    );
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::spawn(
        gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url()),
        home.path(),
    );
    let code = gw
        .wait_exit(WAIT)
        .unwrap_or_else(|| panic!("still running after the token was refused: {}", gw.log()));
    assert_eq!(code, Some(1), "{}", gw.log());
    assert!(gw.log().contains("TELEGRAM_BOT_TOKEN"), "{}", gw.log());
}

fn check(home: &Path, telegram: &str, token: &str, provider_url: &str) -> Output {
    gateway_cmd(home, telegram, token, provider_url)
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Issue 31, item 2: `--check` asks Telegram (`getMe`); a wrong token exits 2
/// naming the variable, and never says "OK" first.
#[test]
fn check_with_a_wrong_token_exits_2_naming_it() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let o = check(
        home.path(),
        &fake.base,
        "999:not-the-token",
        &provider.base_url(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("TELEGRAM_BOT_TOKEN"), "{out}");
    assert!(!out.contains("configuration OK"), "{out}");
    assert_eq!(
        fake.requests("getMe").len(),
        0,
        "the fake knows only its own token"
    );

    // An API URL nobody answers on is as fatal.
    let o = check(home.path(), &dead_url(), TOKEN, &provider.base_url());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("TELEGRAM_API_URL"), "{out}");
}

/// A token of the wrong shape is refused with a hint, a non-numeric
/// allow-list entry named; a reachable provider is said to be.
#[test]
fn check_refuses_bad_token_shapes_and_non_numeric_allow_lists() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let o = check(home.path(), &fake.base, "not-a-token", &provider.base_url());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("does not look like a bot token"), "{out}");

    let o = gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url())
        .env("TELEGRAM_ALLOWED_USERS", "12345,@alice")
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("@alice"), "{out}");

    let o = check(home.path(), &fake.base, TOKEN, &provider.base_url());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("provider reachable"), "{out}");
}

/// Issue 31, item 2: a provider that is down (a local model that starts
/// after the gateway) is a warning, not a failure; the check says who may
/// talk to the bot, the toolsets and the working directory.
#[test]
fn check_with_the_provider_down_warns_and_exits_0() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let home = tempfile::tempdir().unwrap();
    let o = check(home.path(), &fake.base, TOKEN, &dead_url());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("warning"), "{out}");
    assert!(out.contains("provider"), "{out}");
    assert!(out.contains("@fake_bot"), "{out}");
    assert!(out.contains("allowed users: telegram: 7"), "{out}");
    assert!(out.contains("toolsets: todo"), "{out}");
    assert!(
        out.contains(&format!("working directory: {}", home.path().display())),
        "{out}"
    );
    assert_eq!(fake.requests("getMe").len(), 1);

    // Everyone allowed is said loudly.
    let o = gateway_cmd(home.path(), &fake.base, TOKEN, &dead_url())
        .env_remove("TELEGRAM_ALLOWED_USERS")
        .env("GATEWAY_ALLOW_ALL_USERS", "true")
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("EVERYONE"), "{out}");
}

/// Issue 31, item 3: at the default level a served message is one line with
/// a timestamp naming the user (and one line for the reply); connecting
/// names the bot; no HTTP-library noise.
#[test]
fn a_served_message_is_one_log_line_naming_the_user() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::spawn(
        gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url()),
        home.path(),
    );
    fake.push_update(dm(1, 21, "hello there"));
    reply_to(&fake, 21, WAIT, "a plain message");
    assert_eq!(gw.stop(), Some(0), "{}", gw.log());
    let log = gw.log();
    let lines: Vec<&str> = log.lines().collect();
    let incoming: Vec<&&str> = lines.iter().filter(|l| l.contains("message in")).collect();
    assert_eq!(incoming.len(), 1, "{log}");
    let line = incoming[0];
    for part in [
        "platform=telegram",
        "user=7",
        "chat=7",
        "kind=text",
        "size=11",
    ] {
        assert!(line.contains(part), "{part} in {line}");
    }
    // `2026-12-02T03:04:05.123456Z`: a UTC timestamp leads every line.
    for l in &lines {
        let ts = l.split_whitespace().next().unwrap_or("");
        assert!(
            ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.contains('T') && ts.ends_with('Z'),
            "no timestamp: {l}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("connected") && l.contains("@fake_bot")),
        "{log}"
    );
    let out: Vec<&&str> = lines.iter().filter(|l| l.contains("reply out")).collect();
    assert_eq!(out.len(), 1, "{log}");
    assert!(out[0].contains("pieces=1"), "{}", out[0]);
    assert!(out[0].contains("tokens="), "{}", out[0]);
    for noise in ["ureq", "rustls", "hyper"] {
        assert!(!log.contains(noise), "{noise} in {log}");
    }
}

/// Issue 31, item 3: `[gateway] log_format = "json"` writes one JSON object
/// a line; `HERMES_LOG=debug` is hermes's detail only, never the HTTP and
/// TLS libraries' (the filter itself: `gateway_log`'s unit tests).
#[test]
fn json_log_lines_and_debug_without_library_noise() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[gateway]\nlog_format = \"json\"\n",
    )
    .unwrap();
    let mut cmd = gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url());
    cmd.env("HERMES_LOG", "debug");
    let mut gw = Gateway::spawn(cmd, home.path());
    fake.push_update(dm(1, 31, "hi"));
    reply_to(&fake, 31, WAIT, "a plain message");
    assert_eq!(gw.stop(), Some(0), "{}", gw.log());
    let log = gw.log();
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let incoming: Vec<&Value> = events
        .iter()
        .filter(|e| e["message"] == "message in")
        .collect();
    assert_eq!(incoming.len(), 1, "{log}");
    assert_eq!(incoming[0]["user"], "7");
    assert_eq!(incoming[0]["level"], "INFO");
    assert!(incoming[0]["timestamp"].as_str().unwrap().ends_with('Z'));
    for e in &events {
        let target = e["target"].as_str().unwrap_or("");
        assert!(target.starts_with("hermes"), "library noise: {e}");
    }
}

/// Issue 31, item 10: the shipped `packaging/config.toml` passes the check
/// its own comment tells the operator to run (`gateway run --check`), as
/// installed — every key in it known, every commented example too.
#[test]
fn the_packaged_config_passes_gateway_run_check() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/config.toml");
    let shipped = std::fs::read_to_string(shipped).unwrap();
    std::fs::write(home.path().join("config.toml"), &shipped).unwrap();
    let o = check(home.path(), &fake.base, TOKEN, &provider.base_url());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("@fake_bot"), "{out}");

    // The commented examples are meant to be switched on: uncommented,
    // they pass too (a renamed key would fail here, not on a board).
    let uncommented: String = shipped
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest.contains(" = ") && !rest.contains("sudo") => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(uncommented.contains("\nbusy_mode = "), "{uncommented}");
    std::fs::write(home.path().join("config.toml"), &uncommented).unwrap();
    let o = gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url())
        .env_remove("HERMES_TOOLSETS")
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("toolsets: web, memory, todo"), "{out}");
}

/// A plain HTTP/1.1 GET on 127.0.0.1: (status code, body).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (code, body)
}

fn status(home: &Path) -> Output {
    Command::new(HERMES)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HERMES_HOME", home)
        .args(["gateway", "status"])
        .output()
        .unwrap()
}

/// Waits until `check` holds for `hermes gateway status`'s output.
fn status_until(home: &Path, what: &str, check: impl Fn(&Output) -> bool) -> Output {
    let deadline = Instant::now() + WAIT;
    loop {
        let o = status(home);
        if check(&o) {
            return o;
        }
        assert!(Instant::now() < deadline, "{what}: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 31, item 9: `hermes gateway status` says whether a gateway runs
/// for the home (exit 0 / 3), its pid, each platform's connection and the
/// last activity; `GET /healthz` and `/metrics` (Prometheus text) answer on
/// the configured loopback port, and count what was served.
#[test]
fn gateway_status_healthz_and_metrics_follow_a_served_message() {
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let provider = provider();
    let home = tempfile::tempdir().unwrap();
    let o = status(home.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("not running"), "{}", text(&o));

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url());
    cmd.env("GATEWAY_METRICS_PORT", port.to_string());
    let mut gw = Gateway::spawn(cmd, home.path());
    let o = status_until(home.path(), "connected", |o| {
        o.status.code() == Some(0) && text(o).contains("telegram: connected")
    });
    let pid = gw.child.id();
    assert!(
        text(&o).contains(&format!("running (pid {pid})")),
        "{}",
        text(&o)
    );
    let (code, body) = http_get(port, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    // The command menu was filled from the gateway's commands, and the
    // fake (Telegram's rules) accepted it: no warning about it.
    let menu = fake.requests("setMyCommands");
    assert_eq!(menu.len(), 1, "{}", gw.log());
    let names: Vec<&str> = menu[0].body["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    for name in ["new", "stop", "approve", "help"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(!gw.log().contains("setMyCommands"), "{}", gw.log());

    fake.push_update(dm(1, 41, "count me"));
    reply_to(&fake, 41, WAIT, "a plain message");
    let o = status_until(home.path(), "the reply counted", |o| {
        text(o).contains("1 message in, 1 out")
    });
    let out = text(&o);
    assert!(!out.contains("last message in: never"), "{out}");
    assert!(out.contains("turns: 1 answered, 0 failed"), "{out}");
    assert!(out.contains(&format!("127.0.0.1:{port}/metrics")), "{out}");

    let (code, metrics) = http_get(port, "/metrics");
    assert_eq!(code, 200, "{metrics}");
    for line in [
        "hermes_gateway_up 1",
        "hermes_gateway_messages_in_total{platform=\"telegram\"} 1",
        "hermes_gateway_messages_out_total{platform=\"telegram\"} 1",
        "hermes_gateway_turns_total{outcome=\"answered\"} 1",
        "hermes_gateway_turn_duration_seconds_count 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains("# TYPE hermes_gateway_tokens_total counter"),
        "{metrics}"
    );
    assert_eq!(http_get(port, "/nope").0, 404);
    // The status file holds states and counters: no token, no user id.
    let file = std::fs::read_to_string(home.path().join("gateway.status.json")).unwrap();
    assert!(!file.contains(TOKEN) && !file.contains("ann"), "{file}");
    assert!(!file.contains("\"7\""), "{file}");

    // The model is told the platform, the user and the session's start;
    // the prompt stays byte-for-byte the same for the session's next turn.
    fake.push_update(dm(2, 42, "and again"));
    reply_to(&fake, 42, WAIT, "the second message");
    let requests = provider.requests();
    let system = |i: usize| {
        requests[i]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = system(0);
    assert!(
        first.contains("Platform: Telegram, a direct message."),
        "{first}"
    );
    assert!(first.contains("\"ann\" (user id 7"), "{first}");
    assert!(
        first.contains(" UTC. This is when the conversation began"),
        "{first}"
    );
    assert_eq!(
        system(requests.len() - 1),
        first,
        "byte-stable within the session"
    );

    assert_eq!(gw.stop(), Some(0), "{}", gw.log());
    let o = status(home.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!("not running (the last one, pid {pid}, stopped")),
        "{out}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the endpoint is closed"
    );
}

#[path = "gateway_daemon/setup.rs"]
mod setup;
