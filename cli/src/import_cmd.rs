//! `hermes import hermes-agent [PATH]` (issue 45, item 1): brings a
//! hermes-agent home's sessions, memory, skills, persona, configuration
//! and secrets into this home.
//!
//! The source is only read: its `state.db` is opened read-only (immutable
//! when it has no WAL, so not even a `-shm` appears beside it) and nothing
//! is created in its folder. The sessions go into the store in ONE
//! transaction ([`Store::import_sessions`]), each with a kv marker naming its
//! hermes-agent id, so a second import adds nothing twice and a failure
//! leaves the store as it was. Everything is read and checked before
//! anything is written; the files (memory, `config.toml`, `SOUL.md`, `.env`)
//! are staged beside their targets before the transaction and moved in
//! after it.

use std::path::{Path, PathBuf};

use hermes_core::{LedgerEntry, Message, ToolCall};
use hermes_runtime::config::Settings;
use hermes_runtime::skills::SkillsHome;
use hermes_runtime::store::{
    AgentDb, AgentMessage, AgentSession, ImportedSession, KNOWN_AGENT_SCHEMAS, NewSession,
    read_agent_sessions,
};

use crate::app::{CliError, open_store, runtime};
use crate::import_files::{SoulPlan, Staged, plan_config, plan_secrets, plan_soul};

/// The hermes-agent releases this import was tested against.
pub const KNOWN_AGENT_VERSIONS: &str = "hermes-agent 0.19 (state.db schema 22)";

/// The kv prefix of the markers of imported sessions.
const MARKER_PREFIX: &str = "import/hermes-agent/session/";

/// `hermes import hermes-agent [PATH] [--dry-run]`.
pub fn run(settings: &Settings, path: Option<PathBuf>, dry_run: bool) -> Result<i32, CliError> {
    let source = match path {
        Some(p) => p,
        None => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".hermes"))
            .ok_or_else(|| {
                CliError::Config("HOME is not set: name the hermes-agent home".into())
            })?,
    };
    check_source(&source, &settings.home)?;
    let db = source.join("state.db");
    let agent_db = if db.is_file() {
        read_agent_sessions(&db).map_err(|e| {
            CliError::Runtime(format!(
                "cannot read hermes-agent's sessions: {e}; nothing was imported"
            ))
        })?
    } else {
        AgentDb {
            schema: None,
            sessions: Vec::new(),
            unknown: Vec::new(),
        }
    };
    let schema = agent_db.schema;
    if let Some(v) = schema.filter(|v| !KNOWN_AGENT_SCHEMAS.contains(v)) {
        eprintln!(
            "note: state.db is at schema {v}, which this import does not know (known: \
             {KNOWN_AGENT_VERSIONS}); the columns it knows are read, the rest is skipped"
        );
    }
    let mut skipped_messages = 0;
    let converted: Vec<(&AgentSession, Vec<LedgerEntry>)> = agent_db
        .sessions
        .iter()
        .map(|s| {
            let entries = ledger(&s.messages, &mut skipped_messages);
            (s, entries)
        })
        .collect();
    let imported: Vec<ImportedSession<'_>> = converted
        .iter()
        .map(|(s, entries)| ImportedSession {
            new: NewSession {
                platform: Some(s.source.as_str()),
                chat_id: s.chat_id.as_deref(),
                user_id: s.user_id.as_deref(),
                model: s.model.as_deref(),
                ..NewSession::default()
            },
            title: s.title.as_deref(),
            created_at_ms: s.started_at_ms,
            entries: entries.clone(),
            marker: format!("{MARKER_PREFIX}{}", s.id),
        })
        .collect();
    let messages: usize = imported.iter().map(|s| s.entries.len()).sum();
    let memory = [("MEMORY.md", "memory"), ("USER.md", "user profile")]
        .into_iter()
        .map(|(name, what)| {
            let theirs = read_entries(&source.join("memories").join(name))?;
            let ours = read_entries(&settings.home.join(name))?;
            let new: Vec<String> = theirs.into_iter().filter(|e| !ours.contains(e)).collect();
            Ok((name, what, ours, new))
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    // Everything that can refuse the import is decided before anything
    // is written: the configuration's translation, the persona, the
    // secrets.
    let config = plan_config(settings, &source)?;
    let soul = plan_soul(settings, &source)?;
    let secrets = plan_secrets(settings, &source);

    let verb = if dry_run { "would import" } else { "imported" };
    let written = if dry_run {
        imported.len()
    } else {
        // The files are staged first (a failure leaves nothing), then the
        // sessions go in one transaction, then the files are moved in.
        let mut staged = Staged::default();
        let staging = (|| {
            for (name, _, ours, new) in &memory {
                if !new.is_empty() {
                    let mut all = ours.clone();
                    all.extend(new.iter().cloned());
                    let text = format!("{}\n", all.join("\n§\n"));
                    staged.stage(&settings.home.join(name), text.as_bytes(), 0o600)?;
                }
            }
            if let Some(text) = &config.write {
                staged.stage(&settings.home.join("config.toml"), text.as_bytes(), 0o600)?;
            }
            if let SoulPlan::Install(text) = &soul {
                staged.stage(&settings.home.join("SOUL.md"), text.as_bytes(), 0o644)?;
            }
            if let Some(text) = &secrets.write {
                staged.stage(&settings.home.join(".env"), text.as_bytes(), 0o600)?;
            }
            Ok::<(), CliError>(())
        })();
        if let Err(e) = staging {
            staged.abandon();
            return Err(e);
        }
        let stored = open_store(settings)
            .and_then(|mut store| store.import_sessions(&imported).map_err(runtime));
        match stored {
            Ok(n) => {
                staged.commit()?;
                n
            }
            Err(e) => {
                staged.abandon();
                return Err(e);
            }
        }
    };
    println!(
        "from {} ({}):",
        source.display(),
        schema.map_or("no state.db".to_owned(), |v| format!("state.db schema {v}"))
    );
    if dry_run {
        println!(
            "  sessions: {verb} up to {written} ({messages} messages; ones imported before are skipped)"
        );
    } else {
        println!(
            "  sessions: {verb} {written} of {} ({} already imported before)",
            imported.len(),
            imported.len() - written
        );
    }
    if skipped_messages > 0 {
        println!("  skipped {skipped_messages} messages of other roles or without content");
    }
    if !agent_db.unknown.is_empty() {
        println!(
            "  state.db holds what this import does not know (another hermes-agent \
             version's; known: {KNOWN_AGENT_VERSIONS}), skipped: {}",
            agent_db.unknown.join(", ")
        );
    }
    for (name, what, _, new) in &memory {
        println!("  {what} ({name}): {verb} {} new entries", new.len());
    }
    import_skills(settings, &source, dry_run);
    config.report(dry_run);
    soul.report(dry_run);
    secrets.report(dry_run);
    println!(
        "  context files: hermes-agent keeps none in its home besides SOUL.md \
         (AGENTS.md, .hermes.md, .cursorrules are read from the project folder, \
         where this hermes reads them too)"
    );
    Ok(0)
}

/// Installs each skill folder of the source (`skills/NAME/` or
/// `skills/CATEGORY/NAME/`) through the same checks as `hermes skills
/// install` (staged, moved into place last): one that fails them is
/// reported and skipped, one already here is left as it is.
fn import_skills(settings: &Settings, source: &Path, dry_run: bool) {
    let skills = SkillsHome::new(&settings.home);
    let mut folders = Vec::new();
    for entry in read_dirs(&source.join("skills")) {
        if entry.join("SKILL.md").is_file() {
            folders.push(entry);
        } else {
            folders.extend(
                read_dirs(&entry)
                    .into_iter()
                    .filter(|d| d.join("SKILL.md").is_file()),
            );
        }
    }
    for folder in folders {
        let shown = folder
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if settings.home.join("skills").join(&shown).exists() {
            println!("  skill {shown}: already here, left as it is");
        } else if dry_run {
            println!("  skill {shown}: would install (if it passes the checks)");
        } else {
            match skills.install(&folder) {
                Ok(name) => println!("  skill {name}: installed"),
                Err(e) => println!("  skill {shown}: skipped, {e}"),
            }
        }
    }
}

/// The sub-folders of `dir` (not following links), sorted; none when it
/// cannot be read.
fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    out.sort();
    out
}

/// Refuses a source that is this home, or that is not hermes-agent's.
fn check_source(source: &Path, home: &Path) -> Result<(), CliError> {
    let same = match (source.canonicalize(), home.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(CliError::Config(format!(
            "{} is this hermes's own home: set HERMES_HOME to another folder to import into",
            source.display()
        )));
    }
    if !source.join("config.yaml").is_file() && !source.join("state.db").is_file() {
        return Err(CliError::Config(format!(
            "{} is not a hermes-agent home (no config.yaml, no state.db)",
            source.display()
        )));
    }
    Ok(())
}

/// hermes-agent's messages as ledger entries, each with its own time.
/// System messages and empty ones are not part of a ledger: counted in
/// `skipped`.
fn ledger(messages: &[AgentMessage], skipped: &mut usize) -> Vec<LedgerEntry> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let content = m.content.clone().filter(|c| !c.is_empty());
        let message = match m.role.as_str() {
            "user" => content.map(Message::user),
            "assistant" => {
                let tool_calls: Vec<ToolCall> = m
                    .tool_calls
                    .as_deref()
                    .and_then(|j| serde_json::from_str(j).ok())
                    .unwrap_or_default();
                (content.is_some() || !tool_calls.is_empty()).then_some(Message::Assistant {
                    content,
                    tool_calls,
                })
            }
            "tool" => m
                .tool_call_id
                .clone()
                .map(|id| Message::tool(id, content.unwrap_or_default())),
            _ => None,
        };
        match message {
            Some(message) => out.push(LedgerEntry::at(message, m.timestamp_ms)),
            None => *skipped += 1,
        }
    }
    out
}

/// The `§`-separated entries of a memory file (both programs use the
/// format); none when the file does not exist.
fn read_entries(path: &Path) -> Result<Vec<String>, CliError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::Runtime(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    Ok(text
        .split("\n§\n")
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty() && e != "§")
        .collect())
}
