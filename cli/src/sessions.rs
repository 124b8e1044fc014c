//! `hermes sessions …`: list, show, export, rename, delete, search.

use std::fmt::Write as _;

use hermes_core::Clock;
use hermes_core::{LedgerEntry, Message};
use hermes_runtime::config::Settings;
use hermes_runtime::store::SystemClock;
use hermes_runtime::store::{SessionRecord, SessionStatus};
use serde_json::json;
use unicode_width::UnicodeWidthStr;

use crate::app::{CliError, find_session, open_store, runtime};
use crate::args::{ExportFormat, SessionsCommand};
use crate::display::one_line;
use crate::markdown::Markdown;
use crate::term::{term, width};

/// Runs one `sessions` subcommand.
pub fn run(settings: &Settings, command: SessionsCommand) -> Result<i32, CliError> {
    match command {
        SessionsCommand::List { limit } => list(settings, limit),
        SessionsCommand::Show { id } => show(settings, &id),
        SessionsCommand::Export { id, format, output } => {
            let text = export(settings, &id, format)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, text)
                        .map_err(|e| runtime(format!("cannot write {}: {e}", path.display())))?;
                    eprintln!("Wrote {}", path.display());
                }
                None => print!("{text}"),
            }
            Ok(0)
        }
        SessionsCommand::Rename { id, title } => {
            let mut store = open_store(settings)?;
            let s = find_session(&store, &id)?;
            let title = title.join(" ");
            store.set_title(&s.id, Some(&title)).map_err(runtime)?;
            println!("Session {} is now “{title}”.", s.id);
            Ok(0)
        }
        SessionsCommand::Delete { ids } => {
            let mut store = open_store(settings)?;
            // Resolve every id first: a typo in the third deletes nothing.
            let found = ids
                .iter()
                .map(|id| find_session(&store, id))
                .collect::<Result<Vec<_>, _>>()?;
            for s in found {
                store.delete_session(&s.id).map_err(runtime)?;
                println!(
                    "Deleted session {} (“{}”, {} messages).",
                    s.id,
                    s.title.as_deref().unwrap_or("untitled"),
                    s.message_count
                );
            }
            Ok(0)
        }
        SessionsCommand::Search { query, limit } => search(settings, &query.join(" "), limit),
    }
}

/// "just now", "5 min ago", "3 h ago", "yesterday", "4 days ago", or the date.
pub fn ago(ms: u64) -> String {
    let now = SystemClock.now_ms();
    let secs = now.saturating_sub(ms) / 1000;
    match secs {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        86_400..172_800 => "yesterday".into(),
        172_800..604_800 => format!("{} days ago", secs / 86_400),
        _ => date(ms),
    }
}

/// `YYYY-MM-DD HH:MM` (UTC).
pub fn date_time(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{} {:02}:{:02} UTC",
        date(ms),
        (secs / 3600) % 24,
        (secs / 60) % 60
    )
}

/// `YYYY-MM-DD` (UTC).
pub fn date(ms: u64) -> String {
    // Howard Hinnant's days-to-civil algorithm.
    let days = i64::try_from(ms / 86_400_000).unwrap_or(0);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `~/x` for paths under `$HOME`.
fn short_dir(dir: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && dir.starts_with(&home) => {
            format!("~{}", &dir[home.len()..])
        }
        _ => dir.to_owned(),
    }
}

fn pad(text: &str, cols: usize) -> String {
    let w = UnicodeWidthStr::width(text);
    format!("{text}{}", " ".repeat(cols.saturating_sub(w)))
}

fn list(settings: &Settings, limit: usize) -> Result<i32, CliError> {
    let store = open_store(settings)?;
    let list = store.list_sessions(limit).map_err(runtime)?;
    if list.is_empty() {
        eprintln!("No sessions yet. Start one with `hermes`.");
        return Ok(0);
    }
    let style = term().out_style();
    let when: Vec<String> = list.iter().map(|s| ago(s.updated_at_ms)).collect();
    let dirs: Vec<String> = list
        .iter()
        .map(|s| match (&s.workdir, &s.platform) {
            (Some(d), _) => short_dir(d),
            (None, Some(p)) if p != "cli" => format!("({p})"),
            _ => "-".into(),
        })
        .collect();
    let id_w = list.iter().map(|s| s.id.len()).max().unwrap_or(2).max(2);
    let when_w = when.iter().map(|w| w.len()).max().unwrap_or(4).max(4);
    let dir_w = dirs
        .iter()
        .map(|d| UnicodeWidthStr::width(d.as_str()))
        .max()
        .unwrap_or(3)
        .clamp(3, 30);
    let fixed = id_w + when_w + 5 + 9 + dir_w + 10;
    // Fitted to a terminal; a pipe (grep, a file) gets whole titles.
    let title_w = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        width().saturating_sub(fixed).clamp(12, 60)
    } else {
        60
    };
    println!(
        "{}",
        style.bold(&format!(
            "{}  {}  {}  {:>4}  {}  {}",
            pad("ID", id_w),
            pad("TITLE", title_w),
            pad("WHEN", when_w),
            "MSGS",
            pad("STATUS", 9),
            "DIRECTORY"
        ))
    );
    for (i, s) in list.iter().enumerate() {
        let title = one_line(s.title.as_deref().unwrap_or("(untitled)"), title_w);
        let status = match s.status {
            SessionStatus::Active => style.green("active"),
            SessionStatus::Ended => style.dim("ended"),
            SessionStatus::Suspended => style.yellow("suspended"),
        };
        let status_pad = " ".repeat(9usize.saturating_sub(s.status.as_str().len()));
        println!(
            "{}  {}  {}  {:>4}  {status}{status_pad}  {}",
            pad(&s.id, id_w),
            pad(&title, title_w),
            pad(&when[i], when_w),
            s.message_count,
            one_line(&dirs[i], dir_w)
        );
    }
    Ok(0)
}

fn header(s: &SessionRecord) -> Vec<(&'static str, String)> {
    let mut rows = vec![
        ("id", s.id.clone()),
        ("created", date_time(s.created_at_ms)),
        ("last active", ago(s.updated_at_ms)),
        ("status", s.status.to_string()),
        ("messages", s.message_count.to_string()),
    ];
    if let Some(m) = &s.model {
        rows.push(("model", m.clone()));
    }
    if let Some(d) = &s.workdir {
        rows.push(("directory", d.clone()));
    }
    if let Some(p) = &s.platform {
        rows.push(("platform", p.clone()));
    }
    rows
}

fn show(settings: &Settings, id: &str) -> Result<i32, CliError> {
    let store = open_store(settings)?;
    let s = find_session(&store, id)?;
    let transcript = store.load_transcript(&s.id).map_err(runtime)?;
    let style = term().out_style();
    let styled = term().caps.out_ansi;
    let cols = width();
    println!("{}", style.bold(s.title.as_deref().unwrap_or("(untitled)")));
    for (k, v) in header(&s) {
        println!("{}", style.dim(&format!("{k:<12}{v}")));
    }
    for entry in &transcript {
        match &entry.message {
            Message::User { content, .. } => {
                println!("\n{}", style.cyan("── you"));
                println!("{content}");
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.trim().is_empty()) {
                    println!("\n{}", style.green("── hermes"));
                    let rendered = Markdown::render(styled, cols, text);
                    println!("{}", rendered.trim_end_matches('\n'));
                    if entry.meta.interrupted {
                        println!("{}", style.dim("(interrupted)"));
                    }
                }
                for call in tool_calls {
                    println!(
                        "  {} {} {}",
                        style.dim("⚙"),
                        call.function.name,
                        style.dim(&one_line(&call.function.arguments, cols.saturating_sub(20)))
                    );
                }
            }
            Message::Tool { content, .. } => {
                let first = content.lines().next().unwrap_or("");
                println!(
                    "    {} {}",
                    style.dim("→"),
                    style.dim(&one_line(first, cols.saturating_sub(8)))
                );
            }
        }
    }
    // Tokens, cache share and cost (prices from the configuration, or
    // OpenRouter's list), as `/usage` shows them.
    let store = std::sync::Mutex::new(store);
    let now = hermes_core::Clock::now_ms(&hermes_runtime::store::SystemClock);
    if let Ok(usage) = hermes_runtime::pricing::session_usage_text(settings, &store, &s.id, now) {
        println!("\n{}", style.cyan("── usage"));
        for line in usage.lines() {
            println!("{}", style.dim(line));
        }
    }
    Ok(0)
}

/// The session as markdown or JSON.
pub fn export(settings: &Settings, id: &str, format: ExportFormat) -> Result<String, CliError> {
    let store = open_store(settings)?;
    let s = find_session(&store, id)?;
    let transcript = store.load_transcript(&s.id).map_err(runtime)?;
    Ok(match format {
        ExportFormat::Md => export_md(&s, &transcript),
        ExportFormat::Json => {
            let messages: Vec<serde_json::Value> = transcript.iter().map(entry_json).collect();
            let compactions: Vec<serde_json::Value> = store
                .compactions(&s.id)
                .map_err(runtime)?
                .iter()
                .map(compaction_json)
                .collect();
            let doc = json!({
                "id": s.id,
                "title": s.title,
                "created_at_ms": s.created_at_ms,
                "updated_at_ms": s.updated_at_ms,
                "status": s.status.as_str(),
                "model": s.model,
                "platform": s.platform,
                "workdir": s.workdir,
                "system_prompt": s.system_prompt,
                "messages": messages,
                "compactions": compactions,
            });
            let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
            text.push('\n');
            text
        }
        ExportFormat::Jsonl => {
            let mut lines = vec![json!({
                "type": "session",
                "id": s.id,
                "model": s.model,
                "platform": s.platform,
                "created_at_ms": s.created_at_ms,
                "system_prompt": s.system_prompt,
            })];
            for (seq, entry) in transcript.iter().enumerate() {
                let mut line = serde_json::to_value(&entry.message).map_err(runtime)?;
                line["type"] = "message".into();
                line["seq"] = seq.into();
                line["timestamp_ms"] = entry.meta.timestamp_ms.into();
                lines.push(line);
            }
            for c in &store.compactions(&s.id).map_err(runtime)? {
                let mut line = compaction_json(c);
                line["type"] = "compaction".into();
                lines.push(line);
            }
            lines.iter().map(|l| format!("{l}\n")).collect()
        }
    })
}

fn compaction_json(c: &hermes_runtime::store::StoredCompaction) -> serde_json::Value {
    json!({
        "head_end": c.head_end,
        "tail_start": c.tail_start,
        "end_seq": c.end_seq,
        "summary": c.summary,
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "created_at_ms": c.created_at_ms,
    })
}

fn entry_json(entry: &LedgerEntry) -> serde_json::Value {
    let mut v = serde_json::to_value(&entry.message).unwrap_or(serde_json::Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("timestamp_ms".into(), json!(entry.meta.timestamp_ms));
        if let Some(u) = &entry.meta.usage {
            obj.insert(
                "usage".into(),
                json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}),
            );
        }
        if let Some(f) = &entry.meta.finish_reason {
            obj.insert("finish_reason".into(), json!(f.as_str()));
        }
        if entry.meta.interrupted {
            obj.insert("interrupted".into(), json!(true));
        }
    }
    v
}

/// A fence longer than any backtick run in `text`, so the block cannot end early.
fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn export_md(s: &SessionRecord, transcript: &[LedgerEntry]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {}\n",
        s.title.as_deref().unwrap_or("Untitled session")
    );
    for (k, v) in header(s) {
        if k != "last active" {
            let _ = writeln!(out, "- {k}: {v}");
        }
    }
    for entry in transcript {
        match &entry.message {
            Message::User { content, .. } => {
                let _ = write!(out, "\n## You\n\n{content}\n");
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.trim().is_empty()) {
                    let _ = write!(out, "\n## Hermes\n\n{text}\n");
                    if entry.meta.interrupted {
                        let _ = writeln!(out, "\n*(interrupted)*");
                    }
                }
                for call in tool_calls {
                    let args = &call.function.arguments;
                    let fence = fence_for(args);
                    let _ = write!(
                        out,
                        "\n**Tool call** `{}`\n\n{fence}json\n{args}\n{fence}\n",
                        call.function.name
                    );
                }
            }
            Message::Tool { content, .. } => {
                let fence = fence_for(content);
                let _ = write!(out, "\n**Result**\n\n{fence}\n{content}\n{fence}\n");
            }
        }
    }
    out
}

fn search(settings: &Settings, query: &str, limit: usize) -> Result<i32, CliError> {
    let store = open_store(settings)?;
    let hits = store.search(query, limit).map_err(runtime)?;
    if hits.is_empty() {
        eprintln!("No matches.");
    }
    let style = term().out_style();
    for h in &hits {
        println!(
            "{} {} {}",
            style.bold(&h.session_id),
            style.dim(&format!("#{} {}:", h.seq, h.role)),
            one_line(&h.snippet, width().saturating_sub(h.session_id.len() + 14))
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(1_795_997_703_000), "2026-11-30");
        assert_eq!(date_time(1_795_997_703_000), "2026-11-30 00:15 UTC");
    }

    #[test]
    fn export_fences_outlast_the_content() {
        assert_eq!(fence_for("no ticks"), "```");
        assert_eq!(fence_for("has ```` four"), "`````");
    }
}
