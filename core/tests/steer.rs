//! Steering (SPEC Y5): text sent during a run reaches the model at its
//! next call as a user message, never between a tool call and its results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hermes_core::*;

/// The caller's side of steering: what the user sent meanwhile.
#[derive(Default)]
struct SteerInbox(Mutex<Vec<String>>);

impl SteerInbox {
    fn push(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
    fn left(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Steering for SteerInbox {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A model that replies from a script and records what it was sent; it
/// may push steer text while it "streams" (the user typing meanwhile).
struct Scripted {
    steps: Mutex<Vec<(Vec<ToolCall>, Option<&'static str>)>>,
    seen: Mutex<Vec<Vec<Message>>>,
    inbox: Arc<SteerInbox>,
    steer_during_call: Mutex<Vec<(usize, &'static str)>>,
}

impl Scripted {
    fn new(
        inbox: &Arc<SteerInbox>,
        mut steps: Vec<(Vec<ToolCall>, Option<&'static str>)>,
    ) -> Arc<Self> {
        steps.reverse();
        Arc::new(Scripted {
            steps: Mutex::new(steps),
            seen: Mutex::default(),
            inbox: Arc::clone(inbox),
            steer_during_call: Mutex::default(),
        })
    }
    fn seen(&self) -> Vec<Vec<Message>> {
        self.seen.lock().unwrap().clone()
    }
}

impl Model for Scripted {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        // Every request must encode (the OpenAI wire, and Anthropic's).
        let mut body = Vec::new();
        codec::encode_request(&codec::RequestOptions::new("m"), request, &mut body).unwrap();
        let mut body = Vec::new();
        codec::anthropic::encode_messages_request(
            &codec::anthropic::MessagesOptions::new("m"),
            request,
            &mut body,
        )
        .unwrap();
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(request.messages.iter().map(|e| e.message.clone()).collect());
            seen.len()
        };
        for (call, text) in self.steer_during_call.lock().unwrap().iter() {
            if *call == n {
                self.inbox.push(text);
            }
        }
        let (calls, text) = self
            .steps
            .lock()
            .unwrap()
            .pop()
            .unwrap_or((vec![], Some("done")));
        Ok(Completion {
            content: text.map(str::to_owned),
            finish_reason: Some(if calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            }),
            tool_calls: calls,
            ..Completion::default()
        })
    }
}

/// A tool during which the user sends `text`.
struct SteeredDuring {
    spec: ToolSpec,
    inbox: Arc<SteerInbox>,
    text: &'static str,
}

impl Tool for SteeredDuring {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        if !self.text.is_empty() {
            self.inbox.push(self.text);
        }
        Ok(format!("looked at {arguments}"))
    }
}

fn tool(name: &str, inbox: &Arc<SteerInbox>, text: &'static str) -> SteeredDuring {
    SteeredDuring {
        spec: ToolSpec::new(name, "looks", serde_json::json!({"type": "object"})),
        inbox: Arc::clone(inbox),
        text,
    }
}

/// Every assistant message with tool calls is followed directly by one
/// result per call, in order.
fn assert_valid(messages: &[Message]) {
    for (i, m) in messages.iter().enumerate() {
        for (k, c) in m.tool_calls().iter().enumerate() {
            match messages.get(i + 1 + k) {
                Some(Message::Tool { tool_call_id, .. }) => assert_eq!(tool_call_id, &c.id),
                other => panic!("call {} not answered directly, found {other:?}", c.id),
            }
        }
    }
}

fn user(text: &str) -> Message {
    Message::user(text)
}

#[test]
fn text_sent_during_a_tool_reaches_the_next_call_after_all_results() {
    let inbox = Arc::new(SteerInbox::default());
    let model = Scripted::new(
        &inbox,
        vec![
            (
                vec![
                    ToolCall::new("a", "look", "{\"at\":1}"),
                    ToolCall::new("b", "look2", "{}"),
                ],
                None,
            ),
            (vec![], Some("checked both, and B too")),
        ],
    );
    // The user writes during the first of two calls of one message: the
    // text must wait until the second result is in.
    let tools = ToolRegistry::new()
        .with(tool("look", &inbox, "also check B"))
        .with(tool("look2", &inbox, ""));
    let agent = Agent::new(model.clone(), Arc::new(tools), "You are Hermes.");
    let mut appended = Vec::new();
    let budget = IterationBudget::new(10);
    let out = agent.run_steered(
        user("check A"),
        vec![],
        &budget,
        &mut FnObserver(|e: &AgentEvent<'_>| {
            if let AgentEvent::Appended(entry) = e {
                appended.push(entry.message.clone());
            }
        }),
        inbox.as_ref(),
    );
    assert_eq!(out.stop, StopReason::Completed);
    let seen = model.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], vec![user("check A")]);
    let second = &seen[1];
    assert_eq!(second.len(), 5, "{second:?}");
    assert!(matches!(&second[1], Message::Assistant { tool_calls, .. } if tool_calls.len() == 2));
    assert!(matches!(&second[2], Message::Tool { tool_call_id, .. } if tool_call_id == "a"));
    assert!(matches!(&second[3], Message::Tool { tool_call_id, .. } if tool_call_id == "b"));
    assert_eq!(second[4], user("also check B"));
    assert_valid(second);
    // The ledger keeps it, and the observer (what persists a run) saw it
    // appended in place.
    let ledger: Vec<Message> = out.messages.iter().map(|e| e.message.clone()).collect();
    assert_valid(&ledger);
    assert_eq!(ledger[4], user("also check B"));
    assert_eq!(appended, ledger);
    assert_eq!(out.final_text, "checked both, and B too");
    assert!(inbox.left().is_empty());
}

#[test]
fn text_waiting_before_the_first_call_follows_the_user_message() {
    let inbox = Arc::new(SteerInbox::default());
    inbox.push("in French please");
    let model = Scripted::new(&inbox, vec![(vec![], Some("bonjour"))]);
    let agent = Agent::new(model.clone(), Arc::new(ToolRegistry::new()), "");
    let budget = IterationBudget::new(5);
    let out = agent.run_steered(
        user("hello"),
        vec![],
        &budget,
        &mut NoObserver,
        inbox.as_ref(),
    );
    assert_eq!(
        model.seen()[0],
        vec![user("hello"), user("in French please")]
    );
    assert_eq!(out.new_messages().len(), 3);
}

#[test]
fn text_sent_during_the_last_call_is_left_to_the_caller() {
    let inbox = Arc::new(SteerInbox::default());
    let model = Scripted::new(
        &inbox,
        vec![
            (vec![ToolCall::new("a", "look", "{}")], None),
            (vec![], Some("done")),
        ],
    );
    // During call 2, which answers without tools: no call follows.
    model
        .steer_during_call
        .lock()
        .unwrap()
        .push((2, "one more thing"));
    let tools = ToolRegistry::new().with(tool("look", &inbox, ""));
    let agent = Agent::new(model.clone(), Arc::new(tools), "");
    let budget = IterationBudget::new(5);
    let out = agent.run_steered(user("go"), vec![], &budget, &mut NoObserver, inbox.as_ref());
    assert_eq!(out.stop, StopReason::Completed);
    assert!(
        !out.messages
            .iter()
            .any(|e| e.message == user("one more thing"))
    );
    assert_eq!(inbox.left(), vec!["one more thing".to_owned()]);
}

#[test]
fn several_pieces_become_several_user_messages_in_order_and_runs_without_steering_take_nothing() {
    let inbox = Arc::new(SteerInbox::default());
    let model = Scripted::new(
        &inbox,
        vec![
            (vec![ToolCall::new("a", "look", "{}")], None),
            (vec![], Some("ok")),
        ],
    );
    model
        .steer_during_call
        .lock()
        .unwrap()
        .extend([(1, "first"), (1, "second")]);
    let tools = ToolRegistry::new().with(tool("look", &inbox, ""));
    let agent = Agent::new(model.clone(), Arc::new(tools), "");
    let budget = IterationBudget::new(5);
    agent.run_steered(user("go"), vec![], &budget, &mut NoObserver, inbox.as_ref());
    let second = &model.seen()[1];
    assert_eq!(&second[3..], &[user("first"), user("second")]);
    assert_valid(second);

    // A plain run has no source: what waits stays.
    inbox.push("unseen");
    let model = Scripted::new(&inbox, vec![(vec![], Some("ok"))]);
    let agent = Agent::new(model.clone(), Arc::new(ToolRegistry::new()), "");
    agent.run_conversation("hi", vec![]);
    assert_eq!(model.seen()[0], vec![user("hi")]);
    assert_eq!(inbox.left(), vec!["unseen".to_owned()]);
}
