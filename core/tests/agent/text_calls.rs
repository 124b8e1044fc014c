//! Issue 38: tool calls written as text (the corpus of
//! `tests/fixtures/text-calls/`), and servers that ignore
//! `tool_choice: "none"`.

use super::*;

/// The corpus: what small local models write, and what it must become.
fn corpus() -> Vec<serde_json::Value> {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/text-calls/cases.json"
    ))
    .unwrap()
}

/// `text` streamed in pieces of at most five bytes (cut at char boundaries).
fn streamed(text: &str, calls: Vec<ToolCall>) -> Step {
    let text: &'static str = Box::leak(text.to_owned().into_boxed_str());
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + 5).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(&text[start..end]);
        start = end;
    }
    Step::Reply {
        finish: Some(if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }),
        pieces,
        calls,
    }
}

/// Runs `steps` against the tools `read_file` and `terminal`; returns the
/// outcome, the text the user was shown, and the model.
fn run_with(
    agent_of: impl FnOnce(Agent) -> Agent,
    steps: Vec<Step>,
) -> (RunOutcome, String, Arc<ScriptedModel>) {
    let model = ScriptedModel::new(steps);
    let tools = ToolRegistry::new()
        .with(echo("read_file"))
        .with(echo("terminal"));
    let agent = agent_of(agent(model.clone(), tools));
    let mut shown = String::new();
    let mut observer = FnObserver(|e: &AgentEvent<'_>| {
        if let AgentEvent::TextDelta(t) = e {
            shown.push_str(t);
        }
    });
    let budget = IterationBudget::new(agent.max_iterations());
    let out = agent.run("what is in notes.txt?", vec![], &budget, &mut observer);
    assert_valid_for_api(&out.messages);
    (out, shown, model)
}

#[test]
fn every_text_call_of_the_corpus_runs_and_every_text_stays_an_answer() {
    let cases = corpus();
    assert!(cases.len() >= 20);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let (out, shown, model) = run_with(
            |a| a,
            vec![streamed(text, vec![]), text_answer("It says hello.")],
        );
        match case["calls"].as_array() {
            Some(expected) => {
                let expected: Vec<&str> = expected.iter().map(|n| n.as_str().unwrap()).collect();
                assert_eq!(out.stop, StopReason::Completed, "{name}");
                assert_eq!(out.final_text, "It says hello.", "{name}");
                assert_eq!(
                    shown, "It says hello.",
                    "{name}: the call was shown as an answer"
                );
                // Recorded as a native call: no content, the calls, their results.
                let assistant = &out.messages[1].message;
                assert_eq!(assistant.content(), None, "{name}");
                let names: Vec<&str> = assistant
                    .tool_calls()
                    .iter()
                    .map(|c| c.function.name.as_str())
                    .collect();
                assert_eq!(names, expected, "{name}");
                // The next request carries them as the provider expects.
                let seen = model.seen.lock().unwrap();
                let wire = &seen[1].wire["messages"];
                assert_eq!(
                    wire[2]["tool_calls"].as_array().unwrap().len(),
                    expected.len(),
                    "{name}"
                );
                assert_eq!(wire[3]["role"], "tool", "{name}");
                assert!(
                    wire[3]["content"].as_str().unwrap().contains(" got {"),
                    "{name}"
                );
            }
            None => {
                assert_eq!(out.stop, StopReason::Completed, "{name}");
                assert_eq!(out.final_text, text, "{name}: the answer was changed");
                assert_eq!(shown, text, "{name}: the answer was not shown whole");
                assert_eq!(model.calls(), 1, "{name}: a tool ran");
                assert!(out.messages[1].message.tool_calls().is_empty(), "{name}");
            }
        }
    }
}

fn text_answer(s: &'static str) -> Step {
    text(s)
}

#[test]
fn a_json_example_in_an_answer_is_shown_and_not_run() {
    let answer = "To read a file I would send:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n```";
    let (out, shown, model) = run_with(|a| a, vec![streamed(answer, vec![])]);
    assert_eq!(out.final_text, answer);
    assert_eq!(shown, answer);
    assert_eq!(model.calls(), 1);
}

#[test]
fn text_calls_can_be_turned_off() {
    let call_text =
        "<tool_call>\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>";
    let (out, shown, model) = run_with(
        |a| a.with_text_tool_calls(false),
        vec![streamed(call_text, vec![])],
    );
    assert_eq!(out.final_text, call_text);
    assert_eq!(shown, call_text);
    assert_eq!(model.calls(), 1);
}

#[test]
fn a_text_call_to_a_tool_that_failed_is_answered_like_a_native_one() {
    // The same `read_file` the corpus uses, failing: the model reads the
    // error and answers.
    let model = ScriptedModel::new(vec![
        streamed(
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {}}</tool_call>",
            vec![],
        ),
        text("I could not read it."),
    ]);
    let tools = ToolRegistry::new().with(Failing(ToolSpec::new(
        "read_file",
        "reads",
        serde_json::json!({"type": "object"}),
    )));
    let out = agent(model.clone(), tools).run_conversation("read it", vec![]);
    assert_eq!(out.final_text, "I could not read it.");
    let seen = model.seen.lock().unwrap();
    assert!(
        seen[1].wire["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("disk on fire")
    );
}

/// A server that ignores `tool_choice: "none"`: it calls `terminal` as long
/// as tools are offered, and answers only when they are not.
struct IgnoresToolChoice {
    seen: Mutex<Vec<(usize, ToolChoice)>>,
    as_text: bool,
}

impl Model for IgnoresToolChoice {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let mut seen = self.seen.lock().unwrap();
        seen.push((request.tools.len(), request.tool_choice));
        if request.tools.is_empty() {
            return Ok(Completion {
                content: Some("Here is what I have.".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            });
        }
        // A new command each time, so the repeat guard stays out of it
        // unless the test wants it.
        let args = format!(
            "{{\"command\":\"echo {}\"}}",
            if self.as_text { 0 } else { seen.len() }
        );
        Ok(if self.as_text {
            Completion {
                content: Some(format!(
                    "<tool_call>{{\"name\":\"terminal\",\"arguments\":{args}}}</tool_call>"
                )),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        } else {
            Completion {
                tool_calls: vec![call("", "terminal", &args)],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        })
    }
}

#[test]
fn a_server_ignoring_tool_choice_still_answers_at_the_cap_and_pays_once() {
    for as_text in [false, true] {
        let model = Arc::new(IgnoresToolChoice {
            seen: Mutex::default(),
            as_text,
        });
        let tools = Arc::new(ToolRegistry::new().with(echo("terminal")));
        let agent = Agent::new(model.clone(), tools, "sys").with_max_iterations(3);
        let out = agent.run_conversation("go", vec![]);
        assert_eq!(out.final_text, "Here is what I have.", "as text: {as_text}");
        assert_eq!(out.stop, StopReason::BudgetExhausted);
        assert_valid_for_api(&out.messages);
        // Three calls with tools (the last with tool_choice none, ignored),
        // then one without the tools list.
        assert_eq!(
            *model.seen.lock().unwrap(),
            [
                (1, ToolChoice::Auto),
                (1, ToolChoice::Auto),
                (1, ToolChoice::None),
                (0, ToolChoice::None)
            ]
        );
        assert!(agent.ignores_tool_choice());
        // The next turn knows: its final call goes without tools at once.
        model.seen.lock().unwrap().clear();
        let again = agent.run_conversation("again", out.messages);
        assert_eq!(again.final_text, "Here is what I have.");
        assert_eq!(
            *model.seen.lock().unwrap(),
            [
                (1, ToolChoice::Auto),
                (1, ToolChoice::Auto),
                (0, ToolChoice::None)
            ]
        );
    }
}

#[test]
fn a_server_ignoring_tool_choice_still_answers_after_the_repeat_guard() {
    // The same call over and over, as text: the guard stops it, and the
    // guard's tool-less call is ignored too.
    let model = Arc::new(IgnoresToolChoice {
        seen: Mutex::default(),
        as_text: true,
    });
    let tools = Arc::new(ToolRegistry::new().with(echo("terminal")));
    let memory = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let agent = Agent::new(model.clone(), tools, "sys")
        .with_repeat_guard(Some(RepeatGuard::DEFAULT))
        .with_tool_choice_memory(memory.clone());
    let out = agent.run_conversation("go", vec![]);
    assert_eq!(out.final_text, "Here is what I have.");
    assert_valid_for_api(&out.messages);
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(seen[5], (1, ToolChoice::None));
    assert_eq!(seen[6], (0, ToolChoice::None));
    assert!(memory.load(Ordering::Relaxed), "shared memory set");
}
