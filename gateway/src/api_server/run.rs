//! One request's agent run, on the blocking pool: the stored session it
//! runs in (a new one holding the client's conversation, or the one
//! `X-Hermes-Session-Id` names), the agent the gateway's factory builds (the
//! same assembly as every chat), and the events the HTTP side turns into a
//! response — answer text only, never tool activity.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use hermes_core::{
    AgentEvent, Clock, InterruptFlag, IterationBudget, LedgerEntry, Message, StopReason, Usage,
};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::spending::{CallSizes, SpendingLimits};
use hermes_runtime::store::{NewSession, Store};
use hermes_runtime::sync::lock;
use hermes_runtime::turn::{TurnView, drive};
use tokio::sync::mpsc::UnboundedSender;

use super::spend::Spend;
use super::wire::{ApiError, ChatRequest, Role};
use crate::event::{ChatType, SessionSource};
use crate::runner::AgentFactory;

/// The platform name of the sessions the server stores.
pub const PLATFORM: &str = "api_server";

/// What the runs share.
pub(super) struct Services {
    pub factory: Arc<dyn AgentFactory>,
    pub store: Arc<Mutex<Store>>,
    /// Stored sessions with a run in progress (one run per session).
    pub busy: Mutex<HashSet<String>>,
    /// Spending caps: every request counts against `unattended_account`.
    pub limits: SpendingLimits,
    /// The largest call seen per account (what a reservation holds).
    pub call_sizes: Arc<CallSizes>,
}

/// What a run reports while it goes.
#[derive(Debug)]
pub(super) enum RunEvent {
    /// Answer text, as the model streams it.
    Text(String),
    /// The end.
    Done(Result<Finished, ApiError>),
}

/// A run that produced an answer.
#[derive(Debug)]
pub(super) struct Finished {
    /// The final assistant message (with the notice of an unusual stop).
    pub text: String,
    /// OpenAI's `finish_reason`.
    pub finish: &'static str,
    /// Tokens over the run's model calls.
    pub usage: Usage,
    /// Whether answer text was already sent as [`RunEvent::Text`].
    pub streamed: bool,
}

/// A request's session, ready to run.
pub(super) struct Prepared {
    /// The stored session.
    pub session_id: String,
    history: Vec<LedgerEntry>,
    system_prompt: String,
    user_text: String,
    /// Removes the session from the busy set when dropped.
    _claim: Claim,
}

struct Claim {
    services: Arc<Services>,
    session_id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.services.busy).remove(&self.session_id);
    }
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "api_server: session store");
    ApiError::other(
        500,
        format!("The session store failed: {e}"),
        "server_error",
        "store_error",
    )
}

/// Finds or creates the session (blocking: the store).
pub(super) fn prepare(
    services: &Arc<Services>,
    request: &ChatRequest,
    session_header: Option<&str>,
) -> Result<Prepared, ApiError> {
    let client_system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.text.is_empty())
        .map(|m| m.text.as_str())
        .collect();
    let user_text = request
        .messages
        .last()
        .map(|m| m.text.clone())
        .unwrap_or_default();
    let model = services.factory.default_model();
    let (session_id, stored_prompt, history) = match session_header {
        Some(id) => {
            let record = lock(&services.store)
                .session(id)
                .map_err(store_error)?
                .filter(|r| r.platform.as_deref() == Some(PLATFORM))
                .ok_or_else(|| {
                    ApiError::not_found(
                        format!("No API session '{id}' (X-Hermes-Session-Id)."),
                        "session_not_found",
                    )
                })?;
            if !lock(&services.busy).insert(record.id.clone()) {
                return Err(ApiError::other(
                    409,
                    "This session is already answering a request; wait for it or use another session.",
                    "invalid_request_error",
                    "session_busy",
                ));
            }
            let claim = Claim {
                services: Arc::clone(services),
                session_id: record.id.clone(),
            };
            let history = lock(&services.store)
                .load_view(&record.id)
                .map_err(store_error)?;
            let prompt = match record.system_prompt {
                Some(p) => p,
                None => system_prompt(services)?,
            };
            return Ok(Prepared {
                session_id: record.id,
                history,
                system_prompt: with_client_system(prompt, &client_system),
                user_text,
                _claim: claim,
            });
        }
        None => {
            let prompt = system_prompt(services)?;
            let now = hermes_runtime::store::SystemClock.now_ms();
            // The client holds the history (OpenAI's semantics): it becomes
            // the stored session's transcript, so the run and any later
            // continuation see exactly what the client sent.
            let earlier = &request.messages[..request.messages.len().saturating_sub(1)];
            let history: Vec<LedgerEntry> = earlier
                .iter()
                .filter_map(|m| match m.role {
                    Role::User => Some(Message::user(m.text.clone())),
                    // An assistant message with neither text nor tool calls
                    // is refused by providers; an empty one carries nothing.
                    Role::Assistant if !m.text.is_empty() => {
                        Some(Message::assistant(m.text.clone()))
                    }
                    _ => None,
                })
                .map(|m| LedgerEntry::at(m, now))
                .collect();
            let mut store = lock(&services.store);
            let record = store
                .create_session(&NewSession {
                    platform: Some(PLATFORM),
                    model: Some(&model),
                    system_prompt: Some(&prompt),
                    ..NewSession::default()
                })
                .map_err(store_error)?;
            if !history.is_empty() {
                store
                    .append_messages(&record.id, &history)
                    .map_err(store_error)?;
            }
            lock(&services.busy).insert(record.id.clone());
            (record.id, prompt, history)
        }
    };
    Ok(Prepared {
        _claim: Claim {
            services: Arc::clone(services),
            session_id: session_id.clone(),
        },
        session_id,
        history,
        system_prompt: with_client_system(stored_prompt, &client_system),
        user_text,
    })
}

/// The client's system messages are instructions on top of the agent's own
/// prompt (which stays as stored).
fn with_client_system(prompt: String, client: &[&str]) -> String {
    if client.is_empty() {
        prompt
    } else {
        format!("{prompt}\n\n{}", client.join("\n\n"))
    }
}

fn system_prompt(services: &Services) -> Result<String, ApiError> {
    let source = SessionSource {
        platform: PLATFORM.to_owned(),
        chat_id: "api".to_owned(),
        chat_type: ChatType::Dm,
        user_id: "api".to_owned(),
        user_name: None,
        thread_id: None,
    };
    services.factory.system_prompt(&source).map_err(|e| {
        ApiError::other(
            500,
            format!("Cannot assemble the system prompt: {e}"),
            "server_error",
            "agent_error",
        )
    })
}

/// Runs the agent (blocking), sending the answer's text to `events` as it
/// comes when `stream`; returns how it ended. The session is free again
/// when this returns.
pub(super) fn run(
    services: &Services,
    prepared: Prepared,
    flag: InterruptFlag,
    stream: bool,
    events: &UnboundedSender<RunEvent>,
) -> Result<Finished, ApiError> {
    let model = services.factory.default_model();
    let agent = services
        .factory
        .build(&prepared.session_id, &model, &prepared.system_prompt)
        .map_err(|e| {
            ApiError::other(
                500,
                format!("Cannot build the agent: {e}"),
                "server_error",
                "agent_error",
            )
        })?
        .with_interrupt(flag.clone());
    let budget = IterationBudget::new(agent.max_iterations());
    let spend = Spend::new(services, budget.clone())?;
    let writer =
        TurnWriter::new(&services.store, &prepared.session_id).charging(spend.charger(services));
    let mut observer = Observer {
        spend,
        events,
        stream,
        flag,
        sent_any: false,
        sent_this_call: false,
        separate: false,
    };
    let outcome = drive(
        &agent,
        Message::user(prepared.user_text),
        prepared.history,
        &budget,
        writer,
        &mut observer,
    )
    .outcome;
    let streamed = observer.sent_this_call;
    let capped = observer.spend.halted.take();
    let (finish, notice) = match &outcome.stop {
        StopReason::Completed => ("stop", None),
        StopReason::Halted if capped.is_some() => ("stop", capped),
        StopReason::Truncated => ("length", outcome.stop.notice(agent.max_iterations())),
        StopReason::ModelError(e) if !observer.sent_any => {
            return Err(ApiError::other(
                502,
                format!("The upstream model provider failed: {e}"),
                "api_error",
                "upstream_error",
            ));
        }
        StopReason::ContextOverflow(_) if !observer.sent_any => {
            return Err(ApiError {
                status: 400,
                message: outcome
                    .stop
                    .notice(agent.max_iterations())
                    .unwrap_or_default(),
                kind: "invalid_request_error",
                param: Some("messages".into()),
                code: Some("context_length_exceeded"),
            });
        }
        other => ("stop", other.notice(agent.max_iterations())),
    };
    let mut text = outcome.final_text;
    if let Some(notice) = notice {
        let piece = if text.is_empty() {
            notice
        } else {
            format!("\n\n[{notice}]")
        };
        if stream && streamed {
            let _ = events.send(RunEvent::Text(piece.clone()));
        }
        text.push_str(&piece);
    }
    Ok(Finished {
        text,
        finish,
        usage: outcome.usage,
        streamed,
    })
}

/// Forwards the answer's text as it comes (the driver stores the run).
struct Observer<'a> {
    spend: Spend<'a>,
    events: &'a UnboundedSender<RunEvent>,
    stream: bool,
    flag: InterruptFlag,
    /// Text was sent during this run.
    sent_any: bool,
    /// Text was sent during the current model call.
    sent_this_call: bool,
    /// A later model call's text starts a new paragraph.
    separate: bool,
}

impl TurnView for Observer<'_> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        match event {
            AgentEvent::ModelCall { .. } => {
                self.spend.before_call();
                self.separate = self.sent_any;
                self.sent_this_call = false;
            }
            AgentEvent::TextDelta(t) if self.stream && !t.is_empty() => {
                if self.separate {
                    self.separate = false;
                    let _ = self.events.send(RunEvent::Text("\n\n".to_owned()));
                }
                if self.events.send(RunEvent::Text((*t).to_owned())).is_err() {
                    self.flag.interrupt();
                }
                self.sent_any = true;
                self.sent_this_call = true;
            }
            _ => {}
        }
    }
}
