//! `hermes setup`: the first-run wizard. Pick where the model runs, give a
//! key if it needs one, test the connection, pick a model from the
//! provider's `/models`, and save: `[provider]` in `config.toml`, the key in
//! `$HERMES_HOME/.env` (mode 0600), never in `config.toml`.

use std::io::Write;
use std::path::Path;

use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::config::{Environment, did_you_mean, hermes_home};

use crate::app::{CliError, runtime};
use crate::term::{read_secret, term};

/// A provider the wizard offers.
struct Choice {
    label: &'static str,
    url: &'static str,
    /// Needs a key; the variable a key may already be in.
    key: Option<&'static str>,
    /// A model to suggest when the provider lists none.
    default_model: &'static str,
}

const CHOICES: &[Choice] = &[
    Choice {
        label: "Ollama (local)",
        url: "http://127.0.0.1:11434/v1",
        key: None,
        default_model: "hermes3",
    },
    Choice {
        label: "llama.cpp server (local)",
        url: "http://127.0.0.1:8080/v1",
        key: None,
        default_model: "default",
    },
    Choice {
        label: "LM Studio (local)",
        url: "http://127.0.0.1:1234/v1",
        key: None,
        default_model: "default",
    },
    Choice {
        label: "OpenRouter",
        url: "https://openrouter.ai/api/v1",
        key: Some("OPENROUTER_API_KEY"),
        default_model: "nousresearch/hermes-4-70b",
    },
    Choice {
        label: "OpenAI",
        url: "https://api.openai.com/v1",
        key: Some("OPENAI_API_KEY"),
        default_model: "gpt-4o-mini",
    },
];

/// Reads answers line by line from stdin; prompts go to stderr.
struct Ask;

impl Ask {
    fn line(&mut self, prompt: &str) -> Result<String, CliError> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut s = String::new();
        let n = std::io::stdin()
            .read_line(&mut s)
            .map_err(|e| runtime(format!("cannot read the answer: {e}")))?;
        if n == 0 {
            return Err(CliError::Config(
                "setup needs answers on stdin; nothing was saved".into(),
            ));
        }
        Ok(s.trim().to_owned())
    }
}

/// Runs the wizard; exit code 0 when a configuration was saved.
pub fn run(env: &Environment) -> Result<i32, CliError> {
    let home = hermes_home(env).map_err(|e| CliError::Config(e.to_string()))?;
    let style = term().err_style();
    let mut ask = Ask;
    eprintln!(
        "{}\nConfiguration goes to {}.\n",
        style.bold("Hermes setup: choose where the model runs."),
        home.display()
    );
    loop {
        for (i, c) in CHOICES.iter().enumerate() {
            eprintln!("  {}) {:<26} {}", i + 1, c.label, style.dim(c.url));
        }
        eprintln!(
            "  {}) {:<26} {}",
            CHOICES.len() + 1,
            "Another server",
            style.dim("any OpenAI-compatible base URL")
        );
        let picked = ask.line(&format!("Choice [1-{}, default 1]: ", CHOICES.len() + 1))?;
        let index = if picked.is_empty() {
            0
        } else {
            match picked.parse::<usize>() {
                Ok(n) if (1..=CHOICES.len() + 1).contains(&n) => n - 1,
                _ => {
                    eprintln!("Please answer with a number from the list.\n");
                    continue;
                }
            }
        };
        let (base_url, key_var, suggested) = match CHOICES.get(index) {
            Some(c) => (c.url.to_owned(), c.key, c.default_model),
            None => {
                let url = ask.line("Base URL (e.g. http://192.168.1.5:8000/v1): ")?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    eprintln!("The URL must start with http:// or https://.\n");
                    continue;
                }
                (url.trim_end_matches('/').to_owned(), Some(""), "")
            }
        };
        let api_key = match key_var {
            None => None,
            Some(var) => {
                let existing = (!var.is_empty()).then(|| env.get(var)).flatten();
                let prompt = match (existing, var) {
                    (Some(_), _) => format!("API key (Enter keeps ${var}; input hidden): "),
                    (None, "") => "API key (Enter for none; input hidden): ".to_owned(),
                    (None, _) => "API key (input hidden): ".to_owned(),
                };
                let typed = read_secret(&prompt)
                    .map_err(|e| runtime(format!("cannot read the key: {e}")))?;
                match (typed.is_empty(), existing) {
                    (false, _) => Some(typed),
                    (true, Some(k)) => Some(k.to_owned()),
                    (true, None) if var.is_empty() => None,
                    (true, None) => {
                        eprintln!("{} needs an API key.\n", base_url);
                        continue;
                    }
                }
            }
        };
        eprintln!("Connecting to {base_url} …");
        let models = OpenAiClient::new(ClientOptions {
            base_url: base_url.clone(),
            api_key: api_key.clone(),
            model: "setup".into(),
            max_attempts: 1,
            ..ClientOptions::default()
        })
        .map_err(|e| e.to_string())
        .and_then(|c| c.list_models().map_err(|e| e.to_string()));
        let models = match models {
            Ok(m) => {
                eprintln!(
                    "{} connected ({} model{}).",
                    style.green("✓"),
                    m.len(),
                    if m.len() == 1 { "" } else { "s" }
                );
                m
            }
            Err(e) => {
                eprintln!("{} {e}", style.red("✗"));
                let next =
                    ask.line("[r]etry, [c]hoose another provider, [s]ave anyway, [q]uit: ")?;
                match next.chars().next().unwrap_or('r') {
                    's' | 'S' => Vec::new(),
                    'q' | 'Q' => {
                        eprintln!("Nothing was saved.");
                        return Ok(1);
                    }
                    _ => {
                        eprintln!();
                        continue;
                    }
                }
            }
        };
        let model = pick_model(&mut ask, &models, suggested)?;
        save(&home, &base_url, &model, api_key.as_deref())?;
        eprintln!(
            "\n{} Saved {} and model {}.\nTry it: {}",
            style.green("✓"),
            home.join("config.toml").display(),
            style.bold(&model),
            style.cyan("hermes -z \"hello\"")
        );
        #[cfg(feature = "gateway")]
        crate::gateway_setup::offer(&crate::app::load_settings(
            &crate::args::ProviderArgs::default(),
        )?)?;
        return Ok(0);
    }
}

fn pick_model(ask: &mut Ask, models: &[String], suggested: &str) -> Result<String, CliError> {
    if models.is_empty() {
        let typed = ask.line(&format!(
            "Model name{}: ",
            if suggested.is_empty() {
                String::new()
            } else {
                format!(" [{suggested}]")
            }
        ))?;
        return match (typed.is_empty(), suggested.is_empty()) {
            (false, _) => Ok(typed),
            (true, false) => Ok(suggested.to_owned()),
            (true, true) => Err(CliError::Config(
                "a model name is needed; nothing was saved".into(),
            )),
        };
    }
    let mut shown: Vec<&String> = models.iter().collect();
    loop {
        for (i, m) in shown.iter().take(30).enumerate() {
            eprintln!("  {:>2}) {m}", i + 1);
        }
        if shown.len() > 30 {
            eprintln!(
                "  … {} more: type part of a name to narrow the list",
                shown.len() - 30
            );
        }
        let default = shown
            .iter()
            .position(|m| m.as_str() == suggested)
            .unwrap_or(0);
        let typed = ask.line(&format!(
            "Model [number or name, default {}]: ",
            default + 1
        ))?;
        if typed.is_empty() {
            return Ok(shown[default].clone());
        }
        if let Ok(n) = typed.parse::<usize>()
            && (1..=shown.len().min(30)).contains(&n)
        {
            return Ok(shown[n - 1].clone());
        }
        if let Some(exact) = models.iter().find(|m| **m == typed) {
            return Ok(exact.clone());
        }
        let narrowed: Vec<&String> = models
            .iter()
            .filter(|m| m.to_lowercase().contains(&typed.to_lowercase()))
            .collect();
        match narrowed.len() {
            1 => return Ok(narrowed[0].clone()),
            0 => {
                let hint = did_you_mean(&typed, models.iter().map(String::as_str))
                    .map(|m| format!(" Did you mean {m}?"))
                    .unwrap_or_default();
                eprintln!("No model matches '{typed}'.{hint}");
            }
            _ => shown = narrowed,
        }
    }
}

/// Writes `[provider]` into config.toml (other sections kept; the old file
/// saved as config.toml.bak) and the key into .env (mode 0600).
fn save(home: &Path, base_url: &str, model: &str, api_key: Option<&str>) -> Result<(), CliError> {
    std::fs::create_dir_all(home)
        .map_err(|e| runtime(format!("cannot create {}: {e}", home.display())))?;
    let path = home.join("config.toml");
    let mut table: toml::Table = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let _ = std::fs::write(home.join("config.toml.bak"), &text);
            text.parse().unwrap_or_default()
        }
        Err(_) => toml::Table::new(),
    };
    let provider = table
        .entry("provider")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !provider.is_table() {
        *provider = toml::Value::Table(toml::Table::new());
    }
    if let Some(p) = provider.as_table_mut() {
        p.insert("base_url".into(), toml::Value::String(base_url.into()));
        p.insert("model".into(), toml::Value::String(model.into()));
        // The key lives in .env; a stale one here would only confuse.
        if api_key.is_some() {
            p.remove("api_key");
        }
    }
    let text = format!(
        "# Written by `hermes setup`; see docs/src/configuration.md for every key.\n{}",
        toml::to_string(&table).map_err(|e| runtime(format!("cannot write config.toml: {e}")))?
    );
    std::fs::write(&path, text)
        .map_err(|e| runtime(format!("cannot write {}: {e}", path.display())))?;
    if let Some(key) = api_key {
        write_dotenv_key(&home.join(".env"), "HERMES_API_KEY", key)?;
    }
    Ok(())
}

/// Sets `name=value` in the `.env` file at `path` (other lines kept),
/// mode 0600.
pub(crate) fn write_dotenv_key(path: &Path, name: &str, value: &str) -> Result<(), CliError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = old
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("export ").unwrap_or(l);
            !l.starts_with(&format!("{name}="))
        })
        .map(str::to_owned)
        .collect();
    lines.push(format!("{name}={value}"));
    let err = |e: std::io::Error| runtime(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    // An existing file keeps its mode on open; a secret's file must not.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    file.write_all((lines.join("\n") + "\n").as_bytes())
        .map_err(err)?;
    Ok(())
}
