//! A private Synapse homeserver for the Matrix tests of one test binary.
//!
//! [`server`] starts it on first use: a config written into a fresh
//! directory (SQLite, one plain-HTTP listener on a free loopback port, no
//! federation, rate limits raised, lowered per user by
//! [`Synapse::set_rate_limit`]),
//! keys generated, then the homeserver itself, started with
//! `PR_SET_PDEATHSIG` so the kernel stops it when the test process dies.
//! Users are registered through the shared-secret admin API.
//!
//! Synapse comes from PyPI: `$HERMES_SYNAPSE_PYTHON` names the Python of a
//! virtualenv that has `matrix-synapse` installed (`.ci/run` makes one).
//! Without it [`server`] panics with the commands to make one: the tests
//! fail, they do not skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};

const SHARED_SECRET: &str = "hermes-test-registration-secret";

/// The running homeserver.
#[derive(Debug)]
pub struct Synapse {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its directory (config, database, media, log).
    pub dir: PathBuf,
}

static SERVER: OnceLock<Synapse> = OnceLock::new();
static NEXT_USER: AtomicU32 = AtomicU32::new(0);
static SERVER_PID: AtomicI32 = AtomicI32::new(0);
static SERVER_EXITED: AtomicBool = AtomicBool::new(false);
static SERVER_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The homeserver of this test process, started on first use.
pub fn server() -> &'static Synapse {
    SERVER.get_or_init(start)
}

fn python() -> PathBuf {
    crate::tier::expect(crate::tier::Component::Synapse);
    match std::env::var_os("HERMES_SYNAPSE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "the Matrix tests need a Synapse homeserver: python3 -m venv /tmp/synapse-venv && \
             /tmp/synapse-venv/bin/pip install matrix-synapse, then set \
             HERMES_SYNAPSE_PYTHON=/tmp/synapse-venv/bin/python (.ci/run does this)"
        ),
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn config(dir: &std::path::Path, port: u16) -> String {
    let d = dir.display();
    // Rate limits: high for everyone; the rate-limit test registers a user
    // whose limit is set back to strict through the admin API.
    let fast = "{per_second: 1000, burst_count: 1000}";
    format!(
        r#"server_name: "localhost"
pid_file: {d}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: {d}/homeserver.db
media_store_path: {d}/media
signing_key_path: {d}/signing.key
registration_shared_secret: "{SHARED_SECRET}"
macaroon_secret_key: "hermes-test-macaroon"
form_secret: "hermes-test-form"
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
enable_metrics: false
rc_message: {{per_second: 1000, burst_count: 1000}}
rc_login:
  address: {fast}
  account: {fast}
  failed_attempts: {fast}
rc_joins:
  local: {fast}
  remote: {fast}
rc_invites:
  per_room: {fast}
  per_user: {fast}
  per_issuer: {fast}
rc_admin_redaction: {fast}
"#
    )
}

fn start() -> Synapse {
    let python = python();
    let dir = tempfile_dir();
    let port = free_port();
    let config_path = dir.join("homeserver.yaml");
    std::fs::write(&config_path, config(&dir, port)).unwrap();
    let keys = Command::new(&python)
        .args(["-m", "synapse.app.homeserver", "-c"])
        .arg(&config_path)
        .arg("--generate-keys")
        .current_dir(&dir)
        .output()
        .expect("run Synapse to generate its keys");
    assert!(
        keys.status.success(),
        "synapse --generate-keys failed: {}",
        String::from_utf8_lossy(&keys.stderr)
    );
    // PR_SET_PDEATHSIG follows the thread that forked, not the process:
    // the server is started by a thread that lives until the server exits
    // (a test's own thread ends with the test).
    let (tx, rx) = mpsc::channel();
    let spawn_dir = dir.clone();
    std::thread::spawn(move || {
        let log = std::fs::File::create(spawn_dir.join("synapse.log")).unwrap();
        let mut command = Command::new(&python);
        command
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(spawn_dir.join("homeserver.yaml"))
            .current_dir(&spawn_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("start Synapse");
        let pid = i32::try_from(child.id()).unwrap_or(0);
        SERVER_PID.store(pid, Ordering::SeqCst);
        tx.send(pid).unwrap();
        let _ = child.wait();
        SERVER_EXITED.store(true, Ordering::SeqCst);
    });
    rx.recv().expect("the Synapse starter thread");
    *SERVER_DIR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir.clone());
    // SAFETY: registering a plain `extern "C" fn` with no captured state.
    unsafe {
        libc::atexit(stop_at_exit);
    }
    let base = format!("http://127.0.0.1:{port}");
    // The first start creates the schema: slow on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if let Ok(mut r) = ureq::get(&format!("{base}/health")).call()
            && r.body_mut().read_to_string().unwrap_or_default() == "OK"
        {
            break;
        }
        if SERVER_EXITED.load(Ordering::SeqCst) {
            let log = std::fs::read_to_string(dir.join("synapse.log")).unwrap_or_default();
            panic!("Synapse exited before serving:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "Synapse did not start within 240 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Synapse { base, dir }
}

/// Stops the server and removes its directory when the test process exits
/// normally (a killed process leaves the kill to `PR_SET_PDEATHSIG`).
extern "C" fn stop_at_exit() {
    let pid = SERVER_PID.load(Ordering::SeqCst);
    if pid > 0 && !SERVER_EXITED.load(Ordering::SeqCst) {
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    if let Ok(mut dir) = SERVER_DIR.lock()
        && let Some(dir) = dir.take()
    {
        // The server may still be closing its files: a second try.
        if std::fs::remove_dir_all(&dir).is_err() {
            std::thread::sleep(Duration::from_millis(200));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

fn tempfile_dir() -> PathBuf {
    let root = std::env::var_os("HERMES_TEST_SYNAPSE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(format!(
        "hermes-synapse-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A logged-in user, for driving the other side of a conversation.
#[derive(Clone, Debug)]
pub struct User {
    /// `@name:localhost`.
    pub user_id: String,
    /// The localpart's password.
    pub password: String,
    /// An access token of a login made at registration.
    pub token: String,
    base: String,
}

fn call(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut resp = match method {
        "GET" => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            r.call().unwrap()
        }
        m => {
            let mut r = if m == "PUT" {
                agent.put(url)
            } else {
                agent.post(url)
            };
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            r.send_json(body.cloned().unwrap_or(json!({}))).unwrap()
        }
    };
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

impl Synapse {
    /// Registers a new user named `{prefix}{n}` (unique in this process) and
    /// logs it in.
    pub fn user(&self, prefix: &str) -> User {
        self.register(prefix, false)
    }

    /// Registers a server admin (for the admin API).
    pub fn admin(&self) -> User {
        self.register("admin", true)
    }

    fn register(&self, prefix: &str, admin: bool) -> User {
        let n = NEXT_USER.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}{n}");
        let password = format!("pw-{name}");
        let url = format!("{}/_synapse/admin/v1/register", self.base);
        let (_, nonce) = call("GET", &url, None, None);
        let nonce = nonce["nonce"]
            .as_str()
            .expect("a registration nonce")
            .to_owned();
        let role = if admin { "admin" } else { "notadmin" };
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(SHARED_SECRET.as_bytes()).unwrap();
        mac.update(format!("{nonce}\0{name}\0{password}\0{role}").as_bytes());
        let mac: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let body = json!({"nonce": nonce, "username": name, "password": password, "admin": admin, "mac": mac});
        let (status, answer) = call("POST", &url, None, Some(&body));
        assert_eq!(status, 200, "register {name}: {answer}");
        User {
            user_id: answer["user_id"].as_str().unwrap().to_owned(),
            token: answer["access_token"].as_str().unwrap().to_owned(),
            password,
            base: self.base.clone(),
        }
    }

    /// Sets `user`'s message rate limit (per second, burst) through the
    /// admin API, acting as `admin`.
    pub fn set_rate_limit(&self, admin: &User, user: &str, per_second: u32, burst: u32) {
        let (status, answer) = call(
            "POST",
            &format!(
                "{}/_synapse/admin/v1/users/{}/override_ratelimit",
                self.base,
                seg(user)
            ),
            Some(&admin.token),
            Some(&json!({"messages_per_second": per_second, "burst_count": burst})),
        );
        assert_eq!(status, 200, "{answer}");
    }
}

fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

static NEXT_TXN: AtomicU32 = AtomicU32::new(0);

impl User {
    fn url(&self, path: &str) -> String {
        format!("{}/_matrix/client/v3{path}", self.base)
    }

    /// A client-server call as this user.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        call(method, &self.url(path), Some(&self.token), body.as_ref())
    }

    /// Creates a private room, inviting `invite`; returns its id.
    pub fn create_room(&self, invite: &[&str], direct: bool) -> String {
        let (status, answer) = self.call(
            "POST",
            "/createRoom",
            Some(json!({"preset": "private_chat", "invite": invite, "is_direct": direct})),
        );
        assert_eq!(status, 200, "{answer}");
        answer["room_id"].as_str().unwrap().to_owned()
    }

    /// Invites `user` into `room`.
    pub fn invite(&self, room: &str, user: &str) {
        let (status, answer) = self.call(
            "POST",
            &format!("/rooms/{}/invite", seg(room)),
            Some(json!({"user_id": user})),
        );
        assert_eq!(status, 200, "{answer}");
    }

    /// Joins `room`.
    pub fn join(&self, room: &str) {
        let (status, answer) = self.call("POST", &format!("/join/{}", seg(room)), Some(json!({})));
        assert_eq!(status, 200, "{answer}");
    }

    /// Sends an `m.room.message` with `content`; returns the event id.
    pub fn send(&self, room: &str, content: Value) -> String {
        let txn = format!("t{}", NEXT_TXN.fetch_add(1, Ordering::SeqCst));
        let (status, answer) = self.call(
            "PUT",
            &format!("/rooms/{}/send/m.room.message/{txn}", seg(room)),
            Some(content),
        );
        assert_eq!(status, 200, "{answer}");
        answer["event_id"].as_str().unwrap().to_owned()
    }

    /// Sends plain text; returns the event id.
    pub fn say(&self, room: &str, text: &str) -> String {
        self.send(room, json!({"msgtype": "m.text", "body": text}))
    }

    /// The room's `m.room.message` events, oldest first (up to 1000).
    pub fn messages(&self, room: &str) -> Vec<Value> {
        let (status, answer) = self.call(
            "GET",
            &format!("/rooms/{}/messages?dir=b&limit=1000", seg(room)),
            None,
        );
        assert_eq!(status, 200, "{answer}");
        let mut events: Vec<Value> = answer["chunk"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["type"] == "m.room.message")
            .collect();
        events.reverse();
        events
    }

    /// The room's members who have joined.
    pub fn joined(&self, room: &str) -> Vec<String> {
        let (_, answer) = self.call("GET", &format!("/rooms/{}/joined_members", seg(room)), None);
        answer["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until `sender` has sent at least `n` messages in `room`;
    /// returns their bodies.
    pub fn wait_for_messages(
        &self,
        room: &str,
        sender: &str,
        n: usize,
        wait: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + wait;
        loop {
            let bodies: Vec<String> = self
                .messages(room)
                .iter()
                .filter(|e| e["sender"] == sender)
                .map(|e| e["content"]["body"].as_str().unwrap_or_default().to_owned())
                .collect();
            if bodies.len() >= n {
                return bodies;
            }
            assert!(
                Instant::now() < deadline,
                "{sender} sent {} of {n} messages in {room}: {bodies:?}",
                bodies.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
