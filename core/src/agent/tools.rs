//! Answering the tool calls of one model turn (SPEC L7, L8, L11, Y6): in
//! order, or as one concurrent batch when every call is read-only; each
//! result checked by the repeat guard; the last one told when the next
//! model call is the wallet's last.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::repeat::{LAST_CALL_NOTE, Verdict, stop_note, warn_note};
use super::{AgentEvent, FinalCall, Run, SKIPPED_TOOL_RESULT, StopReason};
use crate::message::{LedgerEntry, Message, ToolCall};
use crate::tool::ToolError;
use crate::tool::batch::{BatchCall, BatchResult, run_one};

impl Run<'_> {
    /// Answers every call, in order. Returns a stop reason if the run must
    /// end.
    pub(super) fn answer_tool_calls(&mut self, calls: &[ToolCall]) -> Option<StopReason> {
        let tools = &self.agent.tools;
        let batch = calls.len() > 1 && calls.iter().all(|c| tools.is_read_only(&c.function.name));
        if batch {
            self.answer_batch(calls)
        } else {
            self.answer_in_turn(calls)
        }
    }

    /// One call after the other; each result goes to the ledger as soon as
    /// it is there.
    fn answer_in_turn(&mut self, calls: &[ToolCall]) -> Option<StopReason> {
        let mut stop = None;
        let last = calls.len().saturating_sub(1);
        for (i, call) in calls.iter().enumerate() {
            if stop.is_some() {
                self.record(
                    call,
                    SKIPPED_TOOL_RESULT.into(),
                    true,
                    false,
                    i == last,
                    true,
                );
                continue;
            }
            self.observer.on_event(&AgentEvent::ToolStarted { call });
            let outcome = run_one(
                &self.agent.tools,
                &batch_call(call),
                self.budget,
                &self.agent.interrupt,
            );
            let (text, is_error, ran) = self.judge(call, outcome, &mut stop);
            // Check point (b): after each tool call.
            if stop.is_none() && self.agent.interrupt.is_set() {
                stop = Some(StopReason::Interrupted);
            }
            let last_call = i == last && stop.is_none();
            self.record(call, text, is_error, ran, last_call, stop.is_some());
        }
        stop
    }

    /// All calls at once through the agent's batch runner; results in
    /// call order.
    fn answer_batch(&mut self, calls: &[ToolCall]) -> Option<StopReason> {
        for call in calls {
            self.observer.on_event(&AgentEvent::ToolStarted { call });
        }
        let batch: Vec<BatchCall<'_>> = calls.iter().map(batch_call).collect();
        let mut results = self
            .agent
            .batch
            .run_batch(
                &self.agent.tools,
                &batch,
                self.budget,
                &self.agent.interrupt,
            )
            .into_iter();
        let mut stop = None;
        if self.agent.interrupt.is_set() {
            stop = Some(StopReason::Interrupted);
        }
        let last = calls.len().saturating_sub(1);
        for (i, call) in calls.iter().enumerate() {
            // A runner that returned too few results left those calls unrun.
            let outcome = results.next().flatten();
            let (text, is_error, ran) = self.judge(call, outcome, &mut stop);
            self.record(call, text, is_error, ran, i == last, stop.is_some());
        }
        stop
    }

    /// The text of one outcome; an abort sets `stop`.
    fn judge(
        &mut self,
        call: &ToolCall,
        outcome: BatchResult,
        stop: &mut Option<StopReason>,
    ) -> (String, bool, bool) {
        match outcome {
            None => (SKIPPED_TOOL_RESULT.into(), true, false),
            Some(Ok(text)) => (self.cap(&call.function.name, text), false, true),
            Some(Err(ToolError::Failed(text))) => (self.cap(&call.function.name, text), true, true),
            Some(Err(ToolError::Abort(message))) => {
                let text = format!("Error: {message}");
                if stop.is_none() {
                    *stop = Some(StopReason::ToolAborted {
                        tool: call.function.name.clone(),
                        message,
                    });
                }
                (text, true, true)
            }
        }
    }

    /// Puts the repeat guard's and the budget's notes on a result, reports
    /// it and appends it to the ledger.
    fn record(
        &mut self,
        call: &ToolCall,
        mut text: String,
        is_error: bool,
        ran: bool,
        last: bool,
        stopping: bool,
    ) {
        if ran && let Some(guard) = self.agent.repeat_guard {
            let name = &call.function.name;
            match self
                .repeats
                .observe(&guard, name, &call.function.arguments, &text)
            {
                Verdict::Fresh => {}
                Verdict::Warn(n) => text.push_str(&warn_note(name, n)),
                Verdict::Stop(n) => {
                    text.push_str(&stop_note(name, n));
                    if self.tools_off.is_none() {
                        self.tools_off = Some(FinalCall::Repeats);
                        self.observer.on_event(&AgentEvent::RepeatsStopped {
                            tool: name,
                            count: n,
                        });
                    }
                }
            }
        }
        // The next call is the run's last: say so where the model reads
        // last, unless something else already did.
        if last && !stopping && self.tools_off.is_none() && self.left() <= 1 {
            text.push_str(LAST_CALL_NOTE);
        }
        self.observer.on_event(&AgentEvent::ToolFinished {
            call,
            result: &text,
            is_error,
        });
        let mut entry = LedgerEntry::at(Message::tool(call.id.clone(), text), self.now());
        // Sub-agents' calls (delegate_task) ride on the result, priced as
        // the model of the call that asked for it.
        if let Some(usage) = self.budget.take_child_usage() {
            entry.meta.model = self
                .messages
                .iter()
                .rev()
                .find_map(|e| e.meta.model.clone());
            entry.meta.usage = Some(usage);
        }
        self.push(entry);
    }
}

fn batch_call(call: &ToolCall) -> BatchCall<'_> {
    BatchCall {
        name: &call.function.name,
        arguments: &call.function.arguments,
        tool_call_id: &call.id,
    }
}
