//! The changes `skill_manage` (and `hermes skills`) make: the one way
//! anything writes under `$HERMES_HOME` on the agent's behalf.
//!
//! Each change is checked completely first (name, path, size, front
//! matter, that a patch applies); only then is the skill's previous
//! version kept ([`history`](super::history)) and the change made. Every
//! directory is opened beneath the `skills/` handle without following
//! symbolic links, and files are replaced atomically within their
//! directory's handle ([`write_atomic_in`], shared with the file tools).

use std::ffi::OsStr;
use std::io;
use std::sync::{Mutex, MutexGuard};

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

use super::history::{keep_version, open_or_create};
use super::{
    MAX_FILE_BYTES, MAX_FILES, MAX_SKILL_BYTES, MAX_SKILL_MD_BYTES, SUPPORT_DIRS, SkillError,
    SkillsHome, inner_path, io_err, is_link_refusal, parse_skill_md, read_capped, validate_name,
};
use crate::fsutil::write_atomic_in;

/// Serializes the changes of every skill writer in the process, so two
/// sessions of one gateway cannot interleave a read-modify-write.
static WRITE_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn lock() -> MutexGuard<'static, ()> {
    crate::sync::lock(&WRITE_LOCK)
}

/// Checks the text of a new `SKILL.md` for skill `name`.
fn check_skill_md(name: &str, content: &str) -> Result<(), SkillError> {
    if content.len() > MAX_SKILL_MD_BYTES {
        return Err(SkillError::TooLarge {
            what: "SKILL.md".into(),
            size: content.len() as u64,
            limit: MAX_SKILL_MD_BYTES as u64,
        });
    }
    parse_skill_md(name, content).map(|_| ())
}

/// Checks a supporting file's path: inside one of [`SUPPORT_DIRS`].
fn support_path(file_path: &str) -> Result<Vec<&str>, SkillError> {
    let parts = inner_path(file_path)?;
    if parts.len() < 2 || !SUPPORT_DIRS.contains(&parts[0]) {
        return Err(SkillError::BadPath {
            path: file_path.chars().take(200).collect(),
            why: format!(
                "a skill's files go in {}, e.g. references/api.md (SKILL.md itself is changed \
                 with action 'edit' or 'patch')",
                SUPPORT_DIRS
                    .iter()
                    .map(|d| format!("{d}/"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(parts)
}

/// Opens the folder of existing skill `name` for writing: a real folder
/// directly in `skills/`, never a symbolic link.
fn open_skill_for_write(root: &Dir, name: &str) -> Result<Dir, SkillError> {
    match root.symlink_metadata(name) {
        Ok(m) if m.is_symlink() => return Err(SkillError::Symlink(name.to_owned())),
        Ok(m) if !m.is_dir() => {
            return Err(SkillError::BadPath {
                path: format!("skills/{name}"),
                why: "it is not a folder".into(),
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SkillError::NotFound(name.to_owned()));
        }
        Err(e) => return Err(io_err(format!("open skill '{name}'"))(e)),
    }
    root.open_dir_nofollow(name).map_err(|e| {
        if is_link_refusal(&e) {
            SkillError::Symlink(name.to_owned())
        } else {
            io_err(format!("open skill '{name}'"))(e)
        }
    })
}

/// Opens the directories `dirs` below `skill`, one at a time and never
/// through a link; missing ones are created when `create` is set.
fn open_dirs(skill: &Dir, name: &str, dirs: &[&str], create: bool) -> Result<Dir, SkillError> {
    let mut cur = skill
        .try_clone()
        .map_err(io_err("open the skill's folder"))?;
    let mut shown = name.to_owned();
    for part in dirs {
        shown = format!("{shown}/{part}");
        match cur.symlink_metadata(part) {
            Ok(m) if m.is_symlink() => return Err(SkillError::Symlink(shown)),
            Ok(m) if !m.is_dir() => {
                return Err(SkillError::BadPath {
                    path: shown,
                    why: "it is a file, not a folder".into(),
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SkillError::BadPath {
                    path: shown,
                    why: "no such folder in the skill".into(),
                });
            }
            Err(e) => return Err(io_err(format!("open skills/{shown}"))(e)),
        }
        let next = if create {
            open_or_create(&cur, part)
        } else {
            cur.open_dir_nofollow(part)
        };
        cur = next.map_err(|e| {
            if is_link_refusal(&e) {
                SkillError::Symlink(shown.clone())
            } else {
                io_err(format!("open skills/{shown}"))(e)
            }
        })?;
    }
    Ok(cur)
}

/// Refuses a file name in `dir` that is a link or a folder.
fn check_target(dir: &Dir, leaf: &str, shown: &str) -> Result<bool, SkillError> {
    match dir.symlink_metadata(leaf) {
        Ok(m) if m.is_symlink() => Err(SkillError::Symlink(shown.to_owned())),
        Ok(m) if m.is_dir() => Err(SkillError::BadPath {
            path: shown.to_owned(),
            why: "it is a folder; give a file path".into(),
        }),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(format!("open skills/{shown}"))(e)),
    }
}

/// Bytes and files below `dir` (links not followed).
fn usage(dir: &Dir) -> (u64, usize) {
    let mut total = (0u64, 0usize);
    let Ok(entries) = dir.entries() else {
        return total;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            if let Ok(sub) = dir.open_dir_nofollow(entry.file_name()) {
                let (b, n) = usage(&sub);
                total = (total.0 + b, total.1 + n);
            }
        } else if let Ok(m) = entry.metadata() {
            total = (total.0 + m.len(), total.1 + 1);
        }
    }
    total
}

/// Refuses a change that would make the skill hold more than the limits.
fn check_skill_total(skill: &Dir, name: &str, added: u64, replaced: u64) -> Result<(), SkillError> {
    let (bytes, files) = usage(skill);
    let after = (bytes + added).saturating_sub(replaced);
    if after > MAX_SKILL_BYTES {
        return Err(SkillError::TooLarge {
            what: format!("skill '{name}' with this change"),
            size: after,
            limit: MAX_SKILL_BYTES,
        });
    }
    if replaced == 0 && files >= MAX_FILES {
        return Err(SkillError::BadPath {
            path: name.to_owned(),
            why: format!("the skill already holds {MAX_FILES} files, the most allowed"),
        });
    }
    Ok(())
}

fn write_in(dir: &Dir, leaf: &str, bytes: &[u8], shown: &str) -> Result<(), SkillError> {
    write_atomic_in(dir, OsStr::new(leaf), bytes).map_err(io_err(format!("write skills/{shown}")))
}

impl SkillsHome {
    /// Creates skill `name` with `content` as its `SKILL.md`.
    pub fn create(&self, name: &str, content: &str) -> Result<String, SkillError> {
        validate_name(name)?;
        check_skill_md(name, content)?;
        let _guard = lock();
        let root = self.root_for_write()?;
        match root.symlink_metadata(name) {
            Ok(m) if m.is_symlink() => return Err(SkillError::Symlink(name.to_owned())),
            Ok(_) => return Err(SkillError::Exists(name.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(format!("create skill '{name}'"))(e)),
        }
        keep_version(&root, name, "create", false)?;
        root.create_dir(name)
            .map_err(io_err(format!("create skill '{name}'")))?;
        let skill = open_skill_for_write(&root, name)?;
        if let Err(e) = write_in(&skill, "SKILL.md", content.as_bytes(), name) {
            let _ = root.remove_dir_all(name);
            return Err(e);
        }
        Ok(format!("Created skill '{name}' (skills/{name}/SKILL.md)."))
    }

    /// Replaces the `SKILL.md` of skill `name` with `content`.
    pub fn edit(&self, name: &str, content: &str) -> Result<String, SkillError> {
        validate_name(name)?;
        check_skill_md(name, content)?;
        let _guard = lock();
        let root = self.root_for_write()?;
        let skill = open_skill_for_write(&root, name)?;
        let old = check_target(&skill, "SKILL.md", &format!("{name}/SKILL.md"))?;
        let replaced = if old {
            skill.metadata("SKILL.md").map_or(0, |m| m.len())
        } else {
            0
        };
        check_skill_total(&skill, name, content.len() as u64, replaced)?;
        keep_version(&root, name, "edit SKILL.md", false)?;
        write_in(&skill, "SKILL.md", content.as_bytes(), name)?;
        Ok(format!("Replaced skills/{name}/SKILL.md."))
    }

    /// Replaces the one occurrence of `old` with `new` in `SKILL.md` (or in
    /// `file_path` when given).
    pub fn patch(
        &self,
        name: &str,
        file_path: Option<&str>,
        old: &str,
        new: &str,
    ) -> Result<String, SkillError> {
        validate_name(name)?;
        let parts = match file_path {
            None | Some("SKILL.md") => vec!["SKILL.md"],
            Some(p) => support_path(p)?,
        };
        if old.is_empty() {
            return Err(SkillError::Patch(
                "'old_string' is empty; give the exact text to replace".into(),
            ));
        }
        let _guard = lock();
        let root = self.root_for_write()?;
        let skill = open_skill_for_write(&root, name)?;
        let (leaf, dirs) = parts.split_last().unwrap_or((&"SKILL.md", &[]));
        let rel = parts.join("/");
        let shown = format!("{name}/{rel}");
        let dir = open_dirs(&skill, name, dirs, false)?;
        if !check_target(&dir, leaf, &shown)? {
            return Err(SkillError::BadPath {
                path: rel,
                why: format!("skill '{name}' has no such file"),
            });
        }
        let cap = if rel == "SKILL.md" {
            MAX_SKILL_MD_BYTES
        } else {
            MAX_FILE_BYTES
        };
        let current =
            read_capped(&dir, leaf, cap).map_err(io_err(format!("read skills/{shown}")))?;
        let hits = current.matches(old).count();
        if hits != 1 {
            return Err(SkillError::Patch(if hits == 0 {
                format!(
                    "'old_string' does not occur in {rel}; skill_view shows the current text \
                     (copy it exactly, whitespace included)"
                )
            } else {
                format!(
                    "'old_string' occurs {hits} times in {rel}; include more of the surrounding \
                     text so it occurs once"
                )
            }));
        }
        let updated = current.replacen(old, new, 1);
        if rel == "SKILL.md" {
            check_skill_md(name, &updated)?;
        } else if updated.len() > MAX_FILE_BYTES {
            return Err(SkillError::TooLarge {
                what: rel,
                size: updated.len() as u64,
                limit: MAX_FILE_BYTES as u64,
            });
        }
        check_skill_total(&skill, name, updated.len() as u64, current.len() as u64)?;
        keep_version(&root, name, &format!("patch {rel}"), false)?;
        write_in(&dir, leaf, updated.as_bytes(), &shown)?;
        Ok(format!("Patched skills/{shown}."))
    }

    /// Deletes skill `name` (kept in the history: `restore` brings it back).
    pub fn delete(&self, name: &str) -> Result<String, SkillError> {
        validate_name(name)?;
        let _guard = lock();
        let root = self.root_for_write()?;
        drop(open_skill_for_write(&root, name)?);
        keep_version(&root, name, "delete", true)?;
        Ok(format!(
            "Deleted skill '{name}' (`hermes skills restore {name}` brings it back)."
        ))
    }

    /// Writes `content` to `file_path` (under references/, templates/,
    /// scripts/ or assets/) in skill `name`.
    pub fn write_file(
        &self,
        name: &str,
        file_path: &str,
        content: &str,
    ) -> Result<String, SkillError> {
        validate_name(name)?;
        let parts = support_path(file_path)?;
        if content.len() > MAX_FILE_BYTES {
            return Err(SkillError::TooLarge {
                what: format!("'{}'", file_path.chars().take(200).collect::<String>()),
                size: content.len() as u64,
                limit: MAX_FILE_BYTES as u64,
            });
        }
        let _guard = lock();
        let root = self.root_for_write()?;
        let skill = open_skill_for_write(&root, name)?;
        let (leaf, dirs) = parts.split_last().unwrap_or((&"", &[]));
        let rel = parts.join("/");
        let shown = format!("{name}/{rel}");
        // Links and files in the way are refused before anything is made.
        let mut probe = skill
            .try_clone()
            .map_err(io_err("open the skill's folder"))?;
        let mut missing = false;
        for (i, part) in dirs.iter().enumerate() {
            match probe.symlink_metadata(part) {
                Ok(_) => probe = open_dirs(&probe, name, &dirs[i..=i], false)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing = true;
                    break;
                }
                Err(e) => return Err(io_err(format!("open skills/{shown}"))(e)),
            }
        }
        let replaced = if missing {
            0
        } else if check_target(&probe, leaf, &shown)? {
            probe.metadata(leaf).map_or(0, |m| m.len())
        } else {
            0
        };
        check_skill_total(&skill, name, content.len() as u64, replaced)?;
        keep_version(&root, name, &format!("write {rel}"), false)?;
        let dir = open_dirs(&skill, name, dirs, true)?;
        check_target(&dir, leaf, &shown)?;
        write_in(&dir, leaf, content.as_bytes(), &shown)?;
        Ok(format!("Wrote skills/{shown} ({} bytes).", content.len()))
    }

    /// Removes the file `file_path` of skill `name`.
    pub fn remove_file(&self, name: &str, file_path: &str) -> Result<String, SkillError> {
        validate_name(name)?;
        let parts = support_path(file_path)?;
        let _guard = lock();
        let root = self.root_for_write()?;
        let skill = open_skill_for_write(&root, name)?;
        let (leaf, dirs) = parts.split_last().unwrap_or((&"", &[]));
        let rel = parts.join("/");
        let shown = format!("{name}/{rel}");
        let dir = open_dirs(&skill, name, dirs, false)?;
        if !check_target(&dir, leaf, &shown)? {
            return Err(SkillError::BadPath {
                path: rel,
                why: format!("skill '{name}' has no such file"),
            });
        }
        keep_version(&root, name, &format!("remove {rel}"), false)?;
        dir.remove_file(leaf)
            .map_err(io_err(format!("remove skills/{shown}")))?;
        Ok(format!("Removed skills/{shown}."))
    }

    /// The `skills/` handle, created when missing.
    pub(crate) fn root_for_write(&self) -> Result<Dir, SkillError> {
        self.open_root(true)?
            .ok_or_else(|| io_err("open the skills folder")(io::ErrorKind::NotFound.into()))
    }
}
