//! A private PostgreSQL server for the tests of one test binary.
//!
//! [`server`] starts it on first use: `initdb` into a fresh directory (as
//! the `postgres` user when running as root — `initdb` refuses root — with
//! the `C` locale, so the tests also prove that nothing depends on the
//! server's locale), then `postgres` listening on a unix socket only, with
//! `fsync` off. [`fresh_database`] creates an empty database per test and
//! gives its URL.
//!
//! **Its lifetime is the test process's.** The server is started by a
//! thread that lives until the server exits, with `PR_SET_PDEATHSIG`, so
//! the kernel stops it when the test process dies — even by SIGKILL; a
//! normal exit stops it with a fast shutdown (`atexit`) and removes its
//! directory. Servers live under `$HERMES_TEST_PG_ROOT` when set (what
//! `.ci/run` sets, and cleans up in its trap), else the temp dir.
//!
//! Without PostgreSQL installed, [`server`] panics with the install
//! command; a test that needs it starts with
//! `hermes_tests::tier::require(&[Component::Postgres])`, which skips it in
//! the fast tier and fails it in CI ([`crate::tier`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The running server.
#[derive(Debug)]
pub struct PgServer {
    /// Holds the data directory and the socket.
    pub dir: PathBuf,
    /// The socket directory (the URL's `host`).
    pub socket_dir: PathBuf,
    /// The binaries used.
    pub bin: PathBuf,
    /// The superuser to connect as.
    pub user: String,
    pid: i32,
}

impl PgServer {
    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql:///{db}?host={}&user={}",
            self.socket_dir.display(),
            self.user
        )
    }

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

static SERVER: OnceLock<PgServer> = OnceLock::new();
static SERVER_PID: AtomicI32 = AtomicI32::new(0);
static SERVER_EXITED: AtomicBool = AtomicBool::new(false);
static SERVER_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
/// Whether the server is (to be) started with `fsync` on.
static DURABLE: AtomicBool = AtomicBool::new(false);

/// The server of this test process, started on first use.
pub fn server() -> &'static PgServer {
    SERVER.get_or_init(start)
}

/// The server started as a real one would run — `fsync` and full-page
/// writes on — for measurements; tests need no durability and run without.
/// Must be called before anything else of this module in the process.
pub fn durable_server() -> &'static PgServer {
    DURABLE.store(true, Ordering::SeqCst);
    let server = server();
    assert_eq!(
        psql(server, "postgres", "SHOW fsync"),
        "on",
        "the server was started for tests (fsync off) before durable_server"
    );
    server
}

/// Creates an empty database and returns its URL.
pub fn fresh_database() -> String {
    let server = server();
    let n = NEXT_DB.fetch_add(1, Ordering::SeqCst);
    let name = format!("hermes_test_{}_{n}", std::process::id());
    psql(
        server,
        "postgres",
        &format!("CREATE DATABASE {name} STRATEGY = FILE_COPY"),
    );
    server.url(&name)
}

/// Runs one SQL command with `psql` against database `db`; panics with
/// its output if it fails.
pub fn psql(server: &PgServer, db: &str, sql: &str) -> String {
    let out = Command::new(server.bin.join("psql"))
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
        .arg(&server.socket_dir)
        .args(["-U", &server.user, "-d", db, "-c", sql])
        .output()
        .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub(crate) fn install_hint() -> &'static str {
    "PostgreSQL is needed by these tests: `apt-get install -y --no-upgrade postgresql-15` \
     (or set HERMES_TEST_PG_BIN to a directory holding initdb, postgres and psql)"
}

/// The directory with `initdb`, `postgres` and `psql`, if installed.
pub(crate) fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HERMES_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Some(dir);
        }
    }
    None
}

/// The account the server runs as: `postgres` when we are root, else us.
fn account() -> Option<(u32, u32, String)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = CString::new("postgres").unwrap();
    // SAFETY: getpwnam returns a pointer into static storage or null; we
    // read it at once, before any other call that could overwrite it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root, PostgreSQL must run as the `postgres` user, which does not exist: {}",
        install_hint()
    );
    // SAFETY: non-null, points to a valid passwd record (see above).
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some((uid, gid, "postgres".to_owned()))
}

fn as_account(cmd: &mut Command, account: &Option<(u32, u32, String)>) {
    if let Some((uid, gid, _)) = account {
        cmd.uid(*uid).gid(*gid);
    }
}

fn chown(path: &Path, account: &Option<(u32, u32, String)>) {
    if let Some((uid, gid, _)) = account {
        std::os::unix::fs::chown(path, Some(*uid), Some(*gid)).unwrap();
    }
}

extern "C" fn stop_at_exit() {
    let pid = SERVER_PID.load(Ordering::SeqCst);
    if pid > 0 && !SERVER_EXITED.load(Ordering::SeqCst) {
        // SAFETY: signalling our own child; a stale pid is impossible
        // while SERVER_EXITED is false (the keeper thread reaps it).
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !SERVER_EXITED.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !SERVER_EXITED.load(Ordering::SeqCst) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    if let Some(dir) = SERVER_DIR.lock().ok().and_then(|mut d| d.take()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn start() -> PgServer {
    crate::tier::expect(crate::tier::Component::Postgres);
    let bin = find_bin().unwrap_or_else(|| panic!("{}", install_hint()));
    for tool in ["initdb", "postgres", "psql"] {
        assert!(
            bin.join(tool).exists(),
            "{} missing in {}: {}",
            tool,
            bin.display(),
            install_hint()
        );
    }
    let account = account();
    let root = match std::env::var_os("HERMES_TEST_PG_ROOT") {
        Some(root) => {
            // Ours (`.ci/run` makes it with mktemp, mode 0700): the server's
            // account must be able to reach its directory inside.
            let root = PathBuf::from(root);
            std::fs::create_dir_all(&root).unwrap();
            let mode = std::fs::metadata(&root).unwrap().permissions().mode();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(mode | 0o711)).unwrap();
            root
        }
        None => std::env::temp_dir(),
    };
    let dir = root.join(format!(
        "hermes-pg-{}-{:08x}",
        std::process::id(),
        rand_u32()
    ));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(stop_at_exit) };
    *SERVER_DIR.lock().unwrap() = Some(dir.clone());
    chown(&dir, &account);
    let data = dir.join("data");
    let socket_dir = dir.join("sock");
    std::fs::create_dir(&socket_dir).unwrap();
    chown(&socket_dir, &account);
    let user = account
        .as_ref()
        .map(|a| a.2.clone())
        .unwrap_or_else(|| "postgres".to_owned());

    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args([
            "-A",
            "trust",
            "-U",
            &user,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .stdin(Stdio::null());
    as_account(&mut initdb, &account);
    die_with_parent(&mut initdb);
    let out = initdb.output().unwrap();
    assert!(
        out.status.success(),
        "initdb failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    chown(&dir.join("server.log"), &account);
    let mut postgres = Command::new(bin.join("postgres"));
    postgres
        .arg("-D")
        .arg(&data)
        .args(["-c", "listen_addresses=", "-k"])
        .arg(&socket_dir);
    if !DURABLE.load(Ordering::SeqCst) {
        postgres.args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
    }
    postgres
        .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    as_account(&mut postgres, &account);
    die_with_parent(&mut postgres);
    let (spawned, started) = mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-keeper".into())
        .spawn(move || match postgres.spawn() {
            Ok(mut child) => {
                let pid = i32::try_from(child.id()).unwrap_or(0);
                SERVER_PID.store(pid, Ordering::SeqCst);
                let _ = spawned.send(Ok(pid));
                let _ = child.wait();
                SERVER_EXITED.store(true, Ordering::SeqCst);
            }
            Err(e) => {
                let _ = spawned.send(Err(e));
            }
        })
        .unwrap();
    let pid = started
        .recv()
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start postgres: {e}"));
    let server = PgServer {
        dir: dir.clone(),
        socket_dir,
        bin,
        user,
        pid,
    };
    // Ready when it answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = Command::new(server.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-h"])
            .arg(&server.socket_dir)
            .args(["-U", &server.user, "-d", "postgres", "-c", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            break;
        }
        assert!(
            !SERVER_EXITED.load(Ordering::SeqCst),
            "postgres exited at start: {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "postgres did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// The child gets SIGQUIT (PostgreSQL's immediate shutdown) when the
/// thread that spawned it exits — with the test process, even on SIGKILL.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (prctl, getppid) run between
    // fork and exec. PDEATHSIG is set after the uid change (which would
    // clear it); it fires when the thread that forked exits, and the
    // server's thread waits for the server, so it outlives it.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() == 1 {
                // The parent died before the prctl: do not outlive it.
                return Err(std::io::Error::other("test process gone"));
            }
            Ok(())
        });
    }
}

fn rand_u32() -> u32 {
    let mut buf = [0u8; 4];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 4 {
        u32::from_ne_bytes(buf)
    } else {
        std::process::id()
    }
}
