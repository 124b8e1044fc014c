//! The `Tool` trait and the registry that dispatches calls by name (SPEC L2, L8).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::budget::IterationBudget;
use crate::interrupt::InterruptFlag;

pub mod batch;
pub mod schema_text;

pub use schema_text::SchemaText;

/// A tool's definition as offered to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object, as the compact JSON text the
    /// request carries: a run sends its tools' schemas and seldom reads
    /// them, so they are not built as trees at every start (issue 39;
    /// [`schema`](Self::schema) parses one when asked). The request
    /// encoders write each definition themselves, this text as it is.
    pub parameters: SchemaText,
}

impl ToolSpec {
    /// A definition whose schema is a built value (an MCP server's, a
    /// test's).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: SchemaText::from_value(&parameters),
        }
    }

    /// The schema as a value, parsed from its text.
    pub fn schema(&self) -> serde_json::Value {
        self.parameters.to_value()
    }
}

/// A tool call that did not produce a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolError {
    /// The model should read this (bad arguments, file not found, command
    /// failed): it becomes the tool result and the loop goes on.
    Failed(String),
    /// The turn cannot go on (the tool found the environment unusable): the
    /// loop answers the remaining calls with a placeholder and stops.
    Abort(String),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Failed(m) => write!(f, "{m}"),
            ToolError::Abort(m) => write!(f, "aborted: {m}"),
        }
    }
}

impl core::error::Error for ToolError {}

/// What a tool may see of the run that called it.
#[derive(Debug)]
pub struct ToolContext<'a> {
    /// The run's wallet. A tool that starts a sub-agent hands it a clone, so
    /// the child draws from the parent's budget (SPEC L3).
    pub budget: &'a IterationBudget,
    /// The run's interrupt flag; long tools should poll it.
    pub interrupt: &'a InterruptFlag,
    /// The id of the call being answered.
    pub tool_call_id: &'a str,
}

/// Something the model can call.
pub trait Tool: Send + Sync {
    /// Name, description and argument schema.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. `arguments` is the raw JSON string the model wrote; the
    /// loop has already checked that it is valid JSON.
    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError>;

    /// Whether the tool only reads (files, the web, a search index) and
    /// changes nothing: a model turn whose calls are all read-only may run
    /// them at the same time (SPEC Y6). `false` unless a tool says so; a
    /// tool that writes, runs commands or starts agents must not.
    fn read_only(&self) -> bool {
        false
    }
}

/// Where a tool output too long for the model's context is kept whole
/// (SPEC Y6), so the loop's cap never loses it: the host saves the output
/// and says where it is, and the model gets the head, the tail and that
/// place (which the host's file tools must be able to read in ranges).
pub trait OutputKeeper: Send + Sync {
    /// Saves `output`, produced by `tool`, and says where the whole of it
    /// is — which may be an earlier file when `output` is itself already
    /// a cut of a kept one. `None` when it could not be saved (the output
    /// is then cut as without a keeper).
    fn keep(&self, tool: &str, output: &str) -> Option<KeptOutput>;
}

/// Where an [`OutputKeeper`] put a whole output, and its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptOutput {
    /// The path (or another name the model can read it by).
    pub place: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its number of lines (newlines).
    pub lines: u64,
}

/// The tools of one agent, dispatched by name.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<Box<dyn Tool>>,
    /// Cached definitions, in registration order: built once, borrowed by every request.
    specs: Vec<ToolSpec>,
    /// Where over-long outputs are kept ([`OutputKeeper`]); `None`: they
    /// are cut.
    keeper: Option<Arc<dyn OutputKeeper>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.specs.iter().map(|s| &s.name))
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Adds a tool. A tool with the same name replaces the earlier one, so a
    /// name always means one tool.
    pub fn register(&mut self, tool: Box<dyn Tool>) {
        let spec = tool.spec().clone();
        if let Some(pos) = self.specs.iter().position(|s| s.name == spec.name) {
            self.tools[pos] = tool;
            self.specs[pos] = spec;
        } else {
            self.tools.push(tool);
            self.specs.push(spec);
        }
    }

    /// Keeps outputs over the loop's cap with `keeper` instead of only
    /// cutting them.
    pub fn set_output_keeper(&mut self, keeper: Arc<dyn OutputKeeper>) {
        self.keeper = Some(keeper);
    }

    /// Where outputs over the loop's cap are kept, if anywhere.
    pub fn output_keeper(&self) -> Option<&dyn OutputKeeper> {
        self.keeper.as_deref()
    }

    /// Builder form of [`register`](Self::register).
    pub fn with(mut self, tool: impl Tool + 'static) -> Self {
        self.register(Box::new(tool));
        self
    }

    /// Rewrites the definitions sent to the model (a shorter form for a
    /// small window); the tools and their names stay as they are.
    pub fn map_specs(&mut self, mut rewrite: impl FnMut(&mut ToolSpec)) {
        for spec in &mut self.specs {
            let name = spec.name.clone();
            rewrite(spec);
            spec.name = name;
        }
    }

    /// Keeps only the tools whose definition `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&ToolSpec) -> bool) {
        let mut i = 0;
        while i < self.specs.len() {
            if keep(&self.specs[i]) {
                i += 1;
            } else {
                self.specs.remove(i);
                self.tools.remove(i);
            }
        }
    }

    /// The definitions to send to the model.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        let pos = self.specs.iter().position(|s| s.name == name)?;
        self.tools.get(pos).map(|t| &**t)
    }

    /// Whether `name` is a registered tool that declares itself read-only.
    pub fn is_read_only(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.read_only())
    }

    /// Names of all tools, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.specs.iter().map(|s| s.name.as_str())
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Runs the call `name(arguments)`. Unknown tools and arguments that are
    /// not a JSON object come back as [`ToolError::Failed`] with a message the
    /// model can act on (SPEC L8). That message also says the arguments are
    /// shown as `{}` in the conversation: the request encoder never sends
    /// such arguments back to the provider ([`crate::codec::request`]). An
    /// empty argument string counts as `{}`, since several providers send
    /// that for tools without parameters.
    pub fn dispatch(
        &self,
        name: &str,
        arguments: &str,
        ctx: &ToolContext<'_>,
    ) -> Result<String, ToolError> {
        let Some(tool) = self.get(name) else {
            let mut known = String::new();
            for (i, n) in self.names().enumerate() {
                if i > 0 {
                    known.push_str(", ");
                }
                known.push_str(n);
            }
            return Err(ToolError::Failed(format!(
                "Error: unknown tool '{name}'. Available tools: {known}."
            )));
        };
        let arguments = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let problem = match serde_json::from_str::<serde::de::IgnoredAny>(arguments) {
            Err(e) => Some(format!("are not valid JSON ({e})")),
            // Valid JSON that starts with `{` is an object (no second parse).
            Ok(_) if !arguments.trim_start().starts_with('{') => {
                Some("are valid JSON but not an object".into())
            }
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            return Err(ToolError::Failed(format!(
                "Error: the arguments for tool '{name}' {problem}; they are shown as {{}} in \
                 this conversation. Call it again with a JSON object matching its schema."
            )));
        }
        tool.call(arguments, ctx)
    }
}
