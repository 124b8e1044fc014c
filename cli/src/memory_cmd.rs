//! `hermes memory`: the owner's view of every chat user's memory (issue
//! 44). Each user's `MEMORY.md` and `USER.md` are theirs
//! ([`hermes_runtime::memory_scope`]); these commands read, edit and erase
//! them by `PLATFORM:USER_ID`, never guessing a folder from a raw id.

use hermes_runtime::config::Settings;
use hermes_runtime::memory_scope::{self, MemorySettings, parse_identity};

use crate::app::CliError;
use crate::args::MemoryCommand;

/// Runs one `hermes memory` subcommand.
pub fn run(settings: &Settings, command: MemoryCommand) -> Result<i32, CliError> {
    let memory = MemorySettings::from_config(&settings.file, settings.var("HERMES_MEMORY_OWNER"))
        .map_err(|e| CliError::Config(e.to_string()))?;
    let home = &settings.home;
    let place = |id: &str| match parse_identity(id) {
        Some((platform, user)) => Ok(memory.place(home, platform, user)),
        None => Err(CliError::Config(format!(
            "'{id}' is not PLATFORM:USER_ID (e.g. telegram:123456); `hermes memory list` names them"
        ))),
    };
    match command {
        MemoryCommand::List => {
            let users = memory_scope::list_users(home, &memory);
            if users.is_empty() {
                println!("No chat user has a memory yet.");
            }
            for user in users {
                let owner = memory.owner.as_deref() == Some(user.as_str());
                println!("{user}{}", if owner { "  (owner)" } else { "" });
            }
        }
        MemoryCommand::Show { id } => match memory_scope::show(&place(&id)?) {
            Some(text) => println!("{text}"),
            None => println!("No memory for {id}."),
        },
        MemoryCommand::Edit { id, profile } => {
            let dir = place(&id)?.dir;
            let file = dir.join(if profile { "USER.md" } else { "MEMORY.md" });
            std::fs::create_dir_all(&dir).map_err(|e| CliError::Config(e.to_string()))?;
            let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".to_owned());
            let status = std::process::Command::new(&editor)
                .arg(&file)
                .status()
                .map_err(|e| CliError::Config(format!("cannot start {editor}: {e}")))?;
            return Ok(if status.success() { 0 } else { 1 });
        }
        MemoryCommand::Forget { id } => {
            let n = memory_scope::forget(&place(&id)?)
                .map_err(|e| CliError::Config(format!("cannot erase {id}'s memory: {e}")))?;
            println!("Forgot {id}'s memory ({n} files removed).");
        }
    }
    Ok(0)
}
