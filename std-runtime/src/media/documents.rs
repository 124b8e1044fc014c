//! Documents users send, saved into the working directory (SPEC X6) so the
//! file tools can read them.
//!
//! The working directory is opened as a directory handle and the file is
//! created beneath it (cap-std; `openat2` with `RESOLVE_BENEATH` on Linux):
//! a name the user chose cannot leave it. The name is reduced to one safe
//! component ([`sanitize_name`]); a file of that name already there is
//! never replaced — the new one gets ` (1)`, ` (2)`, … before its
//! extension. The bytes go to a hidden temp file first, which is then
//! hard-linked to its final name (failing, not replacing, if the name was
//! taken meanwhile), so a crash leaves no half-written document under the
//! announced name.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt as _};

/// The longest file name kept, in bytes (most file systems allow 255).
const MAX_NAME_BYTES: usize = 120;
/// How many ` (n)` variants are tried before giving up.
const MAX_VARIANTS: u32 = 1000;

/// A document saved into the working directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedDocument {
    /// Its name in the working directory (what the model is told).
    pub name: String,
    /// Its full path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Why a document was not saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The working directory cannot be opened.
    #[error("the working directory {}: {source}", dir.display())]
    Workdir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing failed.
    #[error("writing {name}: {source}")]
    Write {
        /// The name tried.
        name: String,
        /// Why.
        source: io::Error,
    },
    /// Every variant of the name is taken.
    #[error("{0} and {MAX_VARIANTS} numbered variants of it already exist")]
    NameTaken(String),
}

/// One safe file name from `name`: the part after the last `/` or `\`,
/// control characters and characters file systems or shells trip over
/// replaced by `_`, leading dots and spaces dropped (no hidden files, no
/// `..`), at most [`MAX_NAME_BYTES`] bytes with the extension kept; `file`
/// when nothing is left.
pub fn sanitize_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let cleaned: String = last
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, ':' | '*' | '?' | '"' | '<' | '>' | '|' | '\u{7f}') {
                '_'
            } else {
                c
            }
        })
        .collect();
    let trimmed = cleaned
        .trim_start_matches(['.', ' '])
        .trim_end_matches([' ', '.']);
    let base = if trimmed.is_empty() { "file" } else { trimmed };
    if base.len() <= MAX_NAME_BYTES {
        return base.to_owned();
    }
    let (stem, ext) = split_extension(base);
    let ext = if ext.len() > 16 { "" } else { ext };
    let cut = crate::text::floor_char_boundary(stem, MAX_NAME_BYTES.saturating_sub(ext.len()));
    format!("{}{ext}", &stem[..cut])
}

/// `("report", ".pdf")` of `report.pdf`; `("archive.tar", ".gz")`.
fn split_extension(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    }
}

fn variant(name: &str, n: u32) -> String {
    if n == 0 {
        return name.to_owned();
    }
    let (stem, ext) = split_extension(name);
    format!("{stem} ({n}){ext}")
}

/// Saves `bytes` as `name` (sanitised) in `workdir`, never replacing a file;
/// see the module docs.
pub fn save_document(workdir: &Path, name: &str, bytes: &[u8]) -> Result<SavedDocument, SaveError> {
    let root_path = std::fs::canonicalize(workdir).map_err(|source| SaveError::Workdir {
        dir: workdir.to_owned(),
        source,
    })?;
    let dir = Dir::open_ambient_dir(&root_path, ambient_authority()).map_err(|source| {
        SaveError::Workdir {
            dir: root_path.clone(),
            source,
        }
    })?;
    let name = sanitize_name(name);
    let tmp = format!(".{name}.part-{}", std::process::id());
    let mut opts = OpenOptions::new();
    opts.write(true)
        .create_new(true)
        .follow(FollowSymlinks::No)
        .mode(0o600);
    let write = |source| SaveError::Write {
        name: name.clone(),
        source,
    };
    let _ = dir.remove_file(&tmp);
    let written = (|| {
        let mut file = dir.open_with(&tmp, &opts)?.into_std();
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = dir.remove_file(&tmp);
        return Err(write(e));
    }
    let result = (|| {
        for n in 0..=MAX_VARIANTS {
            let candidate = variant(&name, n);
            match dir.hard_link(&tmp, &dir, &candidate) {
                Ok(()) => return Ok(candidate),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(write(e)),
            }
        }
        Err(SaveError::NameTaken(name.clone()))
    })();
    let _ = dir.remove_file(&tmp);
    let saved = result?;
    Ok(SavedDocument {
        path: root_path.join(&saved),
        name: saved,
        bytes: bytes.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_one_safe_component() {
        assert_eq!(sanitize_name("report.pdf"), "report.pdf");
        assert_eq!(sanitize_name("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_name("..\\..\\boot.ini"), "boot.ini");
        assert_eq!(sanitize_name(".bashrc"), "bashrc");
        assert_eq!(sanitize_name(".."), "file");
        assert_eq!(sanitize_name(""), "file");
        assert_eq!(sanitize_name("a\nb\u{0}c.txt"), "a_b_c.txt");
        assert_eq!(sanitize_name("what?.md"), "what_.md");
        assert_eq!(sanitize_name("отчёт.docx"), "отчёт.docx");
        let long = format!("{}.tar.gz", "é".repeat(200));
        let cut = sanitize_name(&long);
        assert!(cut.len() <= MAX_NAME_BYTES, "{}", cut.len());
        assert!(cut.ends_with(".gz"), "{cut}");
    }

    #[test]
    fn variants_number_before_the_extension() {
        assert_eq!(variant("a.pdf", 0), "a.pdf");
        assert_eq!(variant("a.pdf", 2), "a (2).pdf");
        assert_eq!(variant("README", 1), "README (1)");
    }
}
