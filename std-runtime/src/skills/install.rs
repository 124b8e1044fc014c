//! `hermes skills install PATH`: copies a skill folder the user points to
//! into `skills/NAME/` (NAME from its front matter), checked as the agent's
//! own skills are: a valid `SKILL.md`, no symbolic links or special files,
//! the size limits. The copy is made under a temporary name and renamed
//! into place, so a failed install leaves nothing behind.

use std::io::{self, Read};
use std::path::Path;

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

use super::history::keep_version;
use super::write::lock;
use super::{
    MAX_FILE_BYTES, MAX_FILES, MAX_SKILL_BYTES, MAX_SKILL_MD_BYTES, SkillError, SkillsHome, format,
    io_err, parse_skill_md,
};

/// A file of the skill being installed.
struct Incoming {
    rel: Vec<String>,
    bytes: Vec<u8>,
}

/// Reads the tree at `dir` into `out`, refusing links, special files,
/// hidden names and anything over the limits.
fn read_tree(
    dir: &Path,
    rel: &[String],
    out: &mut Vec<Incoming>,
    total: &mut u64,
) -> Result<(), SkillError> {
    let shown = |rel: &[String]| rel.join("/");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err(format!("read {}", dir.display())))?
        .collect::<Result<_, _>>()
        .map_err(io_err(format!("read {}", dir.display())))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let mut here = rel.to_vec();
        here.push(name);
        let meta = std::fs::symlink_metadata(entry.path())
            .map_err(io_err(format!("read {}", entry.path().display())))?;
        if meta.is_symlink() {
            return Err(SkillError::BadPath {
                path: shown(&here),
                why: "it is a symbolic link; a skill to install must hold only real files".into(),
            });
        }
        if meta.is_dir() {
            if here.len() > 6 {
                return Err(SkillError::BadPath {
                    path: shown(&here),
                    why: "the skill's folders are nested too deep".into(),
                });
            }
            read_tree(&entry.path(), &here, out, total)?;
            continue;
        }
        if !meta.is_file() {
            return Err(SkillError::BadPath {
                path: shown(&here),
                why: "it is not a regular file".into(),
            });
        }
        let limit = if here.len() == 1 && here[0] == "SKILL.md" {
            MAX_SKILL_MD_BYTES
        } else {
            MAX_FILE_BYTES
        };
        if meta.len() > limit as u64 {
            return Err(SkillError::TooLarge {
                what: shown(&here),
                size: meta.len(),
                limit: limit as u64,
            });
        }
        *total += meta.len();
        if *total > MAX_SKILL_BYTES || out.len() >= MAX_FILES {
            return Err(SkillError::TooLarge {
                what: "the skill".into(),
                size: *total,
                limit: MAX_SKILL_BYTES,
            });
        }
        let mut bytes = Vec::new();
        std::fs::File::open(entry.path())
            .and_then(|f| f.take(limit as u64 + 1).read_to_end(&mut bytes))
            .map_err(io_err(format!("read {}", entry.path().display())))?;
        out.push(Incoming { rel: here, bytes });
    }
    Ok(())
}

/// Writes `files` beneath `dst`, creating folders without following links.
fn write_tree(dst: &Dir, files: &[Incoming]) -> io::Result<()> {
    for file in files {
        let Some((leaf, dirs)) = file.rel.split_last() else {
            continue;
        };
        let mut dir = dst.try_clone()?;
        for part in dirs {
            dir = super::history::open_or_create(&dir, part)?;
        }
        crate::fsutil::write_atomic_in(&dir, std::ffi::OsStr::new(leaf), &file.bytes)?;
    }
    Ok(())
}

impl SkillsHome {
    /// Installs the skill folder at `source` (or the folder of the
    /// `SKILL.md` file `source` names). Returns the skill's name.
    pub fn install(&self, source: &Path) -> Result<String, SkillError> {
        let folder = if source.is_file() {
            source.parent().unwrap_or(Path::new("."))
        } else {
            source
        };
        let skill_md_path = folder.join("SKILL.md");
        let meta = std::fs::symlink_metadata(&skill_md_path).map_err(|_| SkillError::BadPath {
            path: folder.display().to_string(),
            why: "it has no SKILL.md; a skill is a folder with a SKILL.md in it".into(),
        })?;
        if !meta.is_file() {
            return Err(SkillError::BadPath {
                path: skill_md_path.display().to_string(),
                why: "SKILL.md must be a regular file".into(),
            });
        }
        let mut files = Vec::new();
        let mut total = 0;
        read_tree(folder, &[], &mut files, &mut total)?;
        let skill_md = files
            .iter()
            .find(|f| f.rel.len() == 1 && f.rel[0] == "SKILL.md")
            .map(|f| String::from_utf8_lossy(&f.bytes).replace("\r\n", "\n"))
            .unwrap_or_default();
        let name = format::declared_name(&skill_md).ok_or_else(|| SkillError::BadSkillMd {
            why: "the front matter needs 'name:' (lowercase letters, digits, hyphens)".into(),
        })?;
        parse_skill_md(&name, &skill_md)?;

        let _guard = lock();
        let root = self.root_for_write()?;
        if root.symlink_metadata(&name).is_ok() {
            return Err(SkillError::BadPath {
                path: format!("skills/{name}"),
                why: format!(
                    "a skill named '{name}' is already installed; remove it first \
                     (`hermes skills remove {name}`)"
                ),
            });
        }
        let action = format!("install skill '{name}'");
        let staging = format!(".install-{name}-{}", std::process::id());
        let _ = root.remove_dir_all(&staging);
        root.create_dir(&staging).map_err(io_err(&action))?;
        let staged = root.open_dir_nofollow(&staging).map_err(io_err(&action));
        let written = staged.and_then(|d| write_tree(&d, &files).map_err(io_err(&action)));
        if let Err(e) = written {
            let _ = root.remove_dir_all(&staging);
            return Err(e);
        }
        if let Err(e) = keep_version(&root, &name, "install", false) {
            let _ = root.remove_dir_all(&staging);
            return Err(e);
        }
        root.rename(&staging, &root, &name).map_err(|e| {
            let _ = root.remove_dir_all(&staging);
            io_err(action)(e)
        })?;
        Ok(name)
    }
}
