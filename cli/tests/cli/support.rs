//! What every test of the binary needs: a hermetic environment, output
//! helpers, and a PTY session whose output can be read as a screen.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const HERMES: &str = env!("CARGO_BIN_EXE_hermes");

/// A hermetic environment: its own HERMES_HOME and HOME, no inherited keys.
pub struct Env {
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    /// `hermes` with only PATH, HOME, HERMES_HOME, the provider URL and model set.
    pub fn cmd(&self, base_url: &str) -> Command {
        let mut c = self.bare();
        c.env("HERMES_BASE_URL", base_url)
            .env("HERMES_MODEL", "fake-model");
        c
    }

    /// `hermes` with nothing configured at all.
    pub fn bare(&self) -> Command {
        let mut c = Command::new(HERMES);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERMES_HOME", self.home.path())
            .current_dir(self.work.path())
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, base_url: &str, args: &[&str]) -> Output {
        self.cmd(base_url).args(args).output().unwrap()
    }

    /// Runs with `input` piped to stdin.
    pub fn run_with_stdin(&self, base_url: &str, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .cmd(base_url)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    }

    pub fn write_home(&self, name: &str, text: &str) {
        std::fs::write(self.home.path().join(name), text).unwrap();
    }

    /// The ids of the stored sessions, newest first, as `hermes sessions list`
    /// shows them (first column, header skipped).
    pub fn session_ids(&self) -> Vec<String> {
        let o = self
            .bare()
            .args(["sessions", "list", "-n", "1000"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub fn roles(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

/// A port nobody listens on.
pub fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `hermes` in a pseudo-terminal, its output also fed to a terminal
/// emulator so tests can assert on what the screen shows.
pub struct Pty {
    pub p: rexpect::session::PtySession,
    screen: vt100::Parser,
    /// Everything read so far, raw.
    pub raw: String,
}

impl Pty {
    /// Spawns `cmd` (from [`Env::cmd`]) in a 120×40 terminal that echoes
    /// like a real one (rexpect turns echo off; `stty` turns it back on and
    /// sets the size the program reads with TIOCGWINSZ).
    pub fn spawn(cmd: Command, term: &str) -> Self {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg("stty echo cols 120 rows 40 && exec \"$0\" \"$@\"")
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .env_clear()
            .env("TERM", term);
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                sh.env(k, v);
            }
        }
        if let Some(dir) = cmd.get_current_dir() {
            sh.current_dir(dir);
        }
        let p = rexpect::session::spawn_command(sh, Some(30_000)).unwrap();
        Pty {
            p,
            screen: vt100::Parser::new(
                std::num::NonZeroU16::new(40).unwrap(),
                std::num::NonZeroU16::new(120).unwrap(),
                0,
            ),
            raw: String::new(),
        }
    }

    /// rexpect reads bytes and makes each one a `char`; this undoes that.
    fn feed(&mut self, read: &str) {
        let bytes: Vec<u8> = read.chars().map(|c| c as u8).collect();
        self.raw.push_str(&String::from_utf8_lossy(&bytes));
        self.screen.process(&bytes);
    }

    /// Waits for `needle` in the output; returns what came before it (and feeds the screen).
    pub fn expect(&mut self, needle: &str) -> String {
        // The needle as rexpect will see it: one char per UTF-8 byte.
        let as_read: String = needle.bytes().map(char::from).collect();
        let before = self
            .p
            .exp_string(&as_read)
            .unwrap_or_else(|e| panic!("waiting for {needle:?}: {e}\nso far: {:?}", self.raw));
        self.feed(&before);
        self.feed(&as_read);
        let bytes: Vec<u8> = before.chars().map(|c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Reads whatever arrives for `d` (no expectation).
    pub fn drain(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            match self.p.try_read() {
                Some(c) => {
                    let mut s = String::new();
                    s.push(c);
                    self.feed(&s);
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// The screen's text, trailing spaces trimmed, one string per row.
    pub fn screen(&self) -> String {
        self.screen.screen().contents()
    }

    pub fn send(&mut self, s: &str) {
        self.p.send(s).unwrap();
        self.p.flush().unwrap();
    }

    /// Types `s` and presses Enter (a carriage return, as a terminal sends).
    pub fn send_line(&mut self, s: &str) {
        self.send(&format!("{s}\r"));
    }

    pub fn ctrl(&mut self, c: char) {
        self.p.send_control(c).unwrap();
    }

    pub fn eof(&mut self) {
        let rest = self.p.exp_eof().unwrap();
        self.feed(&rest);
    }
}

/// Waits up to 30 s for `ready`, naming `what` if it never is.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} never came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The run ends, with exit status 130 (interrupted).
pub fn ends_with_130(p: &mut Pty) {
    p.eof();
    let status = p.p.process.wait().unwrap();
    assert!(
        matches!(status, rexpect::process::wait::WaitStatus::Exited(_, 130)),
        "{status:?}"
    );
}

/// Whether process `pid` is hermes (past the shell's `exec`) and catches
/// SIGINT (`SigCgt` in its status).
pub fn catches_sigint(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let named = status.lines().any(|l| l == "Name:\thermes");
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0);
    named && caught
}
