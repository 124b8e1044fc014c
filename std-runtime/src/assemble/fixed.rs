//! The fixed part of every request — the system prompt and the tool
//! definitions — fitted to the model's window (issue 38).
//!
//! Every request carries it before the user has said a word; with the
//! 4096-token window of a default Ollama, LM Studio or `llama-server -c
//! 4096` the full set would leave no room for the conversation. When it
//! takes more than [`FIXED_SHARE_PCT`] % of the window (hermes's own
//! estimate), it is shrunk in this order, stopping as soon as it fits:
//!
//! 1. **compact definitions**: each tool's description cut to its first
//!    sentence, the parameters' descriptions dropped (names, types, enums
//!    and `required` stay);
//! 2. **the lean toolset** ([`LEAN_TOOLS`]: the file tools, the terminal,
//!    web, memory) — only when the user did not choose toolsets: a choice
//!    made with `--toolsets` or `[agent] toolsets` is kept as made.
//!
//! Never silently: [`Fitted::notice`] is the one line the front-ends log,
//! naming what was left out and how to bring it back.

use hermes_core::context::estimate::fixed_tokens;
use hermes_core::{SchemaText, ToolRegistry, ToolSpec};

use crate::config::Settings;
use crate::prompt::PromptSources;

/// The share of the window the fixed part may take before it is shrunk.
pub const FIXED_SHARE_PCT: u64 = 40;

/// The tools kept for a small window: reading and editing files, the
/// terminal, the web, memory.
pub const LEAN_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "terminal",
    "web_fetch",
    "web_search",
    "memory",
];

/// What fitting did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fitted {
    /// The window, in tokens.
    pub window: u32,
    /// The fixed part before, estimated in tokens.
    pub before: u64,
    /// The fixed part after.
    pub after: u64,
    /// The tools left out, in registration order.
    pub left_out: Vec<String>,
}

impl Fitted {
    /// The one line that says what was shrunk and how to undo it.
    pub fn notice(&self) -> String {
        let left_out = if self.left_out.is_empty() {
            String::new()
        } else {
            format!("; left out: {}", self.left_out.join(", "))
        };
        format!(
            "the system prompt and tool definitions took ~{} of the model's {} tokens, so tool \
             descriptions are shortened{left_out} (now ~{} tokens). Bring tools back with \
             --toolsets (e.g. --toolsets file,terminal,todo) or give the model a larger context \
             on the server (Ollama: num_ctx; llama.cpp: -c)",
            self.before, self.window, self.after
        )
    }
}

/// The fixed part's estimated tokens with `tools` as offered.
pub fn fixed_prompt_tokens(settings: &Settings, tools: &[ToolSpec]) -> u64 {
    fixed_tokens(&super::session_prompt(settings, tools), tools)
}

/// Shrinks `tools` (see the module docs) when the fixed part takes more
/// than [`FIXED_SHARE_PCT`] % of `window`; `None` when it already fits.
pub fn fit_tools(settings: &Settings, tools: &mut ToolRegistry, window: u32) -> Option<Fitted> {
    fit_tools_measured(settings, tools, window).0
}

/// The system prompt rendered for the tools as fitted, and the fixed
/// part's estimate with them: what [`super::session_prompt`] and
/// `Agent::with_context` would make again (a session's start renders and
/// measures both once, issue 39).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    /// The system prompt.
    pub prompt: String,
    /// `fixed_tokens` of the prompt and the tools.
    pub fixed_tokens: u64,
}

/// [`fit_tools`], also answering what the last estimate measured.
pub fn fit_tools_measured(
    settings: &Settings,
    tools: &mut ToolRegistry,
    window: u32,
) -> (Option<Fitted>, Measured) {
    // The prompt's files are read once for the (up to three) estimates.
    let sources = PromptSources::new(&settings.home, &settings.workdir).read();
    let estimate = |tools: &[ToolSpec]| {
        let prompt = sources.render(tools);
        let fixed_tokens = fixed_tokens(&prompt, tools);
        Measured {
            prompt,
            fixed_tokens,
        }
    };
    let limit = u64::from(window) * FIXED_SHARE_PCT / 100;
    let before = estimate(tools.specs());
    if before.fixed_tokens <= limit || tools.is_empty() {
        return (None, before);
    }
    tools.map_specs(compact);
    let mut after = estimate(tools.specs());
    let mut left_out = Vec::new();
    if after.fixed_tokens > limit && settings.toolsets.is_none() {
        tools.retain(|spec| {
            let keep = LEAN_TOOLS.contains(&spec.name.as_str());
            if !keep {
                left_out.push(spec.name.clone());
            }
            keep
        });
        after = estimate(tools.specs());
    }
    let fitted = Fitted {
        window,
        before: before.fixed_tokens,
        after: after.fixed_tokens,
        left_out,
    };
    (Some(fitted), after)
}

/// The compact form of a definition: the description's first sentence,
/// the parameters without their descriptions.
pub fn compact(spec: &mut ToolSpec) {
    spec.description = crate::prompt::first_sentence(&spec.description).to_owned();
    // JSON in, JSON out: members are dropped whole (the property test in
    // `schema_text` holds it to the tree form).
    spec.parameters = SchemaText::from_trusted(super::schema_text::without_descriptions(
        spec.parameters.as_str(),
    ));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// What fitting answers it measured is what the session's prompt and
    /// the agent's estimate make again from the fitted tools: when they
    /// fit, and when they were shrunk to nothing.
    #[test]
    fn the_measured_prompt_and_estimate_are_those_of_the_fitted_tools() {
        use crate::config::{self, Environment, Overrides};
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("SOUL.md"), "You are terse.\n").unwrap();
        let env = Environment::from_pairs([("HERMES_HOME", home.path().display().to_string())]);
        let overrides = Overrides {
            workdir: Some(home.path().to_owned()),
            ..Overrides::default()
        };
        let settings = config::load(&overrides, &env).unwrap();
        for (window, shrunk) in [(u32::MAX, false), (1, true)] {
            let mut tools = ToolRegistry::new();
            tools.register(Box::new(crate::tools::TodoTool::new()));
            let (fitted, measured) = fit_tools_measured(&settings, &mut tools, window);
            assert_eq!(fitted.is_some(), shrunk, "{window}");
            assert_eq!(tools.is_empty(), shrunk, "{window}");
            assert_eq!(
                measured,
                Measured {
                    prompt: crate::assemble::session_prompt(&settings, tools.specs()),
                    fixed_tokens: fixed_prompt_tokens(&settings, tools.specs()),
                }
            );
            assert!(measured.prompt.contains("You are terse."));
            if let Some(f) = fitted {
                assert_eq!(f.after, measured.fixed_tokens);
            }
        }
    }

    #[test]
    fn the_compact_form_keeps_names_types_and_requirements() {
        let mut spec = ToolSpec::new(
            "todo",
            "Keep a task list. action 'list'; 'add' with items.\nMore.",
            json!({"type": "object", "properties": {
                "action": {"type": "string", "enum": ["list", "add"], "description": "what to do"},
                "items": {"type": "array", "items": {"type": "string", "description": "one"},
                          "description": "the items"}},
                "required": ["action"]}),
        );
        compact(&mut spec);
        assert_eq!(spec.description, "Keep a task list.");
        assert_eq!(
            spec.schema(),
            json!({"type": "object", "properties": {
                "action": {"type": "string", "enum": ["list", "add"]},
                "items": {"type": "array", "items": {"type": "string"}}},
                "required": ["action"]})
        );
    }

    #[test]
    fn a_parameter_named_description_stays_and_the_tools_own_copy_is_untouched() {
        let mut spec = ToolSpec::new(
            "skill_manage",
            "Write a skill.",
            json!({"type": "object", "description": "top", "properties": {
                "description": {"type": "string", "description": "the skill's line"},
                "files": {"type": "object", "description": "more", "properties": {
                    "path": {"type": "string", "description": "where"}}}}}),
        );
        let shared = spec.parameters.clone();
        compact(&mut spec);
        assert_eq!(
            spec.schema(),
            json!({"type": "object", "description": "top", "properties": {
                "description": {"type": "string"},
                "files": {"type": "object", "properties": {"path": {"type": "string"}}}}})
        );
        let shared = shared.to_value();
        assert_eq!(shared["properties"]["files"]["description"], "more");
    }
}
