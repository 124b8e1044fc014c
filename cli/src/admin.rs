//! `hermes doctor`, `hermes config`, `hermes models`.

use hermes_core::{ModelErrorKind, WindowSource};
use hermes_runtime::client::ClientError;
use hermes_runtime::config::{ConfigError, Settings, unknown_var};
use hermes_runtime::context;
use hermes_runtime::secret::Secret;
use hermes_runtime::tools::SandboxStatus;

use crate::app::{CliError, client};
use crate::term::term;

/// Prints the effective configuration with origins; secrets masked (SPEC E2).
pub fn config_show(settings: &Settings) {
    let origin = |k: &str| {
        settings
            .origins
            .get(k)
            .map_or_else(|| "default".to_owned(), ToString::to_string)
    };
    let file = settings.home.join("config.toml");
    println!("HERMES_HOME      {}", settings.home.display());
    println!(
        "config.toml      {}{}",
        file.display(),
        if file.exists() {
            ""
        } else {
            "  (not created yet: `hermes setup` writes one)"
        }
    );
    println!("provider         {}", settings.provider.provider_name);
    println!(
        "base_url         {}  ({})",
        settings.provider.display_url(),
        origin("base_url")
    );
    println!(
        "api_key          {}  ({})",
        settings
            .provider
            .api_key
            .as_ref()
            .map_or_else(|| "(none)".to_owned(), Secret::to_string),
        origin("api_key")
    );
    println!(
        "model            {}  ({})",
        settings.provider.model,
        origin("model")
    );
    let p = &settings.provider;
    if p.api != hermes_runtime::config::Api::OpenAi {
        println!("api              {}", p.api.as_str());
    }
    if let Some(effort) = &p.reasoning_effort {
        println!(
            "reasoning_effort {effort}  ({})",
            origin("reasoning_effort")
        );
    }
    for (n, f) in p.fallbacks.iter().enumerate() {
        println!(
            "fallback {}       {} at {} (key {}, {})  ({})",
            n + 1,
            f.model,
            f.base_url,
            f.api_key
                .as_ref()
                .map_or_else(|| "none".to_owned(), Secret::to_string),
            f.api.as_str(),
            origin("fallback")
        );
    }
    println!(
        "first_byte_timeout {}s  ({})",
        settings.provider.first_byte_timeout.as_secs(),
        origin("first_byte_timeout")
    );
    println!(
        "call_timeout     {}s  ({})",
        settings.provider.call_timeout.as_secs(),
        origin("call_timeout")
    );
    println!(
        "max_iterations   {}  ({})",
        settings.max_iterations,
        origin("max_iterations")
    );
    println!(
        "toolsets         {}",
        match &settings.toolsets {
            None => "all".to_owned(),
            Some(t) if t.is_empty() => "none".to_owned(),
            Some(t) => t.join(","),
        }
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
    println!("approvals        {}", settings.approvals);
    let search = &settings.web_search;
    println!(
        "web search       {}{}",
        search.effective_backend().name(),
        search
            .searxng_url
            .as_deref()
            .map_or_else(String::new, |u| format!("  ({u})"))
    );
    if let Some(tts) = &settings.media.tts {
        println!(
            "speech           {}  (model {}, voice {}, {}; key {})",
            hermes_runtime::redact::redact_url(&tts.base_url),
            tts.model,
            tts.voice,
            tts.format.api_name(),
            tts.api_key
                .as_ref()
                .map_or_else(|| "none".to_owned(), |k| k.to_string())
        );
    }
    if !settings.mcp_servers.is_empty() {
        let names: Vec<&str> = settings
            .mcp_servers
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        println!(
            "mcp servers      {}  (`hermes mcp list` starts them)",
            names.join(", ")
        );
    }
    println!(
        "database         {}{}",
        settings.store_target().shown(),
        settings
            .origins
            .get("store_url")
            .map_or_else(String::new, |o| format!("  ({o})"))
    );
}

/// `hermes doctor` when the configuration does not even load: every
/// problem, then exit 2.
pub fn doctor_config_error(error: &ConfigError) -> i32 {
    let style = term().out_style();
    let problems: Vec<String> = match error {
        ConfigError::Several(all) => all.iter().map(ToString::to_string).collect(),
        one => vec![one.to_string()],
    };
    for p in &problems {
        println!("{} configuration: {p}", style.red("✗"));
    }
    println!(
        "    → fix the lines above (or move the file aside and run `hermes setup`)\n{} configuration problem(s).",
        problems.len()
    );
    2
}

/// What a failed `GET /models` means and what to do about it.
fn provider_fix(settings: &Settings, e: &ClientError) -> &'static str {
    match e {
        ClientError::Model(m) => match m.kind {
            ModelErrorKind::Status(401 | 403) if settings.provider.api_key.is_none() => {
                "the provider wants an API key: set HERMES_API_KEY (or --api-key), or run `hermes setup`"
            }
            ModelErrorKind::Status(401 | 403) => {
                "the provider refused the API key: check it (`hermes config show` says where it comes from) or run `hermes setup`"
            }
            ModelErrorKind::Status(404) => {
                "nothing answers at that path: the base URL usually ends in /v1"
            }
            ModelErrorKind::Status(_) => {
                "the provider answered with an error; see its message above"
            }
            _ => {
                "start the server (e.g. `ollama serve`), or run `hermes setup` / set --base-url to a provider you can reach"
            }
        },
        _ => "fix the base URL (`hermes setup` writes a working one)",
    }
}

/// Checks everything and says how to fix what is wrong. Exit 0 when all is well.
pub fn doctor(settings: &Settings) -> i32 {
    let style = term().out_style();
    let mut problems = 0;
    let mut check = |ok: bool, what: String, fix: &str| {
        if ok {
            println!("{} {what}", style.green("✓"));
        } else {
            problems += 1;
            println!("{} {what}\n    → {fix}", style.red("✗"));
        }
    };
    check(
        true,
        format!(
            "configuration valid (provider {}, model {}, key {})",
            settings.provider.provider_name,
            settings.provider.model,
            settings
                .provider
                .api_key
                .as_ref()
                .map_or_else(|| "none".to_owned(), Secret::to_string)
        ),
        "",
    );
    if !settings.home.join("config.toml").exists() {
        println!(
            "· no {} yet (optional; `hermes setup` writes one)",
            settings.home.join("config.toml").display()
        );
    }
    for (name, _) in settings.env.iter() {
        if let Some(why) = unknown_var(name) {
            println!("{} environment: {why}", style.yellow("!"));
        }
    }
    let listed = client(settings, &settings.provider.model)
        .map_err(|e| {
            (
                e.message().to_owned(),
                "fix the base URL (`hermes setup` writes a working one)",
            )
        })
        .and_then(|c| {
            c.list_models()
                .map_err(|e| (e.to_string(), provider_fix(settings, &e)))
        });
    match listed {
        Ok(models) => {
            check(
                true,
                format!(
                    "provider reachable at {} ({} models: {})",
                    settings.provider.display_url(),
                    models.len(),
                    preview(&models)
                ),
                "",
            );
            let offered = models.iter().any(|m| m == &settings.provider.model);
            let fix = format!(
                "pick one with --model, HERMES_MODEL or `hermes setup`; the provider offers: {}",
                preview(&models)
            );
            check(
                models.is_empty() || offered,
                format!(
                    "model '{}' offered by the provider",
                    settings.provider.model
                ),
                &fix,
            );
            if let Ok(c) = client(settings, &settings.provider.model) {
                // Doctor always asks the provider, and refreshes the
                // window later runs take from the store's cache.
                let w = match crate::app::open_store(settings) {
                    Ok(store) => context::Windows::with_store(std::sync::Arc::new(
                        std::sync::Mutex::new(store),
                    ))
                    .refresh(settings, &c, &settings.provider.model),
                    Err(_) => context::resolve(settings, &c, &settings.provider.model),
                };
                let line = format!(
                    "context window {} tokens (from {}: {})",
                    w.tokens, w.source, w.detail
                );
                if w.source == WindowSource::Default {
                    // Not a failure: compaction works with the default, it
                    // only starts earlier (or later) than it should.
                    println!(
                        "{} {line}\n    → the provider does not say how big the model's context window is; \
                         set [provider] context_length (or HERMES_CONTEXT_LENGTH) to the server's setting",
                        style.yellow("!")
                    );
                } else {
                    check(true, line, "");
                }
            }
        }
        Err((message, fix)) => {
            check(
                false,
                format!(
                    "provider reachable at {}: {message}",
                    settings.provider.display_url()
                ),
                fix,
            );
        }
    }
    let database_problems = crate::dbcheck::report(settings);
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
    // Each platform's own checks (Discord: the token and the MESSAGE
    // CONTENT switch).
    #[cfg(feature = "gateway")]
    for platform in hermes_gateway::platform::platforms() {
        for line in (platform.doctor)(settings) {
            check(line.ok, line.text, &line.fix);
        }
    }
    // Spoken replies (`[tts]`): one short sentence asked of the service.
    if let Some(tts) = &settings.media.tts {
        match hermes_runtime::media::tts::Speaker::new(tts.clone()).check() {
            Ok(line) => check(true, line, ""),
            Err(e) => check(
                false,
                e.to_string(),
                "check [tts] base_url, model and voice, and HERMES_TTS_API_KEY if the service wants a key",
            ),
        }
    }
    for name in ["SOUL.md", "MEMORY.md", "USER.md"] {
        let path = settings.home.join(name);
        match std::fs::metadata(&path) {
            Ok(m) => println!(
                "{} {} ({} bytes)",
                style.green("✓"),
                path.display(),
                m.len()
            ),
            Err(_) => println!("· {} not present (optional)", path.display()),
        }
    }
    let project = ["HERMES.md", "AGENTS.md"]
        .iter()
        .map(|n| settings.workdir.join(n))
        .find(|p| p.is_file());
    match project {
        Some(p) => println!("{} project instructions {}", style.green("✓"), p.display()),
        None => println!(
            "· no HERMES.md or AGENTS.md in {} (optional)",
            settings.workdir.display()
        ),
    }
    let problems = problems + database_problems;
    if problems == 0 {
        println!("All checks passed.");
        0
    } else {
        println!("{problems} problem(s) found.");
        1
    }
}

/// Up to ten names, and how many more.
fn preview(models: &[String]) -> String {
    let mut shown: Vec<&str> = models.iter().take(10).map(String::as_str).collect();
    if models.len() > 10 {
        shown.push("…");
    }
    shown.join(", ")
}

/// The models, one a line, the current one marked.
pub fn model_table(models: &[String], current: &str) -> String {
    if models.is_empty() {
        return "The provider lists no models.".to_owned();
    }
    let style = term().out_style();
    models
        .iter()
        .map(|m| {
            if m == current {
                format!("{} {}", style.green("*"), style.bold(m))
            } else {
                format!("  {m}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `hermes models`.
pub fn models(settings: &Settings) -> Result<i32, CliError> {
    let c = client(settings, &settings.provider.model)?;
    let models = c.list_models().map_err(|e| {
        CliError::Runtime(format!(
            "cannot list the models of {}: {e}\n  {}",
            settings.provider.display_url(),
            provider_fix(settings, &e)
        ))
    })?;
    println!("{}", model_table(&models, &settings.provider.model));
    Ok(0)
}
