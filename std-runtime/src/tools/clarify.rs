//! The `clarify` tool (issue 46; hermes-agent's schema): the agent asks the
//! user a question, optionally with up to [`MAX_CHOICES`] choices (the user
//! may always answer in their own words, "other"), and the turn waits for
//! the answer.
//!
//! Offered only by front-ends where someone can answer ([`Clarifier`]): the
//! gateway's chats (an inline keyboard on Telegram, numbered options
//! elsewhere) and the interactive CLI (a numbered picker). Cron runs,
//! webhooks, the API server and sub-agents have nobody to ask and never see
//! the tool.

use std::sync::Arc;
use std::time::Duration;

use hermes_core::{InterruptFlag, Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;
use serde_json::json;

use super::{bounded_spec, failed, parse_args};

/// The tool's name (and its toolset's).
pub const NAME: &str = "clarify";

/// The most choices a question offers (besides answering in one's own words).
pub const MAX_CHOICES: usize = 4;

/// The longest question, in characters (a chat message, not an essay).
pub const MAX_QUESTION_CHARS: usize = 1_000;

/// The longest choice, in characters (a button label).
pub const MAX_CHOICE_CHARS: usize = 100;

/// How long a question waits by default (`[agent] clarify_timeout`).
pub const DEFAULT_CLARIFY_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether the configured toolsets (`None`: all) include `clarify`.
pub fn offered(toolsets: Option<&[String]>) -> bool {
    toolsets.is_none_or(|t| t.iter().any(|n| n == NAME))
}

/// A question for the user, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// The question itself.
    pub text: String,
    /// At most [`MAX_CHOICES`] distinct, non-empty choices; empty for an
    /// open question.
    pub choices: Vec<String>,
}

impl Question {
    /// The question as numbered text: what platforms without buttons show
    /// (and what the CLI prints).
    pub fn numbered_text(&self) -> String {
        let mut text = format!("❓ {}", self.text);
        if self.choices.is_empty() {
            text.push_str("\n\nReply with your answer.");
            return text;
        }
        text.push('\n');
        for (i, choice) in self.choices.iter().enumerate() {
            text.push_str(&format!("\n{}. {choice}", i + 1));
        }
        text.push_str(&format!(
            "\n\nReply with a number (1–{}), or write your own answer.",
            self.choices.len()
        ));
        text
    }

    /// What a reply `text` means: a number picks its choice, anything else
    /// is the user's own answer. `Err` (a sentence for the user) for a
    /// number that matches no choice.
    pub fn interpret(&self, text: &str) -> Result<Answer, String> {
        let trimmed = text.trim().trim_end_matches('.');
        if let Ok(n) = trimmed.parse::<usize>() {
            if self.choices.is_empty() {
                return Ok(Answer::Own(trimmed.to_owned()));
            }
            return match n.checked_sub(1).and_then(|i| self.choices.get(i)) {
                Some(choice) => Ok(Answer::Choice(n - 1, choice.clone())),
                None => Err(format!(
                    "{n} is not one of the options: answer with a number from 1 to {}, or in your own words.",
                    self.choices.len()
                )),
            };
        }
        Ok(Answer::Own(text.trim().to_owned()))
    }
}

/// The user's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// They picked choice `.0` (from 0), whose text is `.1`.
    Choice(usize, String),
    /// They wrote their own answer.
    Own(String),
}

/// Why a question got no answer; each is a sentence for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nobody is there to answer (a one-shot run without a terminal).
    NobodyToAsk(String),
    /// The wait ended: a timeout, an interrupt, another message.
    Ended(String),
}

/// How the front-end asks the user a question and waits for the answer.
pub trait Clarifier: Send + Sync {
    /// Asks `question` and blocks until it is answered, the wait ends
    /// (timeout, a message that is not an answer) or `interrupt` is set.
    fn ask(&self, question: &Question, interrupt: &InterruptFlag) -> Result<Answer, NoAnswer>;
}

#[derive(Deserialize)]
struct Args {
    question: String,
    #[serde(default)]
    choices: Option<Vec<String>>,
}

/// Checks the model's arguments: a question, at most four distinct choices.
fn question_of(args: Args) -> Result<Question, String> {
    let text = args.question.trim().to_owned();
    if text.is_empty() {
        return Err("Error: the question is empty; write the question to ask.".into());
    }
    if text.chars().count() > MAX_QUESTION_CHARS {
        return Err(format!(
            "Error: the question is longer than {MAX_QUESTION_CHARS} characters; ask it shorter."
        ));
    }
    let mut choices: Vec<String> = Vec::new();
    for choice in args.choices.unwrap_or_default() {
        let choice = choice.trim().to_owned();
        if choice.is_empty() || choices.contains(&choice) {
            continue;
        }
        if choice.chars().count() > MAX_CHOICE_CHARS {
            return Err(format!(
                "Error: a choice is longer than {MAX_CHOICE_CHARS} characters; keep choices short."
            ));
        }
        choices.push(choice);
    }
    if choices.len() > MAX_CHOICES {
        return Err(format!(
            "Error: {} choices given; offer at most {MAX_CHOICES} (the user can always answer \
             in their own words).",
            choices.len()
        ));
    }
    Ok(Question { text, choices })
}

/// The `clarify` tool of one session.
pub struct ClarifyTool {
    spec: ToolSpec,
    clarifier: Arc<dyn Clarifier>,
}

impl std::fmt::Debug for ClarifyTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClarifyTool").finish_non_exhaustive()
    }
}

impl ClarifyTool {
    /// The tool asking through `clarifier`.
    pub fn new(clarifier: Arc<dyn Clarifier>) -> Self {
        ClarifyTool {
            spec: bounded_spec(
                NAME,
                "Ask the user a question when you need clarification, feedback, or a decision \
                 before proceeding. Provide up to 4 choices; the user picks one or types their \
                 own answer ('other'). List the choice you recommend first. Omit choices for an \
                 open-ended question.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "question": {
                            "type": "string",
                            "description": "The question itself, and only the question: do not embed the options here."
                        },
                        "choices": {
                            "type": "array",
                            "maxItems": 4,
                            "items": {"type": "string"},
                            "description": "Up to 4 selectable choices. Omit for open-ended."
                        }
                    },
                    "required": ["question"]
                }"#,
                ),
                &[("choices", "maxItems", MAX_CHOICES as u64)],
            ),
            clarifier,
        }
    }
}

impl Tool for ClarifyTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: Args = parse_args(NAME, arguments)?;
        let question = question_of(args).map_err(failed)?;
        let (response, choice) = match self.clarifier.ask(&question, ctx.interrupt) {
            Ok(Answer::Choice(i, text)) => (text, Some(i + 1)),
            Ok(Answer::Own(text)) => (text, None),
            Err(NoAnswer::NobodyToAsk(why) | NoAnswer::Ended(why)) => {
                return Err(failed(format!(
                    "The user did not answer: {why}. Decide yourself or ask in your reply."
                )));
            }
        };
        Ok(json!({
            "question": question.text,
            "choices_offered": question.choices,
            "user_response": response,
            "choice_number": choice,
        })
        .to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hermes_core::IterationBudget;
    use std::sync::Mutex;

    struct Scripted {
        reply: Mutex<Option<Result<String, NoAnswer>>>,
        asked: Mutex<Vec<Question>>,
    }

    impl Clarifier for Scripted {
        fn ask(&self, q: &Question, _: &InterruptFlag) -> Result<Answer, NoAnswer> {
            self.asked.lock().unwrap().push(q.clone());
            let reply = self.reply.lock().unwrap().take().unwrap();
            reply.map(|text| q.interpret(&text).unwrap())
        }
    }

    fn call(tool: &ClarifyTool, args: &str) -> Result<String, ToolError> {
        let budget = IterationBudget::new(5);
        let interrupt = InterruptFlag::new();
        tool.call(
            args,
            &ToolContext {
                budget: &budget,
                interrupt: &interrupt,
                tool_call_id: "c1",
            },
        )
    }

    fn tool(reply: Result<&str, NoAnswer>) -> (ClarifyTool, Arc<Scripted>) {
        let s = Arc::new(Scripted {
            reply: Mutex::new(Some(reply.map(str::to_owned))),
            asked: Mutex::default(),
        });
        (ClarifyTool::new(s.clone()), s)
    }

    #[test]
    fn a_number_picks_its_choice_and_words_are_the_users_own() {
        let (t, s) = tool(Ok("2"));
        let out = call(&t, r#"{"question":"Which?","choices":["a"," b ","a",""]}"#).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["user_response"], "b");
        assert_eq!(v["choice_number"], 2);
        assert_eq!(s.asked.lock().unwrap()[0].choices, ["a", "b"]);

        let (t, _) = tool(Ok("neither, use c"));
        let out = call(&t, r#"{"question":"Which?","choices":["a","b"]}"#).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["user_response"], "neither, use c");
        assert!(v["choice_number"].is_null());
    }

    #[test]
    fn bad_questions_are_refused_before_anyone_is_asked() {
        for args in [
            r#"{"question":"  "}"#,
            r#"{"question":"q","choices":["1","2","3","4","5"]}"#,
        ] {
            let (t, s) = tool(Ok("1"));
            let e = call(&t, args).unwrap_err().to_string();
            assert!(e.contains("Error"), "{e}");
            assert!(s.asked.lock().unwrap().is_empty());
        }
    }

    #[test]
    fn no_answer_is_a_clear_result() {
        let (t, _) = tool(Err(NoAnswer::NobodyToAsk(
            "no one is at a terminal to answer".into(),
        )));
        let e = call(&t, r#"{"question":"q"}"#).unwrap_err().to_string();
        assert!(e.contains("did not answer") && e.contains("no one"), "{e}");
    }

    #[test]
    fn numbers_outside_the_options_are_refused_with_the_range() {
        let q = Question {
            text: "q".into(),
            choices: vec!["a".into(), "b".into()],
        };
        assert_eq!(q.interpret(" 1 ").unwrap(), Answer::Choice(0, "a".into()));
        let e = q.interpret("7").unwrap_err();
        assert!(e.contains("1 to 2"), "{e}");
        assert!(q.interpret("0").is_err());
        let text = q.numbered_text();
        assert!(text.contains("1. a\n2. b"), "{text}");
    }
}
