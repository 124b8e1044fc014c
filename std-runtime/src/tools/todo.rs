//! `todo`: a task list for the current session.
//!
//! The list lives in memory only: it helps the model plan a multi-step task
//! within one session and is not worth persisting. It belongs to the
//! session, not to the tool: a front-end that rebuilds the registry during a
//! session (the gateway evicting a cached agent, SPEC G4) hands the same
//! [`TodoState`] to every rebuild through `ToolEnv::todo_state`, and a new
//! one on `/new`. Without one, each tool instance keeps its own list.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::{failed, parse_args, spec};

use crate::sync::lock;

/// Items beyond this are refused: a plan that long is not a plan.
const MAX_ITEMS: usize = 100;

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Pending => "[ ]",
            Status::InProgress => "[~]",
            Status::Completed => "[x]",
            Status::Cancelled => "[-]",
        }
    }
}

#[derive(Debug, Clone)]
struct Item {
    id: u32,
    text: String,
    status: Status,
}

#[derive(Debug)]
struct State {
    items: Vec<Item>,
    next_id: u32,
}

/// One session's todo list, shared by every `todo` tool built for that
/// session. Create one per session and drop it (or make a new one) when the
/// session resets.
#[derive(Debug)]
pub struct TodoState(Mutex<State>);

impl Default for TodoState {
    fn default() -> Self {
        Self::new()
    }
}

impl TodoState {
    /// An empty list.
    pub fn new() -> Self {
        TodoState(Mutex::new(State {
            items: Vec::new(),
            next_id: 1,
        }))
    }
}

/// A per-session task list.
#[derive(Debug)]
pub struct TodoTool {
    spec: ToolSpec,
    state: Arc<TodoState>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Action {
    List,
    Add,
    Update,
    Clear,
}

#[derive(Deserialize)]
pub(super) struct TodoArgs {
    action: Action,
    #[serde(default)]
    items: Option<Vec<String>>,
    #[serde(default)]
    id: Option<u32>,
    #[serde(default)]
    status: Option<Status>,
    #[serde(default)]
    text: Option<String>,
}

impl Default for TodoTool {
    fn default() -> Self {
        Self::new()
    }
}

impl TodoTool {
    /// A tool with a list of its own.
    pub fn new() -> Self {
        Self::with_state(Arc::new(TodoState::new()))
    }

    /// A tool working on `state`, which outlives it.
    pub fn with_state(state: Arc<TodoState>) -> Self {
        TodoTool {
            spec: spec(
                "todo",
                "Keep a task list for this session to plan multi-step work. action 'list'; \
                 'add' with items (list of strings); 'update' with id and status \
                 (pending|in_progress|completed|cancelled) and/or text; 'clear' removes all.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["list", "add", "update", "clear"]},
                        "items": {"type": "array", "items": {"type": "string"}, "description": "Tasks to add (add)."},
                        "id": {"type": "integer", "description": "The task to update (update)."},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
                        "text": {"type": "string", "description": "New wording of the task (update)."}
                    },
                    "required": ["action"]
                }"#,
                ),
            ),
            state,
        }
    }
}

fn render(items: &[Item]) -> String {
    if items.is_empty() {
        return "Todo list is empty.".into();
    }
    let done = items
        .iter()
        .filter(|i| i.status == Status::Completed)
        .count();
    let mut out = format!("Todo ({done}/{} done):", items.len());
    // Every call renders the whole list: its pieces pushed, not a
    // `format!` and a copy a line (a 20-turn one-shot adding an item a turn
    // spent 10 k instructions a turn here).
    out.reserve(items.iter().map(|i| i.text.len() + 16).sum());
    for item in items {
        out.push('\n');
        out.push_str(item.status.mark());
        out.push(' ');
        // Writing to a String cannot fail.
        let _ = write!(out, "{}. ", item.id);
        out.push_str(&item.text);
    }
    out
}

impl Tool for TodoTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: TodoArgs = parse_args("todo", arguments)?;
        let mut state = lock(&self.state.0);
        match args.action {
            Action::List => {}
            Action::Add => {
                let items = args.items.filter(|v| !v.is_empty()).ok_or_else(|| {
                    failed("Error: 'items' (a non-empty list of strings) is required for add.")
                })?;
                let items: Vec<String> = items
                    .into_iter()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
                if items.is_empty() {
                    return Err(failed("Error: every item in 'items' is empty."));
                }
                if state.items.len().saturating_add(items.len()) > MAX_ITEMS {
                    return Err(failed(format!(
                        "Error: the list would exceed {MAX_ITEMS} items; clear finished ones first."
                    )));
                }
                for text in items {
                    let id = state.next_id;
                    state.next_id = state.next_id.saturating_add(1);
                    state.items.push(Item {
                        id,
                        text,
                        status: Status::Pending,
                    });
                }
            }
            Action::Update => {
                let id = args
                    .id
                    .ok_or_else(|| failed("Error: 'id' is required for update."))?;
                if args.status.is_none() && args.text.is_none() {
                    return Err(failed("Error: update needs 'status' and/or 'text'."));
                }
                let new_text = args.text.map(|t| t.trim().to_string());
                if new_text.as_deref() == Some("") {
                    return Err(failed("Error: 'text' must not be empty."));
                }
                let known: Vec<String> = state.items.iter().map(|i| i.id.to_string()).collect();
                let Some(item) = state.items.iter_mut().find(|i| i.id == id) else {
                    return Err(failed(format!(
                        "Error: no task with id {id}. Known ids: {}.",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                };
                if let Some(status) = args.status {
                    item.status = status;
                }
                if let Some(text) = new_text {
                    item.text = text;
                }
            }
            Action::Clear => {
                state.items.clear();
                state.next_id = 1;
            }
        }
        Ok(render(&state.items))
    }
}
