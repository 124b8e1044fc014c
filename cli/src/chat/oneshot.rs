//! `hermes -z PROMPT`: one turn, only the answer on stdout (or one JSON
//! object with `--json`), progress on stderr.

use std::io::{Read, Write};

use hermes_core::StopReason;
use serde_json::json;

use crate::app::{CliError, Workbench, provider_hint, runtime};
use crate::args::ChatArgs;
use crate::chat::Chat;
use crate::markdown::Markdown;
use crate::term::{term, width};

/// The most piped input read (the rest is refused, not silently cut).
const MAX_STDIN_BYTES: u64 = 8 * 1024 * 1024;

/// The prompt to send: `-` reads it from stdin; otherwise piped stdin, if
/// any, follows the prompt after a blank line (`git diff | hermes -z review`).
pub fn prompt_from(arg: &str) -> Result<String, CliError> {
    let piped = read_piped_stdin()?;
    let prompt = match (arg, piped) {
        ("-", Some(text)) => text,
        ("-", None) => {
            return Err(CliError::Config(
                "-z - reads the prompt from stdin, but nothing was piped in".into(),
            ));
        }
        (p, Some(text)) if !text.trim().is_empty() => format!("{p}\n\n{text}"),
        (p, _) => p.to_owned(),
    };
    if prompt.trim().is_empty() {
        return Err(CliError::Config("the prompt given to -z is empty".into()));
    }
    Ok(prompt)
}

/// stdin's content when it is a pipe or a file; `None` for a terminal,
/// `/dev/null` or a socket (reading those would block or mean nothing).
fn read_piped_stdin() -> Result<Option<String>, CliError> {
    use nix::sys::stat::{SFlag, fstat};
    let Ok(stat) = fstat(std::io::stdin()) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| runtime(format!("cannot read stdin: {e}")))?;
    if bytes.len() as u64 > MAX_STDIN_BYTES {
        return Err(CliError::Config(format!(
            "piped input is larger than {} MB; pass a file path in the prompt instead",
            MAX_STDIN_BYTES / (1024 * 1024)
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::Config("piped input is not UTF-8 text".into()))?;
    Ok((!text.is_empty()).then_some(text))
}

fn stop_name(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::Completed => "completed",
        StopReason::BudgetExhausted => "budget_exhausted",
        StopReason::Interrupted => "interrupted",
        StopReason::Truncated => "truncated",
        StopReason::ModelError(_) => "model_error",
        StopReason::ContextOverflow(_) => "context_overflow",
        StopReason::ToolAborted { .. } => "tool_aborted",
        StopReason::Halted => "halted",
    }
}

/// Runs the one turn.
pub fn oneshot(bench: Workbench, args: &ChatArgs, prompt: &str) -> Result<i32, CliError> {
    let mut chat = Chat::open(bench, args, true)?;
    let result = chat.turn(prompt, false)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let error = match &result.stop {
            StopReason::ModelError(e) | StopReason::ContextOverflow(e) => Some(e.message.clone()),
            StopReason::ToolAborted { message, .. } => Some(message.clone()),
            _ => None,
        };
        let doc = json!({
            "answer": result.final_text,
            "session_id": chat.session_id(),
            "model": chat.bench().model,
            "stop_reason": stop_name(&result.stop),
            "error": error,
            "usage": result.usage.map(|u| json!({
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.total_tokens,
            })),
        });
        writeln!(out, "{doc}")
    } else if result.final_text.is_empty() {
        Ok(())
    } else {
        let styled = !args.plain && term().caps.out_ansi;
        let text = Markdown::render(styled, width(), &result.final_text);
        writeln!(out, "{}", text.trim_end_matches('\n'))
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        // A closed pipe (`hermes -z … | head -0`) is not an error worth a message.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(runtime(format!("cannot write the answer: {e}")));
        }
    }
    drop(out);
    if let StopReason::ModelError(e) = &result.stop
        && result.final_text.is_empty()
    {
        if args.json {
            return Ok(1);
        }
        let unsaved = if result.rolled_back {
            " (nothing was saved)"
        } else {
            ""
        };
        return Err(CliError::Runtime(format!(
            "{e}{unsaved}\n  {}",
            provider_hint(&chat.bench().settings, e)
        )));
    }
    // A one-shot run is its session: what it started in the background
    // ends with it, and the user hears so.
    let running = chat.bench().background.running();
    if !running.is_empty() {
        chat.bench().background.kill_all();
        term().line(&format!(
            "Background process(es) {} ended with this one-shot run; run hermes chat to keep \
             them while they work.",
            running.join(", ")
        ));
    }
    let _ = chat.close();
    let code = chat.report_stop(&result);
    // What is left is dropping the workbench and exiting: its `Drop`s
    // run, its memory is not handed back one block at a time (`heap`).
    crate::heap::stop_freeing();
    // Nor is the store closed: closing frees what SQLite holds (its page
    // cache, the parsed schema, the prepared statements) through its own
    // allocator, ≈ 0.14 M instructions, and writes nothing (the WAL is
    // not checkpointed on close). Everything is committed by now, so the
    // exit is a kill after the last commit, which the store's kill -9
    // suite covers; the kernel releases the file and its locks.
    std::mem::forget(std::sync::Arc::clone(&chat.bench().store));
    Ok(code)
}
