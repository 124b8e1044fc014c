//! The working directory as a capability (SPEC E1, E2): how the file tools
//! reach files, and the rules for `$HERMES_HOME`.
//!
//! - **The kernel resolves every path.** The working directory is opened
//!   once as a directory handle ([`cap_std::fs::Dir`]); every path a model
//!   gives is opened *beneath* it. On Linux that is `openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, elsewhere cap-std's own
//!   component-by-component walk. A `..`, an absolute symlink, a relative
//!   one that climbs out, `/proc/self/root` — anything that would leave the
//!   directory fails inside the `open` call itself, so there is no window
//!   between a check and a use for a racing process to swap a directory
//!   for a symlink. Symlinks that stay inside keep working.
//! - **Writes happen through handles.** `write_file` and `patch` open the
//!   parent directory beneath the working directory, create what is
//!   missing below that handle, write a temp file there and rename it over
//!   the target: never a path walk that something can redirect.
//! - **Where a handle really is** comes from the kernel too
//!   (`/proc/self/fd/N` on Linux, `F_GETPATH` on macOS), and that real
//!   path is what the `$HERMES_HOME` rules and the displayed names use.
//! - **`$HERMES_HOME` is off limits** even when the working directory
//!   contains it (a CLI started from `~`) and even with
//!   `allow_outside_workdir`: it holds `.env`, `config.toml` and
//!   `state.db`, and whatever a tool reads goes to the provider and into the
//!   transcript. The file tools may read only `MEMORY.md`, `USER.md`,
//!   `SOUL.md` and `skills/**` there and write nothing (the `memory` tool
//!   edits `MEMORY.md` and `USER.md` itself). A file elsewhere that is a
//!   hard link to one of the home's other top-level files (or files one
//!   level below them) is refused as if it were there. The one exception is a
//!   working directory chosen strictly *inside* the home (e.g.
//!   `$HERMES_HOME/workspace`): its own files are ordinary files.
//! - **`allow_outside_workdir`** (`[agent] allow_outside_workdir`,
//!   `--allow-outside-workdir`) lets paths resolve anywhere the OS lets the
//!   user go; only the `$HERMES_HOME` rules remain.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use hermes_core::ToolError;

use super::{ToolEnv, ToolsError, failed};
use crate::fsutil::write_atomic_in;

/// What the file tools may read in `$HERMES_HOME` (never write): the prompt
/// sources and the skills the system prompt points the model to.
const READABLE_HOME_FILES: &[&str] = &["MEMORY.md", "USER.md", "SOUL.md"];
const READABLE_HOME_DIRS: &[&str] = &["skills"];
/// How many entries of the home the hard-link check looks at, at most.
const HOME_SCAN_LIMIT: usize = 4096;

/// What a file tool wants to do with a path; `$HERMES_HOME` allows reading
/// a few files and writing none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// Sent out of the process (`send_file`): nothing of the home at all.
    Send,
}

/// The working directory the file and shell tools are confined to.
#[derive(Clone, Debug)]
pub(crate) struct Workdir {
    /// The canonical working directory.
    root_path: PathBuf,
    /// The working directory as configured (made absolute), when it differs
    /// from the canonical one (given through a symlink): absolute paths
    /// spelled with it are inside too.
    given: Option<PathBuf>,
    /// The handle every confined path is opened beneath.
    root: Arc<Dir>,
    allow_outside: bool,
    /// The canonical `$HERMES_HOME` (a home that does not exist yet is
    /// still protected once it is created).
    home: Option<PathBuf>,
    /// This registry's kept tool outputs (`$HERMES_HOME/tool-output/<scope>`):
    /// the one directory of the home the file tools may read besides the
    /// prompt sources, by absolute path, even when confined (SPEC Y6).
    spill: Option<PathBuf>,
}

/// Where a model's path is resolved.
#[derive(Clone, Debug)]
enum Loc {
    /// Beneath the working directory, by the kernel: a relative path.
    Beneath(PathBuf),
    /// Anywhere (`allow_outside_workdir`): an absolute path.
    Ambient(PathBuf),
}

impl Loc {
    fn join(&self, part: impl AsRef<Path>) -> Loc {
        match self {
            Loc::Beneath(p) => Loc::Beneath(p.join(part)),
            Loc::Ambient(p) => Loc::Ambient(p.join(part)),
        }
    }
}

/// An `O_PATH` handle whose real path was checked, and the path that
/// reopens exactly that file (`/proc/self/fd/N`) while the handle lives.
#[derive(Debug)]
struct PinnedPath {
    _handle: std::fs::File,
    path: PathBuf,
}

impl AsRef<Path> for PinnedPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A file opened for reading, and where it really is.
#[derive(Debug)]
pub(crate) struct OpenedFile {
    pub(crate) file: std::fs::File,
    pub(crate) meta: std::fs::Metadata,
    pub(crate) real: PathBuf,
}

/// A directory opened beneath the working directory, and where it is.
#[derive(Debug)]
pub(crate) struct OpenedDir {
    pub(crate) dir: Dir,
    pub(crate) real: PathBuf,
}

/// What `write_file` did.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) real: PathBuf,
    pub(crate) existed: bool,
}

/// The real path of an open file or directory, from the kernel.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn fd_path(fd: std::os::fd::BorrowedFd<'_>) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    // Anything else ("pipe:[…]", "… (deleted)") is not a usable path.
    (link.is_absolute() && !link.to_string_lossy().ends_with(" (deleted)")).then_some(link)
}

/// The real path of an open file or directory, from the kernel.
#[cfg(target_os = "macos")]
pub(crate) fn fd_path(fd: std::os::fd::BorrowedFd<'_>) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: F_GETPATH writes at most PATH_MAX bytes (NUL included) into
    // `buf`, which is that long.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) };
    if rc == -1 {
        return None;
    }
    let len = buf.iter().position(|b| *b == 0)?;
    Some(PathBuf::from(OsStr::from_bytes(&buf[..len])))
}

/// The real path of an open file or directory: unknown on this system.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
pub(crate) fn fd_path(_fd: std::os::fd::BorrowedFd<'_>) -> Option<PathBuf> {
    None
}

/// Whether `e` is cap-std's (or the kernel's) refusal of a path that leads
/// outside the directory it is resolved beneath.
fn is_escape(e: &io::Error) -> bool {
    (e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none())
        || e.raw_os_error() == Some(libc::EXDEV)
}

/// A model-facing message for an IO failure on `shown`.
pub(crate) fn io_error(action: &str, shown: &str, e: &io::Error) -> ToolError {
    let hint = match e.kind() {
        io::ErrorKind::NotFound => " (no such file; check the path with search_files)",
        io::ErrorKind::PermissionDenied => " (permission denied)",
        io::ErrorKind::IsADirectory => " (it is a directory)",
        io::ErrorKind::NotADirectory => " (a part of the path is a file, not a directory)",
        _ => "",
    };
    failed(format!("Error: cannot {action} '{shown}': {e}{hint}"))
}

/// Canonicalizes a path that need not exist: the nearest existing ancestor
/// is canonicalized and the missing tail appended. Only for our own
/// configured paths (the home), never for a model's: a `..` in the tail is
/// applied as text.
fn canonicalize_lenient(joined: &Path) -> Option<PathBuf> {
    let mut existing = joined;
    let mut tail: Vec<Component<'_>> = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        tail.push(existing.components().next_back()?);
        existing = existing.parent()?;
    }
    tail.reverse();
    let mut resolved = crate::fsutil::canonicalize(existing).ok()?;
    for comp in tail {
        match comp {
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(c) => resolved.push(c),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(resolved)
}

impl Workdir {
    pub(crate) fn new(env: &ToolEnv) -> Result<Self, ToolsError> {
        let workdir = &env.workdir;
        let bad = |source| ToolsError::Workdir {
            path: workdir.clone(),
            source,
        };
        let root_path = crate::fsutil::canonicalize(workdir).map_err(bad)?;
        let root = Dir::open_ambient_dir(&root_path, ambient_authority()).map_err(bad)?;
        let given = std::path::absolute(workdir)
            .ok()
            .filter(|g| *g != root_path);
        let home = if env.hermes_home.as_os_str().is_empty() {
            None
        } else if env.hermes_home.is_absolute() {
            canonicalize_lenient(&env.hermes_home)
        } else {
            canonicalize_lenient(&root_path.join(&env.hermes_home))
        };
        let spill = env
            .tool_output_dir
            .as_deref()
            .filter(|d| d.is_absolute())
            .and_then(canonicalize_lenient);
        Ok(Workdir {
            root_path,
            given,
            root: Arc::new(root),
            allow_outside: env.allow_outside_workdir,
            home,
            spill,
        })
    }

    /// This working directory without `allow_outside_workdir`: what leaves
    /// the process (`send_file`) stays beneath it whatever the setting.
    pub(crate) fn confined(mut self) -> Self {
        self.allow_outside = false;
        self
    }

    /// Where long tool outputs of this registry are kept, if anywhere.
    pub(crate) fn spill_dir(&self) -> Option<&Path> {
        self.spill.as_deref()
    }

    /// The canonical working directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root_path
    }

    /// The canonical `$HERMES_HOME`, if one is configured.
    pub(crate) fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    fn outside_error(&self, path: &str) -> ToolError {
        failed(format!(
            "Error: path '{path}' is outside the working directory {}; use a path inside it. \
             To let the file tools reach other paths, the user can set [agent] \
             allow_outside_workdir = true in config.toml or pass --allow-outside-workdir.",
            self.root_path.display()
        ))
    }

    fn refused_in_home(&self, path: &str, access: Access) -> ToolError {
        let home = self.home.as_deref().unwrap_or(Path::new(""));
        let what = match access {
            Access::Read => {
                "the file tools may only read MEMORY.md, USER.md, SOUL.md and skills/ there"
            }
            Access::Write => {
                "the file tools cannot write there (use the memory tool to change MEMORY.md or USER.md)"
            }
            Access::Send => "nothing in it is ever sent",
        };
        failed(format!(
            "Error: '{path}' is refused: it is inside the Hermes home directory {}, which holds \
             the configuration and secrets (.env, config.toml, state.db); {what}.",
            home.display()
        ))
    }

    /// Maps an IO error from opening `path` to the model-facing one.
    fn open_error(&self, action: &str, path: &str, e: &io::Error) -> ToolError {
        if is_escape(e) {
            self.outside_error(path)
        } else {
            io_error(action, path, e)
        }
    }

    /// Where `path` is resolved. Absolute paths inside the working directory
    /// (spelled with its canonical or its configured name) become relative.
    fn locate(&self, path: &str) -> Result<Loc, ToolError> {
        if path.is_empty() {
            return Err(failed("Error: 'path' is empty."));
        }
        if path.contains('\0') {
            return Err(failed("Error: 'path' contains a NUL byte."));
        }
        let given = Path::new(path);
        if !given.is_absolute() {
            return Ok(if self.allow_outside {
                Loc::Ambient(self.root_path.join(given))
            } else {
                Loc::Beneath(given.to_path_buf())
            });
        }
        if self.allow_outside {
            return Ok(Loc::Ambient(given.to_path_buf()));
        }
        // A kept output, named by the path the tool result gave. Where it
        // really is gets checked after the open ([`Workdir::allows`]).
        if self.spill.as_ref().is_some_and(|d| given.starts_with(d)) {
            return Ok(Loc::Ambient(given.to_path_buf()));
        }
        let inside = std::iter::once(&self.root_path)
            .chain(self.given.as_ref())
            .find_map(|root| given.strip_prefix(root).ok());
        match inside {
            Some(rel) => Ok(Loc::Beneath(rel.to_path_buf())),
            None => Err(self.outside_error(path)),
        }
    }

    /// The real path of `fd`, or `fallback`'s lexical form when the kernel
    /// cannot say.
    fn real_of(&self, fd: std::os::fd::BorrowedFd<'_>, fallback: &Loc) -> PathBuf {
        fd_path(fd).unwrap_or_else(|| match fallback {
            Loc::Beneath(rel) => self.root_path.join(rel),
            Loc::Ambient(abs) => abs.clone(),
        })
    }

    /// The location of a real path found by the kernel.
    fn loc_of_real(&self, real: &Path, fallback: &Loc) -> Loc {
        match fallback {
            Loc::Beneath(rel) => match real.strip_prefix(&self.root_path) {
                Ok(inside) => Loc::Beneath(inside.to_path_buf()),
                Err(_) => Loc::Beneath(rel.clone()),
            },
            Loc::Ambient(_) => Loc::Ambient(real.to_path_buf()),
        }
    }

    fn open_dir_at(&self, loc: &Loc) -> io::Result<Dir> {
        match loc {
            Loc::Beneath(rel) if rel.as_os_str().is_empty() => self.root.open_dir("."),
            Loc::Beneath(rel) => match self.root.open_dir(rel) {
                Err(e) if is_escape(&e) => match self.pin_if_inside(rel) {
                    Some(pinned) => Dir::open_ambient_dir(pinned, ambient_authority()),
                    None => Err(e),
                },
                other => other,
            },
            Loc::Ambient(abs) => Dir::open_ambient_dir(abs, ambient_authority()),
        }
    }

    /// The second chance of a path the beneath-resolution refused: an
    /// *absolute* symlink that leads back inside (`ln -s $PWD/src s`) is
    /// refused by `RESOLVE_BENEATH` although it stays inside. The path is
    /// opened with `O_PATH` (which touches nothing: no device is opened, no
    /// FIFO blocks), the kernel says where that handle really is, and only
    /// if that is inside the working directory is the handle reopened —
    /// through `/proc/self/fd/N`, which reopens the very same file, so no
    /// rename in between can change what is opened. Linux only; elsewhere an
    /// absolute symlink is refused.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn pin_if_inside(&self, rel: &Path) -> Option<PinnedPath> {
        use std::os::fd::AsFd;
        use std::os::unix::fs::OpenOptionsExt as _;
        let probe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(self.root_path.join(rel))
            .ok()?;
        use std::os::fd::AsRawFd;
        let real = fd_path(probe.as_fd())?;
        if !real.starts_with(&self.root_path) {
            return None;
        }
        let path = PathBuf::from(format!("/proc/self/fd/{}", probe.as_raw_fd()));
        Some(PinnedPath {
            _handle: probe,
            path,
        })
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn pin_if_inside(&self, _rel: &Path) -> Option<PinnedPath> {
        None
    }

    /// Opens `loc` read-only, following symlinks (beneath, when confined).
    /// Non-blocking, so a FIFO cannot hang the tool; callers refuse what is
    /// not a regular file.
    fn open_read_at(&self, loc: &Loc) -> io::Result<std::fs::File> {
        match loc {
            Loc::Beneath(rel) => {
                let mut opts = OpenOptions::new();
                opts.read(true).custom_flags(libc::O_NONBLOCK);
                match self.root.open_with(rel, &opts) {
                    Ok(f) => Ok(f.into_std()),
                    Err(e) if is_escape(&e) => match self.pin_if_inside(rel) {
                        Some(pinned) => {
                            use std::os::unix::fs::OpenOptionsExt as _;
                            std::fs::OpenOptions::new()
                                .read(true)
                                .custom_flags(libc::O_NONBLOCK)
                                .open(pinned)
                        }
                        None => Err(e),
                    },
                    Err(e) => Err(e),
                }
            }
            Loc::Ambient(abs) => {
                use std::os::unix::fs::OpenOptionsExt as _;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(abs)
            }
        }
    }

    /// Opens `rel`, a path relative to the working directory that an earlier
    /// open found, beneath it (the `search_files` walk's ignore files).
    pub(crate) fn open_dir_beneath(&self, rel: &Path) -> io::Result<Dir> {
        self.open_dir_at(&Loc::Beneath(rel.to_path_buf()))
    }

    /// Opens the directory `path` (for `search_files` and the terminal's
    /// `workdir`). The home rules are the caller's: a directory may hold
    /// both refused and allowed files.
    pub(crate) fn open_dir(&self, path: &str) -> Result<OpenedDir, ToolError> {
        let loc = self.locate(path)?;
        let dir = self
            .open_dir_at(&loc)
            .map_err(|e| self.open_error("open the directory", path, &e))?;
        let real = self.real_of(std::os::fd::AsFd::as_fd(&dir), &loc);
        Ok(OpenedDir { dir, real })
    }

    /// Opens the file `path` for a tool that will `access` it: kernel
    /// resolution, then the home rules on where it really is.
    pub(crate) fn open_file(&self, path: &str, access: Access) -> Result<OpenedFile, ToolError> {
        let loc = self.locate(path)?;
        let file = self
            .open_read_at(&loc)
            .map_err(|e| self.open_error("read", path, &e))?;
        let meta = file.metadata().map_err(|e| io_error("read", path, &e))?;
        let real = self.real_of(std::os::fd::AsFd::as_fd(&file), &loc);
        if !self.allows(&real, access) || self.is_home_secret(&meta) {
            return Err(self.refused_in_home(path, access));
        }
        Ok(OpenedFile { file, meta, real })
    }

    /// Replaces (or creates) the file `path` with `bytes`, creating missing
    /// parent directories: see the module docs.
    pub(crate) fn write_file(&self, path: &str, bytes: &[u8]) -> Result<Written, ToolError> {
        let loc = self.locate(path)?;
        self.write_loc(path, &loc, bytes)
    }

    /// [`Workdir::write_file`] for a real path an earlier open returned
    /// (`patch` writing back what it read); `shown` names it in errors.
    pub(crate) fn write_real(
        &self,
        real: &Path,
        shown: &str,
        bytes: &[u8],
    ) -> Result<Written, ToolError> {
        let loc = match real.strip_prefix(&self.root_path) {
            Ok(rel) if !self.allow_outside => Loc::Beneath(rel.to_path_buf()),
            _ if self.allow_outside => Loc::Ambient(real.to_path_buf()),
            _ => return Err(self.outside_error(shown)),
        };
        self.write_loc(shown, &loc, bytes)
    }

    fn write_loc(&self, path: &str, loc: &Loc, bytes: &[u8]) -> Result<Written, ToolError> {
        let (parent_loc, name) = split_file_name(loc).ok_or_else(|| {
            failed(format!(
                "Error: '{path}' is not a file path; give a file name."
            ))
        })?;
        let (mut parent_loc, to_create) = self.resolve_parent(path, &parent_loc)?;
        let mut parent = self
            .open_dir_at(&parent_loc)
            .map_err(|e| self.open_error("open the directory of", path, &e))?;
        let mut parent_real = self.real_of(std::os::fd::AsFd::as_fd(&parent), &parent_loc);
        let mut name = name;
        let mut existed = false;
        if to_create.is_empty() {
            match parent.symlink_metadata(&name) {
                Ok(m) if m.is_symlink() => {
                    // Write through a symlink to where it leads (beneath).
                    let target = self
                        .open_read_at(&parent_loc.join(&name))
                        .map_err(|e| match e.kind() {
                            io::ErrorKind::NotFound => failed(format!(
                                "Error: '{path}' is a symbolic link to a file that does not \
                                 exist; where it points cannot be checked, so it is not followed."
                            )),
                            _ => self.open_error("write", path, &e),
                        })?;
                    let real =
                        self.real_of(std::os::fd::AsFd::as_fd(&target), &parent_loc.join(&name));
                    if target.metadata().is_ok_and(|m| m.is_dir()) {
                        return Err(failed(format!(
                            "Error: '{path}' is a directory; give a file path."
                        )));
                    }
                    let (Some(real_parent), Some(real_name)) = (real.parent(), real.file_name())
                    else {
                        return Err(io_error("write", path, &io::Error::other("no file name")));
                    };
                    parent_loc = self.loc_of_real(real_parent, &parent_loc);
                    parent = self
                        .open_dir_at(&parent_loc)
                        .map_err(|e| self.open_error("open the directory of", path, &e))?;
                    parent_real = self.real_of(std::os::fd::AsFd::as_fd(&parent), &parent_loc);
                    name = real_name.to_os_string();
                    existed = true;
                }
                Ok(m) if m.is_dir() => {
                    return Err(failed(format!(
                        "Error: '{path}' is a directory; give a file path."
                    )));
                }
                Ok(_) => existed = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("write", path, &e)),
            }
        }
        let mut real = parent_real;
        for part in &to_create {
            real.push(part);
        }
        real.push(&name);
        if !self.allows(&real, Access::Write) {
            return Err(self.refused_in_home(path, Access::Write));
        }
        for part in &to_create {
            match parent.create_dir(part) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("create the directory for", path, &e)),
            }
            parent = parent
                .open_dir_nofollow(part)
                .map_err(|e| io_error("create the directory for", path, &e))?;
        }
        write_atomic_in(&parent, &name, bytes).map_err(|e| io_error("write", path, &e))?;
        Ok(Written { real, existed })
    }

    /// Resolves the directories of a path to be written: the longest prefix
    /// that exists is opened by the kernel one directory at a time (a `..`
    /// there is resolved by the kernel too); what is missing after it is
    /// returned as names to create, where a `..` only cancels a name that
    /// is to be created (it will be a real directory, never a symlink).
    fn resolve_parent(&self, path: &str, parent: &Loc) -> Result<(Loc, Vec<OsString>), ToolError> {
        let (mut cur, comps): (Loc, &Path) = match parent {
            Loc::Beneath(rel) => (Loc::Beneath(PathBuf::new()), rel.as_path()),
            Loc::Ambient(abs) => (Loc::Ambient(PathBuf::from("/")), abs.as_path()),
        };
        let mut to_create: Vec<OsString> = Vec::new();
        for comp in comps.components() {
            let step = match comp {
                Component::CurDir | Component::RootDir | Component::Prefix(_) => continue,
                Component::ParentDir if to_create.pop().is_some() => continue,
                Component::ParentDir => OsStr::new(".."),
                Component::Normal(n) if !to_create.is_empty() => {
                    to_create.push(n.to_os_string());
                    continue;
                }
                Component::Normal(n) => n,
            };
            let next = cur.join(step);
            match self.open_dir_at(&next) {
                Ok(dir) => {
                    let real = self.real_of(std::os::fd::AsFd::as_fd(&dir), &next);
                    cur = self.loc_of_real(&real, &next);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && step != ".." => {
                    to_create.push(step.to_os_string());
                }
                Err(e) => return Err(self.open_error("create the directory for", path, &e)),
            }
        }
        Ok((cur, to_create))
    }

    /// Whether a file tool may `access` the real path `real` as far as
    /// `$HERMES_HOME` is concerned (see the module docs). Also used by
    /// `search_files` to skip what it walks past.
    pub(crate) fn allows(&self, real: &Path, access: Access) -> bool {
        let Some(home) = &self.home else {
            return true;
        };
        let Ok(rel) = real.strip_prefix(home) else {
            return true;
        };
        // A working directory chosen inside the home (not the home itself)
        // owns its files.
        if self.root_path != *home
            && self.root_path.starts_with(home)
            && real.starts_with(&self.root_path)
        {
            return true;
        }
        if access != Access::Read {
            return false;
        }
        if self.spill.as_ref().is_some_and(|d| real.starts_with(d)) {
            return true;
        }
        let mut parts = rel.components();
        match parts.next() {
            Some(Component::Normal(first)) => {
                let first = first.to_string_lossy();
                let top_level = parts.next().is_none();
                (top_level && READABLE_HOME_FILES.contains(&first.as_ref()))
                    || READABLE_HOME_DIRS.contains(&first.as_ref())
            }
            // The home directory itself: listing it would show what is there.
            _ => false,
        }
    }

    /// Whether the file described by `meta` is one of the home's refused
    /// files reached through a hard link elsewhere. Only files with more
    /// than one link are looked up.
    pub(crate) fn is_home_secret(&self, meta: &std::fs::Metadata) -> bool {
        if meta.nlink() <= 1 || !meta.is_file() {
            return false;
        }
        let Some(home) = &self.home else {
            return false;
        };
        let same = |m: &std::fs::Metadata| m.dev() == meta.dev() && m.ino() == meta.ino();
        let Ok(top) = std::fs::read_dir(home) else {
            return false;
        };
        let mut seen = 0usize;
        for entry in top.flatten() {
            let name = entry.file_name();
            let name_str = name.to_string_lossy();
            let path = entry.path();
            if READABLE_HOME_FILES.contains(&name_str.as_ref())
                || READABLE_HOME_DIRS.contains(&name_str.as_ref())
                || self.root_path.starts_with(&path)
            {
                continue;
            }
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if same(&m) {
                return true;
            }
            if m.is_dir()
                && let Ok(inner) = std::fs::read_dir(&path)
            {
                for e in inner.flatten() {
                    seen += 1;
                    if seen > HOME_SCAN_LIMIT {
                        return false;
                    }
                    if e.path().symlink_metadata().is_ok_and(|m| same(&m)) {
                        return true;
                    }
                }
            }
            seen += 1;
            if seen > HOME_SCAN_LIMIT {
                return false;
            }
        }
        false
    }

    /// `path` as the model should see it: relative to the working directory
    /// when inside it.
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root_path) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

/// Splits a location into its directory and its last name; `None` when the
/// path does not end in a name (`.`, `..`, `/`).
fn split_file_name(loc: &Loc) -> Option<(Loc, OsString)> {
    let (path, rebuild): (&Path, fn(PathBuf) -> Loc) = match loc {
        Loc::Beneath(p) => (p, Loc::Beneath),
        Loc::Ambient(p) => (p, Loc::Ambient),
    };
    match path.components().next_back()? {
        Component::Normal(name) => {
            let parent = path.parent().unwrap_or(Path::new("")).to_path_buf();
            Some((rebuild(parent), name.to_os_string()))
        }
        _ => None,
    }
}
