//! The terminal's sandbox (SPEC E1, E2): what a command may touch, what it
//! inherits, and how long it may live.
//!
//! On Linux, with the sandbox on (the default):
//!
//! - **Files**: Landlock ([`rules`]): read and execute the system, read and
//!   write only the working directory and a private temp dir (plus what
//!   the user adds with `[agent] sandbox_read` / `sandbox_write`). When
//!   `$HERMES_HOME` lies beneath something a command may read (the working
//!   directory contains it), an empty tmpfs covers it in the command's
//!   mount namespace.
//! - **Other processes**: Landlock's scoping: a command cannot ptrace,
//!   read the `/proc/<pid>/environ` or `mem` of, signal, or reach the
//!   abstract sockets of anything outside its sandbox — hermes included.
//!   hermes also makes itself non-dumpable ([`forbid_inspection`]).
//! - **Environment**: an allow-list ([`env`]).
//! - **Lifetime**: a PID namespace whose init dies with hermes ([`spawn`]).
//!
//! Network access is not restricted.
//!
//! Where the kernel lacks Landlock (or the OS is not Linux) the terminal
//! refuses to run commands, saying why, unless the user opted out
//! (`[agent] sandbox = "off"`, `--no-sandbox`); the gateway refuses to
//! start in that case. Opted out, commands run unconfined but still with
//! the allow-listed environment and the same lifetime rules.

mod env;
#[cfg(target_os = "linux")]
pub(crate) mod rules;
#[cfg(target_os = "linux")]
pub(crate) mod spawn;

use std::fmt;

pub use env::{INHERITED_ENV, child_env};
#[cfg(target_os = "linux")]
pub use spawn::Containment;

/// Whether the terminal runs commands in the sandbox.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Confined; commands are refused where the sandbox is unavailable.
    #[default]
    On,
    /// The user opted out: commands run unconfined.
    Off,
}

impl SandboxMode {
    /// Parses a configuration value (`on` / `off`).
    pub fn parse(value: &str) -> Option<SandboxMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" => Some(SandboxMode::On),
            "off" | "false" | "no" => Some(SandboxMode::Off),
            _ => None,
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxMode::On => "on",
            SandboxMode::Off => "off",
        })
    }
}

/// The oldest Landlock ABI the sandbox accepts: from ABI 2 on, links and
/// renames across the sandbox's boundary can be refused.
pub const MIN_LANDLOCK_ABI: u32 = 2;

/// The Landlock ABI the kernel offers (`None` without Landlock or off
/// Linux).
pub fn landlock_abi() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        rules::kernel_abi()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Why the sandbox cannot run here, or `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("the sandbox needs Linux (Landlock); this system is not Linux".into());
    }
    match landlock_abi() {
        None => Some(
            "the kernel does not offer Landlock (it needs Linux 5.19 or newer with Landlock \
             enabled, e.g. lsm=landlock,… on the kernel command line)"
                .into(),
        ),
        Some(abi) if abi < MIN_LANDLOCK_ABI => Some(format!(
            "the kernel's Landlock is ABI {abi}; ABI {MIN_LANDLOCK_ABI} (Linux 5.19) or newer is needed"
        )),
        Some(_) => None,
    }
}

/// What the sandbox does on this system, for `hermes doctor`, the
/// gateway's start-up check and tool results.
#[derive(Clone, Debug)]
pub struct SandboxStatus {
    /// The configured mode.
    pub mode: SandboxMode,
    /// The kernel's Landlock ABI.
    pub landlock_abi: Option<u32>,
    /// Why the sandbox cannot run, when it cannot.
    pub unavailable: Option<String>,
    /// How commands' processes are contained (Linux).
    #[cfg(target_os = "linux")]
    pub containment: Containment,
}

impl SandboxStatus {
    /// Looks at the kernel, and starts one `true` to see which containment
    /// works.
    pub fn probe(mode: SandboxMode) -> SandboxStatus {
        SandboxStatus {
            mode,
            landlock_abi: landlock_abi(),
            unavailable: unavailable_reason(),
            #[cfg(target_os = "linux")]
            containment: spawn::probe(),
        }
    }

    /// Whether commands run confined.
    pub fn confined(&self) -> bool {
        self.mode == SandboxMode::On && self.unavailable.is_none()
    }

    /// Whether the terminal would refuse commands (sandbox on, unavailable).
    pub fn refuses_commands(&self) -> bool {
        self.mode == SandboxMode::On && self.unavailable.is_some()
    }

    /// Protections the kernel's Landlock ABI lacks (empty when complete).
    pub fn missing(&self) -> Vec<&'static str> {
        let Some(abi) = self.landlock_abi else {
            return Vec::new();
        };
        let mut missing = Vec::new();
        if abi < 3 {
            missing.push("truncating files outside the sandbox is not refused (ABI 3)");
        }
        if abi < 5 {
            missing.push("device ioctls are not controlled (ABI 5)");
        }
        if abi < 6 {
            missing.push(
                "commands can signal processes outside the sandbox and reach their abstract \
                 unix sockets (ABI 6)",
            );
        }
        missing
    }

    /// One line per fact, for `hermes doctor`.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let abi = self
            .landlock_abi
            .map_or_else(|| "no Landlock".to_owned(), |a| format!("Landlock ABI {a}"));
        lines.push(match (self.mode, &self.unavailable) {
            (SandboxMode::On, None) => format!(
                "terminal sandbox on ({abi}): commands read the system, write only the working \
                 directory and a private temp dir, cannot see $HERMES_HOME, $HOME or hermes's \
                 environment"
            ),
            (SandboxMode::On, Some(why)) => format!(
                "terminal sandbox unavailable: {why}; the terminal refuses commands (set [agent] \
                 sandbox = \"off\" or pass --no-sandbox to run them unconfined)"
            ),
            (SandboxMode::Off, _) => format!(
                "terminal sandbox off (opted out; {abi} available): commands run unconfined, \
                 with the allow-listed environment"
            ),
        });
        #[cfg(target_os = "linux")]
        lines.push(format!("command lifetime: {}", self.containment.describe()));
        if self.confined() {
            for m in self.missing() {
                lines.push(format!("kernel limitation: {m}"));
            }
        }
        lines
    }
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE = 0`): no process
/// without `CAP_SYS_PTRACE` can read its memory or `/proc/<pid>/environ`,
/// where the provider key and bot tokens are. A second layer under the
/// sandbox's own ptrace scoping; called first thing by the `hermes` binary
/// and the gateway, before any secret is loaded. No-op off Linux.
pub fn forbid_inspection() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integers only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_abi(abi: u32) -> SandboxStatus {
        SandboxStatus {
            mode: SandboxMode::On,
            landlock_abi: Some(abi),
            unavailable: None,
            #[cfg(target_os = "linux")]
            containment: Containment::ProcessGroup,
        }
    }

    fn limitations(abi: u32) -> Vec<String> {
        on_abi(abi)
            .describe()
            .into_iter()
            .filter(|l| l.starts_with("kernel limitation: "))
            .collect()
    }

    /// The README says what an ABI below 6 lacks and that `hermes doctor`
    /// lists it; Debian 12's stock kernel is ABI 2.
    #[test]
    fn doctor_lists_what_an_older_landlock_lacks() {
        let two = limitations(2);
        assert_eq!(two.len(), 3, "{two:?}");
        assert!(two[0].contains("truncating files outside the sandbox"));
        assert!(two[1].contains("device ioctls"));
        assert!(two[2].contains("signal processes outside the sandbox"));
        assert_eq!(limitations(5).len(), 1);
        assert!(limitations(6).is_empty());
        assert!(limitations(7).is_empty());
    }
}
