//! `skills_list`, `skill_view`, `skill_manage` (SPEC Y8): the agent's way to
//! find, read and write skills. The rules (confinement, sizes, history)
//! live in [`crate::skills`]; these tools turn arguments into calls and
//! errors into model-facing text.

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::{failed, parse_args, spec};
use crate::skills::{SkillError, SkillsHome};
use crate::spill::cap_result;

fn refused(e: SkillError) -> ToolError {
    failed(format!("Error: {e}. Nothing was changed."))
}

/// `skills_list`: every skill's name, description and category.
#[derive(Debug)]
pub struct SkillsListTool {
    spec: ToolSpec,
    home: SkillsHome,
}

impl SkillsListTool {
    /// The skills of `home`.
    pub fn new(home: SkillsHome) -> Self {
        SkillsListTool {
            spec: spec(
                "skills_list",
                "List the saved skills (name, description, category). Load one with skill_view \
                 before following it.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "category": {"type": "string", "description": "Only skills whose metadata.category is this."}
                    }
                }"#,
                ),
            ),
            home,
        }
    }
}

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default)]
    category: Option<String>,
}

impl Tool for SkillsListTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: ListArgs = parse_args("skills_list", arguments)?;
        let skills: Vec<_> = self
            .home
            .list()
            .into_iter()
            .filter(|s| {
                args.category
                    .as_deref()
                    .is_none_or(|c| s.category.as_deref() == Some(c))
            })
            .collect();
        if skills.is_empty() {
            return Ok("No skills saved yet (skill_manage action 'create' saves one).".into());
        }
        let mut out = format!("{} skills:\n", skills.len());
        for s in skills {
            out.push_str(&format!("- {}: {}", s.name, s.description));
            if let Some(c) = &s.category {
                out.push_str(&format!(" [category: {c}]"));
            }
            if let Some(p) = &s.problem {
                out.push_str(&format!(" (needs fixing: {p})"));
            }
            out.push('\n');
        }
        Ok(out.trim_end().to_owned())
    }
}

/// `skill_view`: a skill's `SKILL.md` and its list of files, or one file.
#[derive(Debug)]
pub struct SkillViewTool {
    spec: ToolSpec,
    home: SkillsHome,
    cap: usize,
}

impl SkillViewTool {
    /// The skills of `home`; results capped at `cap` bytes.
    pub fn new(home: SkillsHome, cap: usize) -> Self {
        SkillViewTool {
            spec: spec(
                "skill_view",
                "Load a skill: its SKILL.md instructions and the list of its other files; with \
                 'file', one of those files (e.g. references/api.md). Nothing is run here: \
                 to run a skill's script, load it with 'file' and run its text with the \
                 terminal tool (sandboxed; its commands cannot see $HERMES_HOME).",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The skill's name, as skills_list shows it."},
                        "file": {"type": "string", "description": "A file inside the skill's folder, relative to it."}
                    },
                    "required": ["name"]
                }"#,
                ),
            ),
            home,
            cap,
        }
    }
}

#[derive(Deserialize)]
struct ViewArgs {
    name: String,
    #[serde(default)]
    file: Option<String>,
}

impl Tool for SkillViewTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: ViewArgs = parse_args("skill_view", arguments)?;
        let text = match args.file.as_deref() {
            Some(file) if file != "SKILL.md" => self
                .home
                .view_file(&args.name, file)
                .map_err(|e| failed(format!("Error: {e}.")))?,
            _ => {
                let skill = self
                    .home
                    .view(&args.name)
                    .map_err(|e| failed(format!("Error: {e}.")))?;
                let mut out = skill.skill_md;
                if !skill.files.is_empty() {
                    out.push_str(&format!(
                        "\n\n[Files of skill '{}' (read one with skill_view and 'file'; to run a \
                         script, run its text with the terminal tool): {}]",
                        args.name,
                        skill.files.join(", ")
                    ));
                }
                out
            }
        };
        Ok(cap_result(
            text,
            self.cap,
            "the skill is longer than a tool result may be",
        ))
    }
}

/// `skill_manage`: create, change and delete skills.
#[derive(Debug)]
pub struct SkillManageTool {
    spec: ToolSpec,
    home: SkillsHome,
}

impl SkillManageTool {
    /// Writes the skills of `home`.
    pub fn new(home: SkillsHome) -> Self {
        SkillManageTool {
            spec: spec(
                "skill_manage",
                "Save, improve or delete a skill: a reusable procedure in \
                 $HERMES_HOME/skills/NAME/SKILL.md. action 'create' (name, content: the whole \
                 SKILL.md: front matter '---' / 'name: NAME' / 'description: one line' / '---', \
                 then Markdown steps); 'edit' (name, content: replaces SKILL.md); 'patch' (name, \
                 old_string, new_string, optional file_path: replaces the one occurrence); \
                 'delete' (name); 'write_file' (name, file_path under references/, templates/, \
                 scripts/ or assets/, file_content); 'remove_file' (name, file_path). Names: \
                 lowercase letters, digits, hyphens. Every change keeps the previous version \
                 (the user can undo it with `hermes skills restore NAME`); skills appear in the \
                 system prompt from the next session on. Files written here are never run: a \
                 skill's scripts run only through the terminal tool (load the text with \
                 skill_view, run it there, in its sandbox).",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["create", "patch", "edit", "delete", "write_file", "remove_file"]},
                        "name": {"type": "string", "description": "The skill's name (its folder): a-z, 0-9, hyphens."},
                        "content": {"type": "string", "description": "The whole SKILL.md (create, edit)."},
                        "old_string": {"type": "string", "description": "Exact text to replace, occurring once (patch)."},
                        "new_string": {"type": "string", "description": "The replacement (patch)."},
                        "file_path": {"type": "string", "description": "A file in the skill, e.g. references/api.md (write_file, remove_file; patch: default SKILL.md)."},
                        "file_content": {"type": "string", "description": "The file's text (write_file)."}
                    },
                    "required": ["action", "name"]
                }"#
                ),
            ),
            home,
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Action {
    Create,
    Patch,
    Edit,
    Delete,
    WriteFile,
    RemoveFile,
}

#[derive(Deserialize)]
struct ManageArgs {
    action: Action,
    name: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    old_string: Option<String>,
    #[serde(default)]
    new_string: Option<String>,
    #[serde(default)]
    file_path: Option<String>,
    #[serde(default)]
    file_content: Option<String>,
}

fn required(value: Option<String>, field: &str, action: &str) -> Result<String, ToolError> {
    value.ok_or_else(|| {
        failed(format!(
            "Error: '{field}' is required for action '{action}'. Nothing was changed."
        ))
    })
}

impl Tool for SkillManageTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: ManageArgs = parse_args("skill_manage", arguments)?;
        let name = args.name.as_str();
        let done = match args.action {
            Action::Create => {
                let content = required(args.content, "content", "create")?;
                self.home.create(name, &content)
            }
            Action::Edit => {
                let content = required(args.content, "content", "edit")?;
                self.home.edit(name, &content)
            }
            Action::Patch => {
                let old = required(args.old_string, "old_string", "patch")?;
                let new = required(args.new_string, "new_string", "patch")?;
                self.home.patch(name, args.file_path.as_deref(), &old, &new)
            }
            Action::Delete => self.home.delete(name),
            Action::WriteFile => {
                let path = required(args.file_path, "file_path", "write_file")?;
                let content = required(args.file_content, "file_content", "write_file")?;
                self.home.write_file(name, &path, &content)
            }
            Action::RemoveFile => {
                let path = required(args.file_path, "file_path", "remove_file")?;
                self.home.remove_file(name, &path)
            }
        }
        .map_err(refused)?;
        Ok(format!(
            "{done} The previous version is kept (`hermes skills restore {name}` undoes this). \
             skill_view shows the new text now; the system prompt lists skills as they are at \
             the start of a session."
        ))
    }
}
