//! The `SKILL.md` format: YAML front matter, then Markdown instructions.
//!
//! ```text
//! ---
//! name: release-notes
//! description: Writes release notes from the git log since the last tag.
//! version: 1.0.0            # optional
//! platforms: [linux, macos] # optional
//! metadata:                 # optional, any mapping
//!   category: writing
//! ---
//! # Release notes
//! 1. …
//! ```
//!
//! Other keys (`license`, `allowed-tools`, as skills written for other
//! agents carry) are accepted and ignored. The front matter is parsed with
//! a real YAML parser (`serde_norway`, the maintained fork of `serde_yaml`)
//! rather than line by line: descriptions are quoted, folded (`>`) and
//! escaped in the wild, and a line parser gets those wrong.

use serde::Deserialize;

use super::SkillError;

/// The longest skill name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The platforms `platforms:` may name.
pub const PLATFORMS: &[&str] = &["linux", "macos", "windows"];

/// What a valid front matter holds.
#[derive(Clone, Debug, PartialEq)]
pub struct FrontMatter {
    /// The skill's name; equal to its folder's name.
    pub name: String,
    /// One line: what the skill does and when to use it.
    pub description: String,
    /// A version, as written (`1.2` and `"1.2"` alike).
    pub version: Option<String>,
    /// The platforms it works on; empty: all.
    pub platforms: Vec<String>,
    /// `metadata.category`, when it is a string.
    pub category: Option<String>,
}

/// The front matter as YAML gives it, before validation.
#[derive(Deserialize)]
struct RawFrontMatter {
    name: Option<serde_norway::Value>,
    description: Option<serde_norway::Value>,
    version: Option<serde_norway::Value>,
    platforms: Option<serde_norway::Value>,
    metadata: Option<serde_norway::Value>,
}

/// Checks a skill name: 1–64 characters of `a-z`, `0-9` and `-`, not
/// starting or ending with a hyphen, no two hyphens in a row. Such a name
/// can never be `.`, `..`, hidden, absolute or hold a separator, which is
/// what lets it be used as a folder name.
pub fn validate_name(name: &str) -> Result<(), SkillError> {
    let bad = |why: &str| SkillError::BadName {
        name: name.chars().take(80).collect(),
        why: why.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(bad("it is longer than 64 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(bad(
            "only lowercase letters a-z, digits and hyphens are allowed",
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(bad(
            "it may not start or end with a hyphen or hold two in a row",
        ));
    }
    Ok(())
}

/// Splits `text` into its front matter (YAML, without the `---` lines) and
/// the body; `None` when it does not start with a front matter block.
pub fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

fn scalar(value: &serde_norway::Value) -> Option<String> {
    match value {
        serde_norway::Value::String(s) => Some(s.clone()),
        serde_norway::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses and validates the `SKILL.md` of the skill in folder `folder`.
/// Every error says what to change.
pub fn parse_skill_md<'t>(
    folder: &str,
    text: &'t str,
) -> Result<(FrontMatter, &'t str), SkillError> {
    let bad = |why: String| SkillError::BadSkillMd { why };
    let (yaml, body) = split_front_matter(text).ok_or_else(|| {
        bad(
            "it must start with a YAML front matter block: a line '---', then \
             'name: …' and 'description: …', then a line '---'"
                .into(),
        )
    })?;
    let raw: RawFrontMatter = serde_norway::from_str(yaml)
        .map_err(|e| bad(format!("the front matter is not a valid YAML mapping: {e}")))?;
    let name = raw
        .name
        .as_ref()
        .and_then(scalar)
        .ok_or_else(|| bad("the front matter needs 'name:' (the folder's name)".into()))?;
    validate_name(&name)?;
    if name != folder {
        return Err(bad(format!(
            "'name: {name}' differs from the skill's folder name '{folder}'; they must be equal"
        )));
    }
    let description = match raw.description.as_ref() {
        Some(serde_norway::Value::String(s)) => one_line(s),
        _ => String::new(),
    };
    if description.is_empty() {
        return Err(bad(
            "the front matter needs a non-empty 'description:' saying what the skill does \
             and when to use it"
                .into(),
        ));
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(bad(format!(
            "'description' is longer than {MAX_DESCRIPTION_CHARS} characters; keep it to a \
             sentence or two (the details go in the body)"
        )));
    }
    let version = match raw.version.as_ref() {
        None | Some(serde_norway::Value::Null) => None,
        Some(v) => {
            Some(scalar(v).ok_or_else(|| bad("'version' must be a string such as 1.0.0".into()))?)
        }
    };
    let platforms = match raw.platforms {
        None | Some(serde_norway::Value::Null) => Vec::new(),
        Some(v) => {
            let list: Vec<String> = serde_norway::from_value(v)
                .map_err(|_| bad("'platforms' must be a list such as [linux, macos]".into()))?;
            if let Some(p) = list.iter().find(|p| !PLATFORMS.contains(&p.as_str())) {
                return Err(bad(format!(
                    "unknown platform '{p}' in 'platforms'; known: {}",
                    PLATFORMS.join(", ")
                )));
            }
            list
        }
    };
    let category = match raw.metadata {
        None | Some(serde_norway::Value::Null) => None,
        Some(serde_norway::Value::Mapping(m)) => m.get("category").and_then(scalar),
        Some(_) => return Err(bad("'metadata' must be a mapping (key: value lines)".into())),
    };
    if body.trim().is_empty() {
        return Err(bad(
            "the instructions after the front matter are empty; write the steps in Markdown".into(),
        ));
    }
    Ok((
        FrontMatter {
            name,
            description,
            version,
            platforms,
            category,
        },
        body,
    ))
}

/// The `name:` a `SKILL.md` declares, if its front matter parses and
/// holds a valid one.
pub fn declared_name(text: &str) -> Option<String> {
    let (yaml, _) = split_front_matter(text)?;
    let raw: RawFrontMatter = serde_norway::from_str(yaml).ok()?;
    let name = raw.name.as_ref().and_then(scalar)?;
    validate_name(&name).ok()?;
    Some(name)
}

/// `text` with every run of whitespace (newlines included) made one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The description shown for a skill that may not be valid (a hand-written
/// one from before front matter was checked): the front matter's
/// `description` when it parses, else the first line of the body that is
/// not a heading.
pub fn lenient_description(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let mut body = text.as_str();
    if let Some((yaml, rest)) = split_front_matter(&text) {
        if let Ok(raw) = serde_norway::from_str::<RawFrontMatter>(yaml)
            && let Some(serde_norway::Value::String(d)) = raw.description
            && !d.trim().is_empty()
        {
            return one_line(&d);
        }
        body = rest;
    }
    body.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "git-rebase", "x2", "a-b-c"] {
            validate_name(ok).unwrap();
        }
        for bad in [
            "", "-a", "a-", "a--b", "A", "a_b", "a/b", "..", ".x", "a b", "é",
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
        assert!(validate_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn front_matter() {
        let text = "---\nname: deploy\ndescription: >\n  Deploys the\n  service.\nversion: 1.2\n\
                    platforms: [linux]\nmetadata:\n  category: ops\nlicense: MIT\n---\n# Deploy\nRun it.\n";
        let (fm, body) = parse_skill_md("deploy", text).unwrap();
        assert_eq!(fm.description, "Deploys the service.");
        assert_eq!(fm.version.as_deref(), Some("1.2"));
        assert_eq!(fm.platforms, vec!["linux"]);
        assert_eq!(fm.category.as_deref(), Some("ops"));
        assert_eq!(body, "# Deploy\nRun it.\n");
        let cases = [
            ("no front matter\n", "must start with a YAML front matter"),
            ("---\nname: deploy\n", "must start with a YAML front matter"),
            ("---\nname: [x\n---\nb\n", "not a valid YAML mapping"),
            ("---\ndescription: d\n---\nb\n", "needs 'name:'"),
            ("---\nname: other\ndescription: d\n---\nb\n", "differs from"),
            ("---\nname: deploy\n---\nb\n", "non-empty 'description:'"),
            (
                "---\nname: deploy\ndescription: d\nplatforms: [beos]\n---\nb\n",
                "unknown platform 'beos'",
            ),
            (
                "---\nname: deploy\ndescription: d\nmetadata: 3\n---\nb\n",
                "'metadata' must be a mapping",
            ),
            ("---\nname: deploy\ndescription: d\n---\n\n", "are empty"),
        ];
        for (text, want) in cases {
            let e = parse_skill_md("deploy", text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn lenient() {
        assert_eq!(lenient_description("# T\n\nDoes x.\nMore.\n"), "Does x.");
        assert_eq!(
            lenient_description("---\nname: a\ndescription: \"Quoted.\"\n---\nBody.\n"),
            "Quoted."
        );
        assert_eq!(
            lenient_description("---\nname: [broken\n---\nBody line.\n"),
            "Body line."
        );
    }
}
