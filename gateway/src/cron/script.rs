//! A job's script (`hermes cron create --script PATH [--no-agent]`), run
//! before the agent in the terminal's sandbox: its stdout is the agent's
//! context, or with `--no-agent` the answer itself (nothing is sent when
//! it prints nothing). A script that fails — a non-zero exit, a signal, its
//! timeout, or it cannot start — fails the run with that reason and its
//! stderr, recorded in `cron runs` and the job's last outcome; the agent is
//! not called.

use std::sync::atomic::Ordering;

use hermes_core::InterruptFlag;
use hermes_runtime::store::JobRecord;
use hermes_runtime::tools::script::{ScriptEnd, run_script};

use super::run::Executed;
use super::{Inner, lock};

/// What the script part of a run came to.
pub(super) enum ScriptPart {
    /// The run is decided (the script failed, was stopped, or its output
    /// is the answer).
    Done(Executed),
    /// Run the agent, with the script's stdout when there is a script.
    Context(Option<String>),
}

fn failed(error: String) -> ScriptPart {
    ScriptPart::Done(Executed::Failed {
        session_id: None,
        error,
    })
}

impl Inner {
    /// Runs `job`'s script, if it has one.
    pub(super) fn script_part(&self, job: &JobRecord) -> ScriptPart {
        let Some(script) = &job.script else {
            // A webhook route's `no_agent`: the rendered template is the answer.
            if job.no_agent {
                return ScriptPart::Done(Executed::Answer {
                    session_id: None,
                    text: job.prompt.clone(),
                });
            }
            return ScriptPart::Context(None);
        };
        let Some(env) = &self.scripts else {
            return failed(format!(
                "the script {script} cannot run: this gateway runs no scripts"
            ));
        };
        let flag = InterruptFlag::new();
        lock(&self.running).push((job.id.clone(), flag.clone()));
        if self.stopping.load(Ordering::SeqCst) {
            flag.interrupt();
        }
        let ran = run_script(env, script, self.timing.script_timeout, &flag);
        lock(&self.running).retain(|(j, _)| j != &job.id);
        let ran = match ran {
            Ok(ran) => ran,
            Err(reason) => return failed(format!("the script {script} could not run: {reason}")),
        };
        if ran.end == ScriptEnd::Interrupted && self.stopping.load(Ordering::SeqCst) {
            // Run again at the next start, as an interrupted agent is.
            return ScriptPart::Done(Executed::Left);
        }
        if let Some(why) = ran.failure() {
            tracing::warn!(job = %job.id, %script, %why, "the job's script failed");
            return failed(format!("{script}: {why}"));
        }
        if job.no_agent {
            return ScriptPart::Done(Executed::Answer {
                session_id: None,
                text: ran.stdout.trim_end_matches('\n').to_owned(),
            });
        }
        ScriptPart::Context(Some(ran.stdout))
    }
}
