//! Real gateways for the suite: the test binary re-run as a child that does
//! exactly what `hermes gateway run` does, on a `$HERMES_HOME` and a
//! scripted provider that outlive it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use hermes_gateway::app::run_gateway;
use hermes_runtime::config::{Environment, Overrides, load};

/// Set in the environment of the re-run test binary: be the gateway.
const CHILD_ENV: &str = "HERMES_GATEWAY_CONFORMANCE_CHILD";

/// Given in a gateway's env: where the re-run child writes its log.
pub const LOG_FILE_ENV: &str = "HERMES_CONFORMANCE_LOG_FILE";

/// Names a `hermes` executable to run as the gateway (`gateway run`)
/// instead of the re-run test binary: the measurements use the release
/// build ([`super::measure`], `scripts/adapter-bench.sh`).
pub const EXE_ENV: &str = "HERMES_CONFORMANCE_EXE";

/// A running gateway; killed if the test fails while it runs.
pub struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Gateway {
    /// Starts a gateway in `cwd` on `home`: the child re-runs exactly the
    /// test `test` (its name under the `conformance` module) and serves instead of testing.
    pub fn spawn(
        test: &str,
        env: &[(&'static str, String)],
        home: &Path,
        cwd: &Path,
        provider: &str,
    ) -> Gateway {
        let mut command = match std::env::var_os(EXE_ENV) {
            Some(exe) => {
                let mut command = Command::new(exe);
                command.args(["gateway", "run"]);
                command
            }
            None => {
                let mut command = Command::new(std::env::current_exe().unwrap());
                // `test` is named from the `conformance` module, which is
                // one module of the gateway's one test binary.
                let exact = format!("conformance::{test}");
                // `--include-ignored`: an `#[ignore]`d soak run with
                // `--ignored` must still find itself in the child.
                command.args([
                    "--exact",
                    &exact,
                    "--include-ignored",
                    "--nocapture",
                    "--test-threads=1",
                ]);
                command
            }
        };
        command
            .env_clear()
            .env(CHILD_ENV, "1")
            .env("HERMES_HOME", home)
            .env("HERMES_BASE_URL", provider)
            .env("HERMES_MODEL", "conformance-model")
            .env("HERMES_TOOLSETS", "todo")
            // One answer per message, so each can be counted.
            .env("GATEWAY_BUSY_MODE", "queue")
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("HERMES_CONFORMANCE_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        for (name, value) in env {
            command.env(name, value);
        }
        Gateway(command.spawn().unwrap())
    }

    /// The child's process id (to read its memory and CPU time in `/proc`).
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGTERM, and waits for it to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.0.wait().unwrap()
    }

    /// Waits up to `within` for it to exit on its own.
    pub fn wait_exit(&mut self, within: std::time::Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

/// In the re-run child: does exactly what `hermes gateway run` does, and
/// exits. In the test itself: returns. Every suite test calls it first.
pub fn serve_if_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // A test that reads the gateway's log names a file for it (info and up,
    // as `hermes gateway run` logs by default).
    if let Some(path) = std::env::var_os(LOG_FILE_ENV) {
        let file = std::fs::File::create(path).unwrap();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init();
    }
    let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
    let code = match run_gateway(&settings, false) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gateway error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// A number from the environment (the suite's knobs).
pub fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
