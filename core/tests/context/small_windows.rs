//! Issue 38: compaction keeps the turn's request — a compaction that would
//! not shrink is not done, and a long turn cuts its older tool results
//! before anything is summarised.

use super::*;

#[test]
fn a_compaction_that_would_not_shrink_the_request_is_not_done() {
    // Short exchanges (a lookup of ten bytes, a one-line answer): the
    // summary (~60 words) is bigger than the few words it would replace.
    let model = WindowModel::new(100_000);
    let agent = agent(model.clone(), 100_000, 10);
    let mut history = Vec::new();
    for n in [3, 6, 9, 12, 15] {
        history = agent
            .run_conversation(&format!("turn {n}: hi"), history)
            .messages;
    }
    let before = history.clone();
    assert_eq!(
        agent.compact(&mut history, None),
        Err(CompactError::NotWorthIt)
    );
    assert_eq!(history, before, "nothing was rewritten");
}

/// Twenty lookups in one turn, then an answer naming the request it saw.
struct LongTask {
    window: u64,
    seen: Mutex<Vec<(u64, Vec<Message>)>>,
}

impl Model for LongTask {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let tokens = provider_count(request);
        if request.system_prompt == SUMMARIZER_PROMPT {
            return Ok(Completion {
                content: Some("Twenty numbers were looked up and reported.".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            });
        }
        let messages: Vec<Message> = request.messages.iter().map(|e| e.message.clone()).collect();
        self.seen.lock().unwrap().push((tokens, messages.clone()));
        if tokens > self.window {
            return Err(ModelError::new(
                ModelErrorKind::ContextOverflow { window: None },
                "HTTP 400: maximum context length exceeded",
            ));
        }
        let turn = messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .unwrap();
        let steps = messages[turn..]
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        let user = messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap();
        Ok(if steps < 20 {
            Completion {
                tool_calls: vec![ToolCall::new(
                    format!("s{steps}"),
                    "lookup",
                    format!("{{\"n\":{steps}}}"),
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        } else {
            Completion {
                content: Some(format!("done with: {user}")),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        })
    }
}

#[test]
fn a_long_turn_keeps_its_request_and_cuts_its_older_results_instead_of_summarising() {
    // Regression (issue 38): a 20-step task was compacted inside its own
    // turn, the summary inserted as a user message between tool results.
    let model = Arc::new(LongTask {
        window: 6_000,
        seen: Mutex::default(),
    });
    let agent = agent_with(model.clone(), 6_000, 2_000);
    // A first task of the same kind, then the one watched.
    let first = agent.run_conversation("turn 1: look up twenty numbers", Vec::new());
    assert_eq!(first.stop, StopReason::Completed, "{:?}", first.stop);
    let earlier = model.seen.lock().unwrap().len();
    let task = "turn 2: look up the twenty numbers and report";
    let out = agent.run_conversation(task, first.messages);
    assert_eq!(out.stop, StopReason::Completed, "{:?}", out.stop);
    assert!(out.final_text.ends_with(task), "{}", out.final_text);
    let seen = model.seen.lock().unwrap();
    assert!(seen.len() - earlier >= 21);
    for (tokens, messages) in seen.iter().skip(earlier) {
        assert!(*tokens <= 6_000);
        // The request is there, word for word, at the end of the last user
        // message (a summary of earlier turns may open it): nothing was
        // summarised or placed after it.
        let last_user = messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .unwrap();
        assert!(last_user.ends_with(task), "{last_user}");
    }
    // The last results are whole, older ones cut with a marker.
    let (_, last) = seen.last().unwrap();
    let turn = last
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap();
    let results: Vec<&str> = last[turn..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 20);
    assert!(results[19].len() >= 2_000);
    assert!(results[0].contains("cut to fit the model's context window"));
}

fn agent_with(model: Arc<LongTask>, window: u32, result_size: usize) -> Agent {
    let tools = ToolRegistry::new().with(Lookup::new(result_size));
    Agent::new(model, Arc::new(tools), SYSTEM).with_context(ContextConfig::new(Arc::new(
        ContextWindow::new(window, WindowSource::Configured),
    )))
}
