//! Skills (SPEC Y8): procedures the agent (or its user) saved as
//! `$HERMES_HOME/skills/NAME/SKILL.md` folders, in the agentskills.io
//! format other agents share — see [`format`].
//!
//! - **Progressive disclosure.** The system prompt lists only each skill's
//!   name and description ([`SkillsHome::list`]), assembled once per
//!   session and stored with it, so a skill written during a session
//!   changes nothing in that session's prompt (provider prompt caching
//!   stays intact); the full text is loaded on demand (`skill_view`).
//! - **The one write path into `$HERMES_HOME`.** The file tools refuse to
//!   write anywhere in the home. Skills are written only here, and only
//!   inside `skills/NAME/`: the name is validated (`a-z`, `0-9`, `-`), every
//!   directory is opened by the kernel *beneath* a handle to `skills/`
//!   (`openat2` with `RESOLVE_BENEATH` on Linux, through cap-std, as the
//!   file tools do) and without following symbolic links, paths inside a
//!   skill are relative with no `.`/`..`/hidden parts, sizes are capped, and
//!   files are replaced atomically (temp file + rename in the same
//!   directory handle). See [`write`].
//! - **Every change can be undone.** Before a change the skill folder as
//!   it was is kept in `skills/.history/NAME/` (the last
//!   [`HISTORY_KEPT`] versions); `hermes skills restore NAME` puts the newest
//!   back. See [`history`].
//! - **Scripts are never run from here.** A skill's `scripts/` are files;
//!   the agent runs them with the terminal tool, in its sandbox and under
//!   its approvals, like any other command.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

pub mod format;
mod history;
mod install;
mod write;

pub use format::{FrontMatter, parse_skill_md, validate_name};

/// The largest `SKILL.md`, in bytes.
pub const MAX_SKILL_MD_BYTES: usize = 100_000;
/// The largest supporting file (`references/…`, `scripts/…`), in bytes.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The most bytes all files of one skill may hold together.
pub const MAX_SKILL_BYTES: u64 = 8 * 1024 * 1024;
/// The most files one skill may hold.
pub const MAX_FILES: usize = 200;
/// How many earlier versions of a skill are kept.
pub const HISTORY_KEPT: usize = 10;
/// The folders of a skill `skill_manage write_file` writes into.
pub const SUPPORT_DIRS: &[&str] = &["references", "templates", "scripts", "assets"];
/// The deepest path inside a skill, in components.
const MAX_DEPTH: usize = 6;

/// Why a skill operation was refused or failed. Every message says what to
/// do instead; nothing was changed when one is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// A skill name that is not `a-z`, `0-9` and `-`.
    #[error("'{name}' is not a valid skill name: {why} (e.g. 'deploy-staging')")]
    BadName {
        /// The name given (cut).
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `SKILL.md` whose front matter or body is invalid.
    #[error("SKILL.md is not valid: {why}")]
    BadSkillMd {
        /// What is wrong and how to fix it.
        why: String,
    },
    /// A path inside a skill that is refused.
    #[error("'{path}' is refused: {why}")]
    BadPath {
        /// The path given (cut).
        path: String,
        /// Why.
        why: String,
    },
    /// Content over a size limit.
    #[error(
        "{what} is {size} bytes, over the limit of {limit} bytes; keep skills small (split long material into references/ files)"
    )]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// No such skill.
    #[error("there is no skill named '{0}' (skills_list shows the skills)")]
    NotFound(String),
    /// A skill of that name exists already.
    #[error(
        "a skill named '{0}' already exists; change it with action 'edit' or 'patch', or choose another name"
    )]
    Exists(String),
    /// A symbolic link where a real folder or file must be.
    #[error(
        "'skills/{0}' is a symbolic link; skills are read and written only inside real folders under $HERMES_HOME/skills, never through links"
    )]
    Symlink(String),
    /// A path that the kernel refused because it leads outside the skill.
    #[error("'{0}' leads outside the skill's folder; files of a skill stay inside it")]
    Escape(String),
    /// `patch` could not apply.
    #[error("patch did not apply: {0}")]
    Patch(String),
    /// `restore` with nothing to restore.
    #[error("there is no earlier version of the skill '{0}' to restore")]
    NoHistory(String),
    /// A filesystem error.
    #[error("cannot {action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The error.
        source: io::Error,
    },
}

pub(crate) fn io_err(action: impl Into<String>) -> impl FnOnce(io::Error) -> SkillError {
    let action = action.into();
    move |source| SkillError::Io { action, source }
}

/// Whether `e` is the kernel's (or cap-std's) refusal of a path that leads
/// outside the directory it is resolved beneath.
fn is_escape(e: &io::Error) -> bool {
    (e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none())
        || e.raw_os_error() == Some(libc::EXDEV)
}

/// Whether `e` is what opening a symbolic link without following it gives.
fn is_link_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

/// One skill as `skills_list` and the system prompt show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillSummary {
    /// The folder name, which `skill_view` takes.
    pub name: String,
    /// One line.
    pub description: String,
    /// `metadata.category`, if any.
    pub category: Option<String>,
    /// Why its `SKILL.md` is not valid, if it is not (it is still listed,
    /// with the best description that could be found).
    pub problem: Option<String>,
}

/// A skill's text and the names of its other files.
#[derive(Clone, Debug)]
pub struct SkillText {
    /// `SKILL.md`, whole.
    pub skill_md: String,
    /// The other files, relative to the skill's folder, sorted.
    pub files: Vec<String>,
}

/// The skills folder of one `$HERMES_HOME`.
#[derive(Clone, Debug)]
pub struct SkillsHome {
    dir: PathBuf,
}

impl SkillsHome {
    /// The skills of the home `hermes_home` (`hermes_home/skills`).
    pub fn new(hermes_home: impl AsRef<Path>) -> Self {
        SkillsHome {
            dir: hermes_home.as_ref().join("skills"),
        }
    }

    /// `$HERMES_HOME/skills`.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The handle everything is opened beneath; `None` when the folder does
    /// not exist and `create` is false.
    fn open_root(&self, create: bool) -> Result<Option<Dir>, SkillError> {
        if create {
            std::fs::create_dir_all(&self.dir)
                .map_err(io_err(format!("create {}", self.dir.display())))?;
        }
        match Dir::open_ambient_dir(&self.dir, ambient_authority()) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(io_err(format!("open {}", self.dir.display()))(e)),
        }
    }

    /// Every skill, sorted by name: folders with a valid name and a
    /// `SKILL.md`. Invalid `SKILL.md` files are listed with a problem note.
    pub fn list(&self) -> Vec<SkillSummary> {
        let Ok(Some(root)) = self.open_root(false) else {
            return Vec::new();
        };
        let Ok(entries) = root.entries() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if validate_name(&name).is_err() {
                continue;
            }
            let Ok(skill) = root.open_dir(&name) else {
                continue;
            };
            let Ok(text) = read_capped(&skill, "SKILL.md", MAX_SKILL_MD_BYTES) else {
                continue;
            };
            out.push(match parse_skill_md(&name, &text) {
                Ok((fm, _)) => SkillSummary {
                    name,
                    description: fm.description,
                    category: fm.category,
                    problem: None,
                },
                Err(e) => SkillSummary {
                    name,
                    description: format::lenient_description(&text),
                    category: None,
                    problem: Some(e.to_string()),
                },
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Opens the folder of skill `name` for reading (beneath `skills/`).
    fn open_skill(&self, name: &str) -> Result<Dir, SkillError> {
        validate_name(name)?;
        let root = self
            .open_root(false)?
            .ok_or_else(|| SkillError::NotFound(name.to_owned()))?;
        root.open_dir(name).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => SkillError::NotFound(name.to_owned()),
            _ if is_escape(&e) => SkillError::Escape(name.to_owned()),
            _ => io_err(format!("open skill '{name}'"))(e),
        })
    }

    /// The whole skill `name`: `SKILL.md` and the list of its other files.
    pub fn view(&self, name: &str) -> Result<SkillText, SkillError> {
        let skill = self.open_skill(name)?;
        let skill_md = read_capped(&skill, "SKILL.md", MAX_SKILL_MD_BYTES).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                SkillError::NotFound(name.to_owned())
            } else {
                io_err(format!("read skills/{name}/SKILL.md"))(e)
            }
        })?;
        let mut files = Vec::new();
        list_files(&skill, "", &mut files, 0);
        files.retain(|f| f != "SKILL.md");
        files.sort();
        Ok(SkillText { skill_md, files })
    }

    /// The file `file` of skill `name` (a relative path inside its folder).
    pub fn view_file(&self, name: &str, file: &str) -> Result<String, SkillError> {
        let parts = inner_path(file)?;
        let skill = self.open_skill(name)?;
        let rel = parts.join("/");
        read_capped(&skill, &rel, MAX_FILE_BYTES).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => SkillError::BadPath {
                path: file.to_owned(),
                why: format!(
                    "skill '{name}' has no such file (skill_view without 'file' lists them)"
                ),
            },
            io::ErrorKind::InvalidData => SkillError::BadPath {
                path: file.to_owned(),
                why: e.to_string(),
            },
            _ if is_escape(&e) => SkillError::Escape(file.to_owned()),
            _ => io_err(format!("read skills/{name}/{rel}"))(e),
        })
    }
}

/// Checks a path inside a skill and splits it: relative, `/`-separated,
/// no empty, `.`, `..` or hidden parts, at most [`MAX_DEPTH`] deep.
pub(crate) fn inner_path(path: &str) -> Result<Vec<&str>, SkillError> {
    let bad = |why: &str| SkillError::BadPath {
        path: path.chars().take(200).collect(),
        why: why.to_owned(),
    };
    if path.is_empty() {
        return Err(bad("the path is empty"));
    }
    if path.contains('\0') || path.contains('\\') {
        return Err(bad("NUL bytes and backslashes are not allowed in paths"));
    }
    if path.starts_with('/') || Path::new(path).is_absolute() {
        return Err(bad(
            "absolute paths are not allowed; give a path inside the skill's folder, such as references/notes.md",
        ));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts
        .iter()
        .any(|p| *p == ".." || *p == "." || p.is_empty())
    {
        return Err(bad(
            "'..', '.' and empty parts are not allowed; a skill's files stay inside its folder",
        ));
    }
    if parts.iter().any(|p| p.starts_with('.')) {
        return Err(bad("hidden names (starting with '.') are not allowed"));
    }
    if parts.len() > MAX_DEPTH || parts.iter().any(|p| p.len() > 128) {
        return Err(bad("the path is too deep or a name is too long"));
    }
    Ok(parts)
}

/// Reads `rel` beneath `dir` (symbolic links are followed only while they
/// stay beneath it), at most `cap` bytes, as UTF-8 (lossily). Refuses what
/// is not a regular file. Non-blocking, so a FIFO cannot hang the caller.
fn read_capped(dir: &Dir, rel: &str, cap: usize) -> io::Result<String> {
    let mut opts = OpenOptions::new();
    opts.read(true).custom_flags(libc::O_NONBLOCK);
    let file = dir.open_with(rel, &opts)?.into_std();
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "it is not a regular file",
        ));
    }
    if meta.len() > cap as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is {} bytes, over the limit of {cap}", meta.len()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).replace("\r\n", "\n"))
}

/// The regular files below `dir`, as `prefix/…` paths (no links followed,
/// hidden names skipped, at most [`MAX_FILES`]).
fn list_files(dir: &Dir, prefix: &str, out: &mut Vec<String>, depth: usize) {
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_FILES {
            return;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() && depth < MAX_DEPTH {
            if let Ok(sub) = cap_fs_ext::DirExt::open_dir_nofollow(dir, &name) {
                list_files(&sub, &path, out, depth + 1);
            }
        } else if ft.is_file() {
            out.push(path);
        }
    }
}
