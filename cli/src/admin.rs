//! `hermes doctor`, `hermes config show`, `hermes sessions …`.

use hermes_core::WindowSource;
use hermes_runtime::config::{Settings, mask};
use hermes_runtime::context;
use hermes_runtime::store::SessionRecord;
use hermes_runtime::tools::SandboxStatus;

use crate::app::{CliError, client, open_store, runtime};

/// Prints the effective configuration with origins; secrets masked (SPEC E2).
pub fn config_show(settings: &Settings) {
    let origin = |k: &str| {
        settings
            .origins
            .get(k)
            .map_or_else(|| "default".to_owned(), ToString::to_string)
    };
    println!("HERMES_HOME      {}", settings.home.display());
    println!("provider         {}", settings.provider.provider_name);
    println!(
        "base_url         {}  ({})",
        settings.provider.base_url,
        origin("base_url")
    );
    println!(
        "api_key          {}  ({})",
        settings
            .provider
            .api_key
            .as_deref()
            .map_or_else(|| "(none)".to_owned(), mask),
        origin("api_key")
    );
    println!(
        "model            {}  ({})",
        settings.provider.model,
        origin("model")
    );
    println!(
        "max_iterations   {}  ({})",
        settings.max_iterations,
        origin("max_iterations")
    );
    println!(
        "toolsets         {}",
        settings
            .toolsets
            .as_ref()
            .map_or_else(|| "all".to_owned(), |t| t.join(","))
    );
    println!("workdir          {}", settings.workdir.display());
    println!(
        "sandbox          {}{}",
        settings.sandbox,
        if settings.allow_outside_workdir {
            "  (file tools may leave the working directory)"
        } else {
            ""
        }
    );
    if !settings.env_passthrough.is_empty() {
        println!("env_passthrough  {}", settings.env_passthrough.join(","));
    }
    println!("database         {}", settings.state_db().display());
}

/// Checks everything and says how to fix what is wrong. Exit 0 when all is well.
pub fn doctor(settings: &Settings) -> i32 {
    let mut problems = 0;
    let mut check = |ok: bool, what: String, fix: &str| {
        if ok {
            println!("✓ {what}");
        } else {
            problems += 1;
            println!("✗ {what}\n    → {fix}");
        }
    };
    check(
        true,
        format!(
            "configuration loads (provider {}, model {}, key {})",
            settings.provider.provider_name,
            settings.provider.model,
            settings
                .provider
                .api_key
                .as_deref()
                .map_or_else(|| "none".to_owned(), mask)
        ),
        "",
    );
    match client(settings, &settings.provider.model).and_then(|c| c.list_models().map_err(runtime))
    {
        Ok(models) => {
            check(
                true,
                format!(
                    "provider reachable at {} ({} models)",
                    settings.provider.base_url,
                    models.len()
                ),
                "",
            );
            check(
                models.is_empty() || models.iter().any(|m| m == &settings.provider.model),
                format!(
                    "model '{}' offered by the provider",
                    settings.provider.model
                ),
                "pick one the provider lists (GET /models) with --model or HERMES_MODEL",
            );
            if let Ok(c) = client(settings, &settings.provider.model) {
                let w = context::resolve(settings, &c, &settings.provider.model);
                let line = format!(
                    "context window {} tokens (from {}: {})",
                    w.tokens, w.source, w.detail
                );
                if w.source == WindowSource::Default {
                    // Not a failure: compaction works with the default, it
                    // only starts earlier (or later) than it should.
                    println!(
                        "! {line}\n    → the provider does not say how big the model's context window is; \
                         set [provider] context_length (or HERMES_CONTEXT_LENGTH) to the server's setting"
                    );
                } else {
                    check(true, line, "");
                }
            }
        }
        Err(e) => check(
            false,
            format!(
                "provider reachable at {}: {}",
                settings.provider.base_url,
                e.message()
            ),
            "start the server, or set --base-url/HERMES_BASE_URL (and an API key) to a provider you can reach",
        ),
    }
    match open_store(settings).and_then(|s| s.list_sessions(1_000_000).map_err(runtime)) {
        Ok(list) => check(
            true,
            format!(
                "database {} ({} sessions)",
                settings.state_db().display(),
                list.len()
            ),
            "",
        ),
        Err(e) => check(
            false,
            format!(
                "database {}: {}",
                settings.state_db().display(),
                e.message()
            ),
            "check that HERMES_HOME is writable; move a damaged state.db aside to start fresh",
        ),
    }
    let terminal_on = settings
        .toolsets
        .as_ref()
        .is_none_or(|t| t.iter().any(|n| n == "terminal"));
    let sandbox = SandboxStatus::probe(settings.sandbox);
    let mut lines = sandbox.describe().into_iter();
    if let Some(first) = lines.next() {
        check(
            !(terminal_on && sandbox.refuses_commands()),
            first,
            "use a kernel with Landlock (Linux 5.19+), or opt out with [agent] sandbox = \"off\" / --no-sandbox",
        );
    }
    for line in lines {
        println!("· {line}");
    }
    for name in ["SOUL.md", "MEMORY.md", "USER.md"] {
        let path = settings.home.join(name);
        match std::fs::metadata(&path) {
            Ok(m) => println!("✓ {} ({} bytes)", path.display(), m.len()),
            Err(_) => println!("· {} not present (optional)", path.display()),
        }
    }
    let project = ["HERMES.md", "AGENTS.md"]
        .iter()
        .map(|n| settings.workdir.join(n))
        .find(|p| p.is_file());
    match project {
        Some(p) => println!("✓ project instructions {}", p.display()),
        None => println!(
            "· no HERMES.md or AGENTS.md in {} (optional)",
            settings.workdir.display()
        ),
    }
    if problems == 0 {
        println!("All checks passed.");
        0
    } else {
        println!("{problems} problem(s) found.");
        1
    }
}

fn describe(s: &SessionRecord) -> String {
    format!(
        "{}  {:>4} msgs  {:<9}  {}{}",
        s.id,
        s.message_count,
        s.status.to_string(),
        s.model.as_deref().unwrap_or("-"),
        s.title
            .as_deref()
            .map(|t| format!("  {t}"))
            .unwrap_or_default()
    )
}

/// `hermes sessions list`.
pub fn sessions_list(settings: &Settings, limit: usize) -> Result<i32, CliError> {
    let store = open_store(settings)?;
    let list = store.list_sessions(limit).map_err(runtime)?;
    if list.is_empty() {
        eprintln!("No sessions yet. Start one with `hermes chat`.");
    }
    for s in &list {
        println!("{}", describe(s));
    }
    Ok(0)
}

/// `hermes sessions search QUERY`.
pub fn sessions_search(settings: &Settings, query: &str, limit: usize) -> Result<i32, CliError> {
    let store = open_store(settings)?;
    let hits = store.search(query, limit).map_err(runtime)?;
    if hits.is_empty() {
        eprintln!("No matches.");
    }
    for h in &hits {
        println!("{} #{} {}: {}", h.session_id, h.seq, h.role, h.snippet);
    }
    Ok(0)
}

/// `hermes sessions export ID`: every stored message of the session (the
/// originals, also those a compaction replaced in the model's view) and
/// every compaction, as JSON lines.
pub fn sessions_export(settings: &Settings, id: &str) -> Result<i32, CliError> {
    use std::io::Write;
    let store = open_store(settings)?;
    let Some(session) = store.session(id).map_err(runtime)? else {
        return Err(CliError::Config(format!(
            "no session '{id}'; `hermes sessions list` shows the stored ones"
        )));
    };
    let messages = store.load_transcript(id).map_err(runtime)?;
    let compactions = store.compactions(id).map_err(runtime)?;
    let mut out = std::io::stdout().lock();
    let mut lines = vec![serde_json::json!({
        "type": "session",
        "id": session.id,
        "model": session.model,
        "platform": session.platform,
        "created_at_ms": session.created_at_ms,
        "system_prompt": session.system_prompt,
    })];
    for (seq, entry) in messages.iter().enumerate() {
        let mut line = serde_json::to_value(&entry.message).map_err(runtime)?;
        line["type"] = "message".into();
        line["seq"] = seq.into();
        line["timestamp_ms"] = entry.meta.timestamp_ms.into();
        lines.push(line);
    }
    for c in &compactions {
        lines.push(serde_json::json!({
            "type": "compaction",
            "head_end": c.head_end,
            "tail_start": c.tail_start,
            "end_seq": c.end_seq,
            "summary": c.summary,
            "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after,
            "created_at_ms": c.created_at_ms,
        }));
    }
    for line in lines {
        if let Err(e) = writeln!(out, "{line}") {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(0);
            }
            return Err(runtime(format!("cannot write the export: {e}")));
        }
    }
    Ok(0)
}
