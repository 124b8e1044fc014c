//! The Landlock ruleset of one command (Linux), built in hermes before the
//! command's process exists, so the process only has to apply it.
//!
//! A command may read and execute the system (`/usr`, `/bin`, `/sbin`,
//! `/lib*`, `/etc`, `/opt`, `/nix`, `/proc`, `/sys`, the resolver's files
//! under `/run`) and the user's extra read paths, read and write the working
//! directory, its private temp dir and the user's extra write paths, and use
//! the harmless character devices (`/dev/null`, `/dev/zero`, `/dev/full`,
//! `/dev/random`, `/dev/urandom`, `/dev/tty`). Nothing else: not `$HOME`,
//! not `/tmp`, not `$HERMES_HOME`. The handled rights are those of ABI 7
//! (links and renames across hierarchies are refused from ABI 2 on,
//! truncation is controlled from ABI 3, device ioctls from ABI 5); on an
//! older kernel the newer rights are left out (Landlock's best effort) and
//! [`super::SandboxStatus`] says which protections are missing. Landlock
//! also scopes the command: it cannot ptrace (or read `/proc/<pid>/environ`
//! or `mem` of) any process outside its own sandbox, and from ABI 6 on it
//! cannot signal them or connect to their abstract unix sockets.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, Scope,
    path_beneath_rules,
};

/// The ABI whose rights the ruleset handles: the newest this code was
/// tested against.
const TARGET_ABI: ABI = ABI::V7;

/// What a command may read and execute, besides what the user adds.
pub const SYSTEM_READ_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
    "/run/resolvconf",
];

/// Character devices a command may read and write.
pub const DEVICE_PATHS: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The paths a command may reach, and how.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Read, write, create, remove, execute.
    pub write: Vec<PathBuf>,
}

impl Grants {
    /// The system paths plus `extra_read`, and `write` (the working
    /// directory, the temp dir, the user's extra write paths).
    pub fn new(extra_read: &[PathBuf], write: Vec<PathBuf>) -> Grants {
        let mut read: Vec<PathBuf> = SYSTEM_READ_PATHS.iter().map(PathBuf::from).collect();
        read.extend(extra_read.iter().cloned());
        Grants { read, write }
    }

    /// Whether `path` lies beneath something a command may read.
    pub fn covers(&self, path: &Path) -> bool {
        self.read
            .iter()
            .chain(&self.write)
            .any(|g| path.starts_with(g))
    }
}

/// Builds the ruleset; the returned descriptor is what
/// `landlock_restrict_self(2)` takes. `None` when the kernel has no
/// Landlock (the crate then creates no ruleset).
pub fn build(grants: &Grants) -> Result<Option<OwnedFd>, RulesetError> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    // Device nodes are not made in the sandbox.
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let device: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let ruleset = Ruleset::default()
        .handle_access(all)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?
        .add_rules(path_beneath_rules(&grants.read, read))?
        .add_rules(path_beneath_rules(DEVICE_PATHS, device))?
        .add_rules(path_beneath_rules(&grants.write, write))?;
    Ok(ruleset.into())
}

/// The Landlock ABI the kernel offers, or `None` without Landlock.
pub fn kernel_abi() -> Option<u32> {
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the call
    // only returns the ABI version (or fails); it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    u32::try_from(v).ok().filter(|v| *v >= 1)
}

/// What confines one child process — a terminal command or a scheduled
/// job's script — built in one place so the two cannot drift apart.
#[derive(Debug, Default)]
pub struct Confinement {
    /// The Landlock ruleset to apply (`None`: not confined, or no Landlock).
    pub ruleset: Option<OwnedFd>,
    /// The Hermes home, hidden behind an empty mount when a grant would
    /// otherwise cover it (its `.env` holds the credentials).
    pub hide: Option<std::ffi::CString>,
}

/// The confinement of a child working in `root` with the private temp dir
/// `tmp`: `root`, `tmp` and `extra_write` writable, the system and
/// `extra_read` readable; `home` hidden if a grant covers it. `confined`
/// false (the user opted out): nothing. An error names what could not be
/// done and why.
pub fn confinement(
    confined: bool,
    root: &Path,
    tmp: &Path,
    home: Option<&Path>,
    extra_read: &[PathBuf],
    extra_write: &[PathBuf],
) -> Result<Confinement, (&'static str, String)> {
    use std::os::unix::ffi::OsStrExt;

    if !confined {
        return Ok(Confinement::default());
    }
    let mut write = vec![root.to_path_buf(), tmp.to_path_buf()];
    write.extend(extra_write.iter().cloned());
    let grants = Grants::new(extra_read, write);
    let hide = match home {
        Some(home) if home.is_dir() && grants.covers(home) => Some(
            std::ffi::CString::new(home.as_os_str().as_bytes())
                .map_err(|e| ("hide the Hermes home", e.to_string()))?,
        ),
        _ => None,
    };
    let ruleset = build(&grants).map_err(|e| ("build the Landlock ruleset", e.to_string()))?;
    Ok(Confinement { ruleset, hide })
}
