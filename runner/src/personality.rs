//! Personalities (`/personality NAME`): named overlays on a chat's system
//! prompt — a few built in, and any `$HERMES_HOME/personalities/NAME.md`
//! (which replaces a built-in of the same name). The overlay is added after
//! the session's stored prompt when its agent is built; the stored prompt
//! itself never changes.

use std::path::{Path, PathBuf};

/// The longest personality file read, in bytes (a system prompt overlay,
/// not a document).
pub const MAX_OVERLAY_BYTES: u64 = 8 * 1024;

/// The built-in personalities: name and overlay.
const BUILT_IN: &[(&str, &str)] = &[
    (
        "concise",
        "Answer as briefly as possible: the answer first, no preamble, no recap.",
    ),
    (
        "teacher",
        "Explain like a patient teacher: build up step by step, give a small example, \
         and check understanding with a short question at the end.",
    ),
    (
        "technical",
        "Be precise and technical: exact names, versions, commands and trade-offs; \
         no simplifications that would mislead an expert.",
    ),
];

/// Where personalities come from.
#[derive(Clone, Debug, Default)]
pub struct Personalities {
    dir: Option<PathBuf>,
}

/// Whether `name` is a personality name: 1–40 ASCII letters, digits, `-`
/// or `_` (so it can never name a path outside the folder).
pub fn valid_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Personalities {
    /// The built-in personalities only.
    pub fn built_in() -> Self {
        Personalities::default()
    }

    /// The built-in ones and those of `$HERMES_HOME/personalities/`.
    pub fn in_home(home: &Path) -> Self {
        Personalities {
            dir: Some(home.join("personalities")),
        }
    }

    /// Every personality name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = BUILT_IN.iter().map(|(n, _)| (*n).to_owned()).collect();
        if let Some(dir) = &self.dir
            && let Ok(entries) = std::fs::read_dir(dir)
        {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "md")
                    && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
                    && valid_name(stem)
                    && !names.iter().any(|n| n == stem)
                {
                    names.push(stem.to_owned());
                }
            }
        }
        names.sort();
        names
    }

    /// The overlay of `name`, if there is such a personality (a file wins
    /// over a built-in; a file too large or not UTF-8 is none).
    pub fn overlay(&self, name: &str) -> Option<String> {
        if !valid_name(name) {
            return None;
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(format!("{name}.md"));
            if let Ok(meta) = std::fs::metadata(&path)
                && meta.is_file()
            {
                if meta.len() > MAX_OVERLAY_BYTES {
                    tracing::warn!(path = %path.display(), "personality file too large; ignored");
                    return None;
                }
                return std::fs::read_to_string(&path)
                    .ok()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty());
            }
        }
        BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| (*text).to_owned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn files_add_and_replace_built_ins_and_names_cannot_escape() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("personalities");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pirate.md"), "Talk like a pirate.\n").unwrap();
        std::fs::write(dir.join("concise.md"), "Five words at most.").unwrap();
        std::fs::write(dir.join("huge.md"), "x".repeat(10_000)).unwrap();
        std::fs::write(home.path().join("secret.md"), "not a personality").unwrap();
        let p = Personalities::in_home(home.path());
        assert_eq!(p.overlay("pirate").as_deref(), Some("Talk like a pirate."));
        assert_eq!(p.overlay("concise").as_deref(), Some("Five words at most."));
        assert!(p.overlay("teacher").unwrap().contains("teacher"));
        assert_eq!(p.overlay("huge"), None);
        assert_eq!(p.overlay("../secret"), None);
        assert_eq!(p.overlay("nobody"), None);
        assert_eq!(
            p.names(),
            vec!["concise", "huge", "pirate", "teacher", "technical"]
        );
        assert_eq!(Personalities::built_in().names().len(), 3);
    }
}
