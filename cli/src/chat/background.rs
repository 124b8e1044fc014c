//! `/background PROMPT` (`/bg`, issue 46): the prompt runs as a session
//! of its own on a thread while the user goes on chatting. The run is
//! stored like any turn (its transcript is its session, `hermes -r ID`
//! opens it); its answer is held and shown at the next prompt, once —
//! printing while the line editor draws would garble the line, as with
//! background processes' notices. It never asks on the terminal: a
//! dangerous command is refused and `clarify` is not offered
//! ([`Workbench::background_agent`]). Leaving while a run is in flight
//! warns once; leaving anyway interrupts it (what it did so far stays in
//! its session).

use std::sync::{Arc, Mutex};

use hermes_core::{InterruptFlag, IterationBudget, Message, StopReason};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::NewSession;
use hermes_runtime::sync::lock;
use hermes_runtime::turn::{Unwatched, drive};

use crate::app::{CliError, Workbench, runtime};
use crate::chat::title_from;
use crate::markdown::Markdown;
use crate::term::{term, width};

/// The source platform of a background run's session: not `cli`, so
/// `hermes -c` keeps continuing the conversation the user typed in.
pub const PLATFORM: &str = "cli-background";

#[derive(Default)]
struct State {
    next: u32,
    /// Runs in flight: number, session id, interrupt flag.
    running: Vec<(u32, String, InterruptFlag)>,
    /// Finished runs' notices, not shown yet.
    done: Vec<String>,
}

/// The background runs of one interactive session.
#[derive(Clone, Default)]
pub struct BackgroundRuns(Arc<Mutex<State>>);

impl std::fmt::Debug for BackgroundRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundRuns")
            .field("running", &lock(&self.0).running.len())
            .finish_non_exhaustive()
    }
}

impl BackgroundRuns {
    /// Starts `prompt` as a new session on a thread; returns the line that
    /// says so.
    pub fn start(&self, bench: &Workbench, prompt: &str, styled: bool) -> Result<String, CliError> {
        let workdir = bench.settings.workdir.display().to_string();
        let title = title_from(prompt);
        let record = bench
            .store()
            .create_session(&NewSession {
                platform: Some(PLATFORM),
                model: Some(&bench.model),
                workdir: Some(&workdir),
                title: Some(&title),
                ..NewSession::default()
            })
            .map_err(runtime)?;
        let session = record.id;
        let made = bench
            .background_agent(&session)
            .and_then(|(agent, system)| {
                bench
                    .store()
                    .set_system_prompt(&session, &system)
                    .map_err(runtime)?;
                Ok(agent)
            });
        let agent = match made {
            Ok(agent) => agent,
            Err(e) => {
                let _ = bench.store().delete_session(&session);
                return Err(e);
            }
        };
        let flag = InterruptFlag::new();
        let agent = agent.with_interrupt(flag.clone());
        let number = {
            let mut state = lock(&self.0);
            state.next += 1;
            let n = state.next;
            state.running.push((n, session.clone(), flag.clone()));
            n
        };
        let store = Arc::clone(&bench.store);
        let max_iterations = bench.settings.max_iterations;
        let (runs, prompt, id) = (self.clone(), prompt.to_owned(), session.clone());
        std::thread::Builder::new()
            .name(format!("background-{number}"))
            .spawn(move || {
                let budget = IterationBudget::new(max_iterations);
                let driven = drive(
                    &agent,
                    Message::user(prompt),
                    Vec::new(),
                    &budget,
                    TurnWriter::new(&store, &id),
                    &mut Unwatched,
                );
                let failed = driven.store_failure().map(ToString::to_string);
                let outcome = driven.outcome;
                let notice = notice(
                    number,
                    &id,
                    &outcome.final_text,
                    &outcome.stop,
                    failed,
                    styled,
                    max_iterations,
                );
                runs.finish(number, notice);
            })
            .map_err(|e| runtime(format!("cannot start the background run: {e}")))?;
        Ok(format!(
            "Background task {number} started as session {session}; its answer shows at a prompt \
             when it is done."
        ))
    }

    fn finish(&self, number: u32, notice: String) {
        let mut state = lock(&self.0);
        state.running.retain(|(n, _, _)| *n != number);
        state.done.push(notice);
    }

    /// The finished runs' notices not shown yet, each once.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut lock(&self.0).done)
    }

    /// The runs in flight, as "task N (session ID)".
    pub fn running(&self) -> Vec<String> {
        lock(&self.0)
            .running
            .iter()
            .map(|(n, id, _)| format!("task {n} (session {id})"))
            .collect()
    }

    /// Interrupts every run in flight (the session is ending).
    pub fn interrupt_all(&self) {
        for (_, _, flag) in &lock(&self.0).running {
            flag.interrupt();
        }
    }
}

/// What the user is shown when run `number` ends.
fn notice(
    number: u32,
    session: &str,
    answer: &str,
    stop: &StopReason,
    failed: Option<String>,
    styled: bool,
    max_iterations: u32,
) -> String {
    let style = term().err_style();
    let head = match (stop, &failed) {
        (_, Some(e)) => style.red(&format!(
            "Background task {number} (session {session}): its transcript could not be saved: {e}"
        )),
        (StopReason::Completed, None) => style.bold(&format!(
            "Background task {number} finished (session {session}):"
        )),
        (StopReason::ModelError(e), None) => style.red(&format!(
            "Background task {number} (session {session}) failed: {e}"
        )),
        (StopReason::Interrupted, None) => style.yellow(&format!(
            "Background task {number} (session {session}) was interrupted."
        )),
        (other, None) => style.yellow(&format!(
            "Background task {number} (session {session}) stopped: {}",
            other
                .notice(max_iterations)
                .unwrap_or_else(|| "before it finished".to_owned())
        )),
    };
    if answer.trim().is_empty() {
        return head;
    }
    let body = Markdown::render(styled, width(), answer);
    format!("{head}\n{}", body.trim_end_matches('\n'))
}
