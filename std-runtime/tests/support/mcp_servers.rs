//! The reference MCP servers pinned in `tests/emulators/mcp` (npm):
//! `@modelcontextprotocol/server-everything` (over stdio, and over
//! streamable HTTP on a loopback port) and
//! `@modelcontextprotocol/server-filesystem` (stdio).
//!
//! They must be installed first (`npm ci --prefix tests/emulators/mcp`; CI
//! does it). If they are missing the test FAILS with that instruction.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hermes_runtime::mcp::{ServerConfig, Transport};

/// `tests/emulators/mcp` in the repository.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/emulators/mcp")
}

fn script(package: &str) -> PathBuf {
    hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("mcp"));
    let path = dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    assert!(
        path.is_file(),
        "the MCP test servers are not installed ({} is missing): run \
         `npm ci --prefix tests/emulators/mcp` from the repository root (needs Node.js and npm)",
        path.display()
    );
    path
}

/// A stdio server config with defaults a test can tighten.
pub fn stdio(name: &str, program: &str, args: Vec<String>) -> ServerConfig {
    ServerConfig {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: program.to_owned(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        },
        call_timeout: Duration::from_secs(60),
        max_call_time: Duration::from_secs(120),
        startup_timeout: Duration::from_secs(60),
        tools: None,
    }
}

/// server-everything over stdio, named `name`.
pub fn everything(name: &str) -> ServerConfig {
    stdio(
        name,
        "node",
        vec![
            script("server-everything").display().to_string(),
            "stdio".into(),
        ],
    )
}

/// server-filesystem over stdio, allowed into `root`.
pub fn filesystem(name: &str, root: &Path) -> ServerConfig {
    stdio(
        name,
        "node",
        vec![
            script("server-filesystem").display().to_string(),
            root.display().to_string(),
        ],
    )
}

/// server-everything's streamable-HTTP transport, on a loopback port; killed
/// on drop.
pub struct HttpEverything {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl HttpEverything {
    pub fn start() -> HttpEverything {
        script("server-everything");
        let mut child = Command::new("node")
            .arg("everything-http.mjs")
            .current_dir(dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot run `node` (is Node.js installed?)");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(port.trim().to_owned());
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("server-everything (streamable HTTP) did not start within 60 s");
            }
        };
        HttpEverything {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    pub fn config(&self, name: &str) -> ServerConfig {
        ServerConfig {
            transport: Transport::Http {
                url: self.url.clone(),
                headers: BTreeMap::new(),
            },
            ..everything(name)
        }
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
