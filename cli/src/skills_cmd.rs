//! `hermes skills`: the user's side of the skills in `$HERMES_HOME/skills`
//! (SPEC Y8). Every change goes through [`SkillsHome`], so it is checked
//! and kept undoable exactly as the agent's own `skill_manage` changes are.

use hermes_runtime::config::{self, Environment};
use hermes_runtime::skills::SkillsHome;

use crate::app::CliError;
use crate::args::SkillsCommand;

/// Runs one `hermes skills` subcommand. Needs only `$HERMES_HOME`, not a
/// provider or a valid configuration.
pub fn run(command: SkillsCommand) -> Result<i32, CliError> {
    let home = config::hermes_home(&Environment::from_process())
        .map_err(|e| CliError::Config(e.to_string()))?;
    let skills = SkillsHome::new(&home);
    let refused = |e: hermes_runtime::skills::SkillError| CliError::Config(e.to_string());
    match command {
        SkillsCommand::List => {
            let list = skills.list();
            if list.is_empty() {
                println!(
                    "No skills in {}. Install one with `hermes skills install PATH`.",
                    skills.path().display()
                );
            }
            for s in list {
                println!("{}  {}", s.name, s.description);
                if let Some(p) = s.problem {
                    println!("  needs fixing: {p}");
                }
            }
        }
        SkillsCommand::Show { name } => {
            let skill = skills.view(&name).map_err(refused)?;
            print!("{}", skill.skill_md);
            if !skill.skill_md.ends_with('\n') {
                println!();
            }
            if !skill.files.is_empty() {
                println!("\nFiles: {}", skill.files.join(", "));
            }
        }
        SkillsCommand::Install { path } => {
            let name = skills.install(&path).map_err(refused)?;
            println!(
                "Installed skill '{name}' into {}; new sessions list it.",
                skills.path().join(&name).display()
            );
        }
        SkillsCommand::Remove { name } => println!("{}", skills.delete(&name).map_err(refused)?),
        SkillsCommand::Restore { name } => {
            let undone = skills.restore(&name).map_err(refused)?;
            println!("Restored skill '{name}': undid {undone}.");
        }
    }
    Ok(0)
}
