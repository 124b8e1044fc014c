//! Earlier versions of skills: `skills/.history/NAME/NNNNNN/`, one folder
//! per change, holding `change` (what the change was) and `skill/` (the
//! skill's folder as it was before; absent when the change created it).
//!
//! A version is written under a temporary name and renamed into place, so
//! a crash never leaves a half-copied version that `restore` would take for
//! a whole one. `.history` can never be a skill's name (names have no dots).
//! Only the newest [`HISTORY_KEPT`] versions of each skill are kept.

use std::io::{self, Read, Write};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions};

use super::{HISTORY_KEPT, SkillError, SkillsHome, io_err, validate_name};

/// The history folder's name inside `skills/`.
pub(crate) const HISTORY_DIR: &str = ".history";

/// Opens (creating when missing) the directory `name` beneath `parent`,
/// never through a symbolic link.
pub(crate) fn open_or_create(parent: &Dir, name: &str) -> io::Result<Dir> {
    match parent.create_dir(name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    parent.open_dir_nofollow(name)
}

/// The version numbers kept for one skill, oldest first.
fn versions(hist: &Dir) -> Vec<u64> {
    let mut out: Vec<u64> = hist
        .entries()
        .map(|it| {
            it.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// Copies the tree `src` into the (empty) directory `dst`, never following
/// symbolic links (they are left out: skills are written without them).
pub(crate) fn copy_tree(src: &Dir, dst: &Dir) -> io::Result<()> {
    for entry in src.entries()? {
        let entry = entry?;
        let name = entry.file_name();
        let ft = entry.file_type()?;
        if ft.is_dir() {
            dst.create_dir(&name)?;
            copy_tree(
                &src.open_dir_nofollow(&name)?,
                &dst.open_dir_nofollow(&name)?,
            )?;
        } else if ft.is_file() {
            let mut read = OpenOptions::new();
            read.read(true).follow(FollowSymlinks::No);
            let mut bytes = Vec::new();
            src.open_with(&name, &read)?.read_to_end(&mut bytes)?;
            let mut write = OpenOptions::new();
            write
                .write(true)
                .create_new(true)
                .follow(FollowSymlinks::No);
            let mut out = dst.open_with(&name, &write)?;
            out.write_all(&bytes)?;
            out.sync_all()?;
        }
    }
    Ok(())
}

/// Keeps the skill `name` as it is now (or that it does not exist) as its
/// newest earlier version, described by `change`. When `move_away` is set
/// the folder itself is moved into the history instead of copied (delete).
pub(crate) fn keep_version(
    root: &Dir,
    name: &str,
    change: &str,
    move_away: bool,
) -> Result<(), SkillError> {
    let action = format!("keep the previous version of skill '{name}'");
    let history = open_or_create(root, HISTORY_DIR).map_err(io_err(&action))?;
    let hist = open_or_create(&history, name).map_err(io_err(&action))?;
    let next = versions(&hist).last().map_or(1, |n| n + 1);
    let tmp = format!(".tmp-{next}-{}", std::process::id());
    let _ = hist.remove_dir_all(&tmp);
    let result = (|| -> io::Result<()> {
        hist.create_dir(&tmp)?;
        let entry = hist.open_dir_nofollow(&tmp)?;
        entry.write("change", change.as_bytes())?;
        let exists = root.symlink_metadata(name).is_ok_and(|m| m.is_dir());
        if exists && move_away {
            root.rename(name, &entry, "skill")?;
        } else if exists {
            entry.create_dir("skill")?;
            copy_tree(
                &root.open_dir_nofollow(name)?,
                &entry.open_dir_nofollow("skill")?,
            )?;
        }
        hist.rename(&tmp, &hist, format!("{next:06}"))
    })();
    if let Err(e) = result {
        let _ = hist.remove_dir_all(&tmp);
        return Err(io_err(action)(e));
    }
    let kept = versions(&hist);
    for old in kept.iter().take(kept.len().saturating_sub(HISTORY_KEPT)) {
        let _ = hist.remove_dir_all(format!("{old:06}"));
    }
    Ok(())
}

impl SkillsHome {
    /// Puts the newest earlier version of skill `name` back in place of the
    /// current one (or removes the skill when the last change created it),
    /// and drops that version from the history, so restoring again steps
    /// further back. Returns what was undone.
    pub fn restore(&self, name: &str) -> Result<String, SkillError> {
        validate_name(name)?;
        let _guard = super::write::lock();
        let no_history = || SkillError::NoHistory(name.to_owned());
        let root = self.open_root(false)?.ok_or_else(no_history)?;
        let hist = root
            .open_dir_nofollow(HISTORY_DIR)
            .and_then(|h| h.open_dir_nofollow(name))
            .map_err(|_| no_history())?;
        let newest = *versions(&hist).last().ok_or_else(no_history)?;
        let version = format!("{newest:06}");
        let action = format!("restore skill '{name}'");
        let entry = hist.open_dir_nofollow(&version).map_err(io_err(&action))?;
        let mut change = String::new();
        if let Ok(mut f) = entry.open("change") {
            let _ = f.read_to_string(&mut change);
        }
        // The current folder is moved aside first and dropped only once the
        // earlier version is in place; a failure puts it back.
        let away = format!(".undone-{version}-{}", std::process::id());
        let moved_away = match root.symlink_metadata(name) {
            Ok(m) if m.is_symlink() => return Err(SkillError::Symlink(name.to_owned())),
            Ok(_) => {
                root.rename(name, &hist, &away).map_err(io_err(&action))?;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err(action)(e)),
        };
        if entry.symlink_metadata("skill").is_ok_and(|m| m.is_dir())
            && let Err(e) = entry.rename("skill", &root, name)
        {
            if moved_away {
                let _ = hist.rename(&away, &root, name);
            }
            return Err(io_err(action)(e));
        }
        if moved_away {
            let _ = hist.remove_dir_all(&away);
        }
        let _ = hist.remove_dir_all(&version);
        Ok(if change.is_empty() {
            "the last change".to_owned()
        } else {
            change
        })
    }

    /// How many earlier versions of skill `name` are kept.
    pub fn history_len(&self, name: &str) -> usize {
        let Ok(Some(root)) = self.open_root(false) else {
            return 0;
        };
        root.open_dir_nofollow(HISTORY_DIR)
            .and_then(|h| h.open_dir_nofollow(name))
            .map_or(0, |h| versions(&h).len())
    }
}
