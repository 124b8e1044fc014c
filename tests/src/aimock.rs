//! Runs the pinned `@copilotkit/aimock` LLM API emulator
//! (`tests/emulators/aimock`) as a child process on a free loopback port,
//! for tests of any crate that want a third-party OpenAI-compatible server
//! (chat, vision, `/v1/audio/transcriptions`) rather than our own fake.
//!
//! The emulator must be installed first (`npm ci` in that directory; CI
//! does it). If it is missing the test FAILS with instructions — it never
//! passes silently. The child is killed when the [`Aimock`] is dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// How long node may take to start on a loaded machine.
const STARTUP_LIMIT: Duration = Duration::from_secs(60);

/// A running aimock server.
#[derive(Debug)]
pub struct Aimock {
    child: Child,
    /// `http://127.0.0.1:PORT` (no `/v1`).
    pub url: String,
    /// Everything the child printed, for failure messages.
    pub log: Arc<Mutex<String>>,
}

/// `tests/emulators/aimock` in the repository.
pub fn emulator_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("emulators")
        .join("aimock")
}

fn append(log: &Mutex<String>, text: &str) {
    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
    log.push_str(text);
}

impl Aimock {
    /// Starts aimock with the fixture file `fixtures/<name>` of the emulator
    /// directory, on a port the OS picks. Panics (failing the test) with
    /// install instructions when the emulator is missing.
    pub fn start(fixture_file: &str) -> Aimock {
        Self::start_with(fixture_file, &[])
    }

    /// [`Self::start`] with extra command-line flags (e.g. `--strict`, which
    /// also makes aimock check Anthropic's extended-thinking rules).
    pub fn start_with(fixture_file: &str, extra_args: &[&str]) -> Aimock {
        crate::tier::expect(crate::tier::Component::Npm("aimock"));
        let dir = emulator_dir();
        let cli = dir.join("node_modules/@copilotkit/aimock/dist/cli.js");
        assert!(
            cli.is_file(),
            "the aimock emulator is not installed ({} is missing).\n\
             Install it with:  npm ci --prefix {}\n\
             (or: {}/aimock.sh install). Node.js >= 20 is required.",
            cli.display(),
            dir.display(),
            dir.display(),
        );
        let fixtures = dir.join("fixtures").join(fixture_file);
        assert!(
            fixtures.is_file(),
            "missing fixture file {}",
            fixtures.display()
        );
        let mut child = match Command::new("node")
            .arg(&cli)
            .args(["--port", "0", "--host", "127.0.0.1", "--log-level", "info"])
            .arg("--fixtures")
            .arg(&fixtures)
            .args(extra_args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                panic!("cannot run `node` for the aimock emulator: {e}. Install Node.js >= 20.")
            }
        };
        let log = Arc::new(Mutex::new(String::new()));
        let (url_tx, url_rx) = mpsc::channel::<String>();
        if let Some(stdout) = child.stdout.take() {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if let Some(pos) = line.find("listening on ") {
                        let url = line[pos + "listening on ".len()..].trim().to_owned();
                        let _ = url_tx.send(url);
                    }
                    append(&log, &format!("{line}\n"));
                }
            });
        }
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let mut text = String::new();
                let _ = BufReader::new(stderr).read_to_string(&mut text);
                append(&log, &text);
            });
        }
        let Ok(url) = url_rx.recv_timeout(STARTUP_LIMIT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "aimock did not report its address within {STARTUP_LIMIT:?}; output:\n{}",
                log.lock().unwrap_or_else(PoisonError::into_inner)
            );
        };
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "aimock reported an unexpected address {url:?}"
        );
        Aimock { child, url, log }
    }

    /// The OpenAI base URL (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// The journal entries (method, path, body as aimock read it, response)
    /// of requests whose path ends with `suffix`.
    pub fn journal(&self, suffix: &str) -> Vec<Value> {
        let body = ureq::get(format!("{}/__aimock/journal", self.url))
            .call()
            .and_then(|r| r.into_body().read_to_string());
        let body = match body {
            Ok(b) => b,
            Err(e) => panic!("aimock journal: {e}"),
        };
        let journal: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let entries = match journal {
            Value::Array(a) => a,
            other => other["entries"].as_array().cloned().unwrap_or_default(),
        };
        entries
            .into_iter()
            .filter(|e| e["path"].as_str().is_some_and(|p| p.ends_with(suffix)))
            .collect()
    }

    /// Chat-completion requests aimock recorded.
    pub fn chat_requests(&self) -> Vec<Value> {
        self.journal("/chat/completions")
    }

    /// Anthropic Messages requests aimock recorded (the body is aimock's
    /// converted view, not the bytes the client sent).
    pub fn messages_requests(&self) -> Vec<Value> {
        self.journal("/messages")
    }

    /// Transcription requests aimock recorded.
    pub fn transcription_requests(&self) -> Vec<Value> {
        self.journal("/audio/transcriptions")
    }
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
