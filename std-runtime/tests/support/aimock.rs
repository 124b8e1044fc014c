//! Runs the pinned `@copilotkit/aimock` LLM API emulator
//! (`tests/emulators/aimock` at the repository root) as a child process on a
//! free loopback port, for tests that want a third-party OpenAI-compatible
//! server rather than our own scripted one.
//!
//! The emulator must be installed first (`npm ci` in that directory; CI does
//! it). If it is missing the test FAILS with instructions — it never passes
//! silently. The child is killed when the [`Aimock`] is dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How long node may take to start on a loaded machine.
const STARTUP_LIMIT: Duration = Duration::from_secs(60);

/// A running aimock server.
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
        .join("..")
        .join("tests")
        .join("emulators")
        .join("aimock")
}

impl Aimock {
    /// Starts aimock with the fixture file `fixtures/<name>` of the emulator
    /// directory, on a port the OS picks.
    pub fn start(fixture_file: &str) -> Aimock {
        Self::start_with(fixture_file, &[])
    }

    /// [`Self::start`] with extra command-line flags (e.g. `--strict`, which
    /// also makes aimock check Anthropic's extended-thinking rules).
    pub fn start_with(fixture_file: &str, extra_args: &[&str]) -> Aimock {
        let dir = emulator_dir();
        let cli = dir
            .join("node_modules")
            .join("@copilotkit")
            .join("aimock")
            .join("dist")
            .join("cli.js");
        assert!(
            cli.is_file(),
            "the aimock emulator is not installed ({} is missing).\n\
             Install it with:  npm ci --prefix {}\n\
             (or: {}/aimock.sh install). Node.js >= 20 is required.",
            cli.display(),
            dir.display(),
            dir.display()
        );
        let fixtures = dir.join("fixtures").join(fixture_file);
        assert!(
            fixtures.is_file(),
            "missing fixture file {}",
            fixtures.display()
        );

        let mut child = Command::new("node")
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
            .unwrap_or_else(|e| {
                panic!("cannot run `node` for the aimock emulator: {e}. Install Node.js >= 20.")
            });

        let log = Arc::new(Mutex::new(String::new()));
        let (url_tx, url_rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        {
            let log = log.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if let Some(pos) = line.find("listening on ") {
                        let url = line[pos + "listening on ".len()..].trim().to_owned();
                        let _ = url_tx.send(url);
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        {
            let log = log.clone();
            thread::spawn(move || {
                let mut text = String::new();
                let _ = BufReader::new(stderr).read_to_string(&mut text);
                log.lock().unwrap().push_str(&text);
            });
        }

        let url = match url_rx.recv_timeout(STARTUP_LIMIT) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "aimock did not report its address within {STARTUP_LIMIT:?}; output:\n{}",
                    log.lock().unwrap()
                );
            }
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

    /// Chat-completion requests aimock recorded (its request journal).
    pub fn chat_requests(&self) -> Vec<serde_json::Value> {
        self.journal("/chat/completions")
    }

    /// Anthropic Messages requests aimock recorded (the body is aimock's
    /// converted view; the raw one is in a [`super::proxy::RecordingProxy`]).
    pub fn messages_requests(&self) -> Vec<serde_json::Value> {
        self.journal("/messages")
    }

    fn journal(&self, suffix: &str) -> Vec<serde_json::Value> {
        let body = ureq::get(format!("{}/__aimock/journal", self.url))
            .call()
            .expect("aimock journal")
            .into_body()
            .read_to_string()
            .expect("journal body");
        let journal: serde_json::Value = serde_json::from_str(&body).expect("journal JSON");
        let entries = match journal {
            serde_json::Value::Array(a) => a,
            other => other["entries"].as_array().cloned().unwrap_or_default(),
        };
        entries
            .into_iter()
            .filter(|e| e["path"].as_str().is_some_and(|p| p.ends_with(suffix)))
            .collect()
    }
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
