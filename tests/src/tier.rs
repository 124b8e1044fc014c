//! The two tiers of the test suite (issue 40 §3).
//!
//! - **Fast tier:** plain `cargo test --workspace` on a machine with Rust
//!   alone. A test that needs a component this machine lacks (PostgreSQL,
//!   Synapse, Dovecot, aiosmtpd, an npm emulator, a Python peer) starts with
//!   [`require`], which prints one `SKIP` line naming the test, the
//!   component and how to get it, and returns `false`: the test returns
//!   without testing anything, and says so.
//! - **Full tier:** `.ci/run`, which installs every component and sets
//!   `CI=true`. There [`require`] never skips: a missing component fails
//!   the test with the same hint — nothing is skipped silently in CI.
//!   `HERMES_FULL_TIER=1` asks for the full tier outside CI.
//!
//! `HERMES_TIER_HIDE=postgres,synapse,…` (or `all`) makes components
//! count as missing on a machine that has them, to see the fast tier where
//! everything is installed; the start-up functions of the components
//! ([`crate::postgres::server`], …) then refuse too, so a test that needs a
//! component and lacks its guard fails instead of reaching it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Something outside Rust that some tests need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// PostgreSQL's server binaries (`initdb`, `postgres`, `psql`).
    Postgres,
    /// A Python with Synapse (`HERMES_SYNAPSE_PYTHON`), the Matrix homeserver.
    Synapse,
    /// Dovecot's IMAP and LMTP servers, the Email tests' mailbox.
    Dovecot,
    /// A Python with aiosmtpd (`HERMES_AIOSMTPD_PYTHON`), the Email tests' SMTP server.
    Aiosmtpd,
    /// An npm emulator under `tests/emulators/NAME` (its `node_modules`), and `node`.
    Npm(&'static str),
    /// A Python with the official `openai` client (`HERMES_OPENAI_PYTHON`).
    OpenAiPython,
    /// A Python with `hermes-agent` installed (`HERMES_AGENT_PYTHON`).
    HermesAgentPython,
}

impl Component {
    /// The name `HERMES_TIER_HIDE` and the messages use.
    pub fn name(self) -> String {
        match self {
            Self::Postgres => "postgres".into(),
            Self::Synapse => "synapse".into(),
            Self::Dovecot => "dovecot".into(),
            Self::Aiosmtpd => "aiosmtpd".into(),
            Self::Npm(dir) => format!("npm:{dir}"),
            Self::OpenAiPython => "openai-python".into(),
            Self::HermesAgentPython => "hermes-agent-python".into(),
        }
    }

    /// How to get it (`.ci/run` does all of these).
    pub fn hint(self) -> String {
        match self {
            Self::Postgres => crate::postgres::install_hint().into(),
            Self::Synapse => "python3 -m venv /tmp/synapse-venv && /tmp/synapse-venv/bin/pip \
                install matrix-synapse, then set HERMES_SYNAPSE_PYTHON=/tmp/synapse-venv/bin/python"
                .into(),
            Self::Dovecot => "apt-get install dovecot-imapd dovecot-lmtpd".into(),
            Self::Aiosmtpd => "python3 -m venv /tmp/aiosmtpd-venv && /tmp/aiosmtpd-venv/bin/pip \
                install aiosmtpd, then set HERMES_AIOSMTPD_PYTHON=/tmp/aiosmtpd-venv/bin/python"
                .into(),
            Self::Npm(dir) => {
                format!("install node and npm, then npm ci --prefix tests/emulators/{dir}")
            }
            Self::OpenAiPython => {
                "a venv with `pip install openai`, then set HERMES_OPENAI_PYTHON \
                to its python"
                    .into()
            }
            Self::HermesAgentPython => "a venv with `pip install hermes-agent==0.19.0`, then set \
                HERMES_AGENT_PYTHON to its python"
                .into(),
        }
    }

    /// Whether this machine has it (and it is not hidden).
    pub fn found(self) -> bool {
        !hidden(self) && self.located()
    }

    fn located(self) -> bool {
        match self {
            Self::Postgres => crate::postgres::find_bin().is_some(),
            Self::Synapse => env_path("HERMES_SYNAPSE_PYTHON").is_some(),
            Self::Dovecot => crate::dovecot::dovecot_binary().is_some(),
            Self::Aiosmtpd => crate::dovecot::aiosmtpd_python().is_some(),
            Self::Npm(dir) => {
                emulators().join(dir).join("node_modules").is_dir() && on_path("node")
            }
            Self::OpenAiPython => env_path("HERMES_OPENAI_PYTHON").is_some(),
            Self::HermesAgentPython => env_path("HERMES_AGENT_PYTHON").is_some(),
        }
    }
}

/// `tests/emulators` of this repository.
pub fn emulators() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("emulators")
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Whether `HERMES_TIER_HIDE` hides `component`.
fn hidden(component: Component) -> bool {
    let Ok(list) = std::env::var("HERMES_TIER_HIDE") else {
        return false;
    };
    let name = component.name();
    list.split(',')
        .map(str::trim)
        .any(|h| h == "all" || h == name || (h == "npm" && matches!(component, Component::Npm(_))))
}

/// Whether this run is the full tier: under `CI` (set, and not `false` or
/// `0`) or with `HERMES_FULL_TIER=1`.
pub fn full_tier() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("HERMES_FULL_TIER")
}

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// The guard at the top of a test that needs `components`: `true` when
/// they are all here. When one is missing, the full tier fails the test
/// with how to get it; the fast tier prints a `SKIP` line and answers
/// `false`, and the test returns.
pub fn require(components: &[Component]) -> bool {
    let missing: Vec<Component> = components.iter().copied().filter(|c| !c.found()).collect();
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let what: Vec<String> = missing
        .iter()
        .map(|c| format!("{} not found ({})", c.name(), c.hint()))
        .collect();
    if full_tier() {
        panic!(
            "{test} needs {} — the full tier (CI) skips nothing; .ci/run installs it",
            what.join("; ")
        );
    }
    let n = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    // Straight to the process's stderr: libtest keeps what `eprintln!`
    // prints in a passing test to itself, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: {} — .ci/run installs it ({n} skipped so far in this process)",
        what.join("; ")
    );
    false
}

/// For a component's start-up function: refuses, with how to get it, when
/// the component is missing or hidden — so a test that reaches a component
/// without its [`require`] guard fails plainly in the fast tier.
pub fn expect(component: Component) {
    if !component.found() {
        panic!(
            "[tier:{}] this test needs {} and has no `hermes_tests::tier::require` guard: {} \
             (.ci/run installs it)",
            component.name(),
            component.name(),
            component.hint()
        );
    }
}

/// `hermes_tests::require!(Postgres)`, `require!(Dovecot, Aiosmtpd)`,
/// `require!(Npm("mcp"))`: the [`require`] guard as the first line of a
/// test, returning from it when the fast tier skips it.
#[macro_export]
macro_rules! require {
    ($($component:expr),+ $(,)?) => {
        if !{
            #[allow(unused_imports)]
            use $crate::tier::Component::*;
            $crate::tier::require(&[$($component),+])
        } {
            return;
        }
    };
}
