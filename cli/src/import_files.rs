//! The files `hermes import hermes-agent` writes into this home — the
//! translated `config.toml`, `SOUL.md`, `.env` — planned before anything is
//! written, staged beside their targets, and moved in last (issue 45,
//! item 1). A value of `.env` or an `api_key` is never printed.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use hermes_runtime::config::{Settings, check_dotenv, check_file};

use crate::app::CliError;
use crate::import_config::{map_config, merge_into};

/// Files written beside their targets, moved in by [`Staged::commit`].
#[derive(Default)]
pub struct Staged {
    files: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    /// Writes `bytes` to a temporary file beside `target` (mode `mode`).
    pub fn stage(&mut self, target: &Path, bytes: &[u8], mode: u32) -> Result<(), CliError> {
        let mut tmp = target.as_os_str().to_owned();
        tmp.push(".import-tmp");
        let tmp = PathBuf::from(tmp);
        let err =
            |e: std::io::Error| CliError::Runtime(format!("cannot write {}: {e}", tmp.display()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(err)?;
        self.files.push((tmp.clone(), target.to_path_buf()));
        file.write_all(bytes).map_err(err)?;
        file.sync_all().map_err(err)
    }

    /// Moves every staged file onto its target.
    pub fn commit(self) -> Result<(), CliError> {
        for (tmp, target) in &self.files {
            std::fs::rename(tmp, target).map_err(|e| {
                CliError::Runtime(format!("cannot move {} in: {e}", target.display()))
            })?;
        }
        Ok(())
    }

    /// Removes the staged files: the targets stay as they were.
    pub fn abandon(self) {
        for (tmp, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// `config.yaml` translated and merged into this home's `config.toml`.
pub struct ConfigPlan {
    /// Whether the source has a `config.yaml`.
    found: bool,
    mapped: Vec<(String, String)>,
    unmapped: Vec<String>,
    /// Keys set here already, to other values: kept.
    kept: Vec<String>,
    added: usize,
    /// The new `config.toml`, when anything is added.
    pub write: Option<String>,
}

/// Reads and translates the source's `config.yaml` and merges it into
/// this home's `config.toml`. A `config.yaml` that is not YAML, or a
/// result this hermes would refuse, stops the import before anything is
/// written.
pub fn plan_config(settings: &Settings, source: &Path) -> Result<ConfigPlan, CliError> {
    let path = source.join("config.yaml");
    let mut plan = ConfigPlan {
        found: false,
        mapped: Vec::new(),
        unmapped: Vec::new(),
        kept: Vec::new(),
        added: 0,
        write: None,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(plan),
        Err(e) => {
            return Err(CliError::Runtime(format!(
                "cannot read {}: {e}; nothing was imported",
                path.display()
            )));
        }
    };
    plan.found = true;
    // An empty file is YAML's null: nothing set.
    let yaml: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_norway::from_str(&text).map_err(|e| {
            CliError::Runtime(format!(
                "{} is not valid YAML ({e}); nothing was imported",
                path.display()
            ))
        })?
    };
    let mapped = map_config(&yaml);
    let ours_path = settings.home.join("config.toml");
    let mut ours: toml::Table = match std::fs::read_to_string(&ours_path) {
        Ok(t) => t.parse().map_err(|e| {
            CliError::Config(format!(
                "{} is not valid TOML ({e}); nothing was imported",
                ours_path.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => {
            return Err(CliError::Runtime(format!(
                "cannot read {}: {e}",
                ours_path.display()
            )));
        }
    };
    let (added, kept) = merge_into(&mut ours, &mapped.table);
    let problems = check_file(&ours, &ours_path);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(CliError::Config(format!(
            "the configuration translated from {} would not be valid here ({}); nothing was \
             imported",
            path.display(),
            list.join("; ")
        )));
    }
    if added > 0 {
        let text = toml::to_string(&ours).map_err(|e| {
            CliError::Runtime(format!("cannot write the translated configuration: {e}"))
        })?;
        plan.write = Some(format!(
            "# Keys translated from hermes-agent's config.yaml by `hermes import hermes-agent`.\n{text}"
        ));
    }
    plan.mapped = mapped.mapped;
    plan.unmapped = mapped.unmapped;
    plan.kept = kept;
    plan.added = added;
    Ok(plan)
}

impl ConfigPlan {
    /// The key names: what maps to what, what is kept, what has no
    /// equivalent. Values are not shown (some are keys).
    pub fn report(&self, dry_run: bool) {
        if !self.found {
            return;
        }
        let verb = if dry_run { "would add" } else { "added" };
        println!(
            "  config (config.yaml → config.toml): {verb} {} settings",
            self.added
        );
        for (theirs, ours) in &self.mapped {
            println!("    {theirs} → {ours}");
        }
        if !self.kept.is_empty() {
            println!("    already set here, kept: {}", self.kept.join(", "));
        }
        if !self.unmapped.is_empty() {
            println!(
                "    not mapped (no equivalent here): {}",
                self.unmapped.join(", ")
            );
        }
    }
}

/// What happens to the source's `SOUL.md` (its persona).
pub enum SoulPlan {
    /// The source has none.
    Absent,
    /// This home has none: the source's is copied.
    Install(String),
    /// This home has the same one.
    Same,
    /// This home has its own: kept.
    KeptOurs,
}

/// Decides about `SOUL.md`: copied only where this home has none.
pub fn plan_soul(settings: &Settings, source: &Path) -> Result<SoulPlan, CliError> {
    let read = |p: &Path| match std::fs::read_to_string(p) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::Runtime(format!(
            "cannot read {}: {e}; nothing was imported",
            p.display()
        ))),
    };
    let Some(theirs) = read(&source.join("SOUL.md"))? else {
        return Ok(SoulPlan::Absent);
    };
    Ok(match read(&settings.home.join("SOUL.md"))? {
        None => SoulPlan::Install(theirs),
        Some(ours) if ours == theirs => SoulPlan::Same,
        Some(_) => SoulPlan::KeptOurs,
    })
}

impl SoulPlan {
    pub fn report(&self, dry_run: bool) {
        let line = match (self, dry_run) {
            (Self::Absent, _) => return,
            (Self::Install(_), true) => "would copy (this home has none)",
            (Self::Install(_), false) => "copied",
            (Self::Same, _) => "already here",
            (Self::KeptOurs, _) => "this home has its own, kept (theirs not copied)",
        };
        println!("  persona (SOUL.md): {line}");
    }
}

/// A `.env` line and the name it sets.
type EnvLine<'a> = (String, &'a str);

/// The source `.env`'s variables this home's `.env` lacks.
pub struct SecretsPlan {
    names: Vec<String>,
    /// Variables left out: this hermes would refuse them.
    refused: Vec<String>,
    found: bool,
    /// The new `.env`, when anything is added.
    pub write: Option<String>,
}

/// Adds the source `.env`'s variables this home's `.env` lacks. Names are
/// shown, values never.
pub fn plan_secrets(settings: &Settings, source: &Path) -> SecretsPlan {
    let Ok(theirs) = std::fs::read_to_string(source.join(".env")) else {
        return SecretsPlan {
            names: Vec::new(),
            refused: Vec::new(),
            found: false,
            write: None,
        };
    };
    let ours = std::fs::read_to_string(settings.home.join(".env")).unwrap_or_default();
    let name_of = |line: &str| -> Option<String> {
        let line = line.trim().trim_start_matches("export ");
        let (name, _) = line.split_once('=')?;
        (!line.starts_with('#') && !name.trim().is_empty()).then(|| name.trim().to_owned())
    };
    let have: Vec<String> = ours.lines().filter_map(name_of).collect();
    let (new, refused): (Vec<EnvLine<'_>>, Vec<EnvLine<'_>>) = theirs
        .lines()
        .filter_map(|l| name_of(l).map(|n| (n, l.trim())))
        .filter(|(n, _)| !have.contains(n))
        // A line this hermes's .env would refuse (one of hermes-agent's own
        // HERMES_ variables, a broken line) would stop every command here.
        .partition(|(_, line)| check_dotenv(line, &source.join(".env")).is_empty());
    let write = (!new.is_empty()).then(|| {
        let mut text = ours;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        for (_, line) in &new {
            text.push_str(line);
            text.push('\n');
        }
        text
    });
    SecretsPlan {
        names: new.into_iter().map(|(n, _)| n).collect(),
        refused: refused.into_iter().map(|(n, _)| n).collect(),
        found: true,
        write,
    }
}

impl SecretsPlan {
    pub fn report(&self, dry_run: bool) {
        if !self.found {
            return;
        }
        if !self.refused.is_empty() {
            println!(
                "  secrets (.env): not copied, hermes-agent's own or not readable here: {}",
                self.refused.join(", ")
            );
        }
        if self.names.is_empty() {
            println!("  secrets (.env): nothing this home's .env lacks");
            return;
        }
        let verb = if dry_run { "would add" } else { "added" };
        println!(
            "  secrets (.env): {verb} {} ({}; values not shown)",
            self.names.len(),
            self.names.join(", ")
        );
    }
}
