//! `hermes gateway setup` (issue 31, item 9), also offered at the end of
//! `hermes setup`: pick a chat platform, give the bot token (input
//! hidden), have it verified live by the platform (the adapter's own
//! `verify`, as `gateway run --check` does), say who may talk to the bot,
//! and save to `$HERMES_HOME/.env` (mode 0600). Nothing is written until
//! the token was accepted.

use hermes_gateway::platform::{SetupHint, Var};
use hermes_runtime::config::{Environment, Settings};

use crate::app::{CliError, runtime};
use crate::term::{read_secret, term};

/// A platform the wizard sets up: one whose descriptor has a
/// [`SetupHint`] (its bot is one token).
struct Platform {
    label: &'static str,
    /// The adapter's platform name.
    name: &'static str,
    token_var: &'static str,
    /// The token is a credential: read hidden.
    token_secret: bool,
    token_hint: &'static str,
    allow_var: &'static str,
    id_hint: &'static str,
    /// The other settings asked before the token is checked.
    more: &'static [(Var, &'static str)],
}

/// The platforms of this build the wizard can set up, from the registry.
fn platforms() -> Vec<Platform> {
    hermes_gateway::platform::platforms()
        .iter()
        .filter_map(|p| {
            let SetupHint {
                token_var,
                token_secret,
                token_hint,
                id_hint,
                more,
            } = p.setup?;
            Some(Platform {
                label: p.display_name,
                name: p.name,
                token_var,
                token_secret,
                token_hint,
                allow_var: p.allow_var?,
                id_hint,
                more,
            })
        })
        .collect()
}

/// One answer from stdin; `None` at the end of input.
fn answer(prompt: &str) -> Result<Option<String>, CliError> {
    use std::io::Write;
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut s = String::new();
    let n = std::io::stdin()
        .read_line(&mut s)
        .map_err(|e| runtime(format!("cannot read the answer: {e}")))?;
    Ok((n > 0).then(|| s.trim().to_owned()))
}

fn required(prompt: &str) -> Result<String, CliError> {
    answer(prompt)?.ok_or_else(|| {
        CliError::Config("gateway setup needs answers on stdin; nothing was saved".into())
    })
}

/// Asks "connect a chat platform now?" (end of input: no) and runs the
/// wizard on yes. For `hermes setup`.
pub fn offer(settings: &Settings) -> Result<(), CliError> {
    let labels: Vec<&str> = platforms().iter().map(|p| p.label).collect();
    if labels.is_empty() {
        return Ok(());
    }
    let yes = answer(&format!(
        "\nConnect a chat platform ({}) now? [y/N]: ",
        labels.join(", ")
    ))?
    .is_some_and(|a| a.eq_ignore_ascii_case("y") || a.eq_ignore_ascii_case("yes"));
    if yes {
        run(settings)?;
    } else {
        eprintln!("Later: {}", term().err_style().cyan("hermes gateway setup"));
    }
    Ok(())
}

/// Runs the wizard; 0 when the platform was saved, 1 when the operator
/// quit (nothing saved).
pub fn run(settings: &Settings) -> Result<i32, CliError> {
    let style = term().err_style();
    let platforms = platforms();
    if platforms.is_empty() {
        return Err(CliError::Config(
            "this hermes was built without a platform `gateway setup` can set up; nothing was saved"
                .into(),
        ));
    }
    eprintln!("{}", style.bold("Connect hermes to a chat platform."));
    for (i, p) in platforms.iter().enumerate() {
        eprintln!("  {}) {}", i + 1, p.label);
    }
    let platform = loop {
        let picked = required(&format!("Platform [1-{}, default 1]: ", platforms.len()))?;
        let index = if picked.is_empty() {
            Some(0)
        } else {
            picked.parse::<usize>().ok().and_then(|n| n.checked_sub(1))
        };
        match index.and_then(|i| platforms.get(i)) {
            Some(p) => break p,
            None => eprintln!("Please answer with a number from the list."),
        }
    };
    // The rest of what the bot needs, before the token can be checked.
    let mut more: Vec<(&'static str, String)> = Vec::new();
    for (var, hint) in platform.more {
        let prompt = format!(
            "{} ({hint}){}: ",
            var.name,
            if var.secret { ", input hidden" } else { "" }
        );
        let value = if var.secret {
            read_secret(&prompt).map_err(|e| runtime(format!("cannot read {}: {e}", var.name)))?
        } else {
            required(&prompt)?
        };
        if value.trim().is_empty() {
            return Err(CliError::Config(format!(
                "no {} given; nothing was saved",
                var.name
            )));
        }
        more.push((var.name, value.trim().to_owned()));
    }
    let (token, bot) = loop {
        let token = if platform.token_secret {
            read_secret(&format!(
                "{} bot token, {} (input hidden): ",
                platform.label, platform.token_hint
            ))
            .map_err(|e| runtime(format!("cannot read the token: {e}")))?
        } else {
            required(&format!(
                "{} ({}): ",
                platform.token_var, platform.token_hint
            ))?
        };
        if token.is_empty() {
            return Err(CliError::Config("no token given; nothing was saved".into()));
        }
        eprintln!("Asking {} about the token …", platform.label);
        match verify(settings, platform, &token, &more) {
            Ok(bot) => {
                eprintln!("{} {bot}", style.green("✓"));
                break (token, bot);
            }
            Err(why) => {
                eprintln!("{} {why}", style.red("✗"));
                let next = required("[r]etry with another token, [q]uit: ")?;
                if next.starts_with(['q', 'Q']) {
                    eprintln!("Nothing was saved.");
                    return Ok(1);
                }
            }
        }
    };
    let allowed = loop {
        let ids = required(&format!(
            "Who may talk to the bot: {}, comma-separated\n  (Enter: nobody yet — strangers get a pairing code you approve with `hermes pairing approve`): ",
            platform.id_hint
        ))?;
        let ids: Vec<&str> = ids
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        // Telegram's and Discord's ids are numbers, WhatsApp's phone
        // numbers digits, Slack's letters and digits (`U012AB3CD`), Signal's
        // `+` numbers or UUIDs (hex and `-`).
        let numeric = platform.id_hint.contains("numeric") || platform.id_hint.contains("digits");
        match ids.iter().find(|id| {
            !id.chars().all(|c| {
                c.is_ascii_digit()
                    || !numeric && (c.is_ascii_alphanumeric() || matches!(c, '+' | '-'))
            })
        }) {
            Some(bad) if numeric => eprintln!("`{bad}` is not a numeric user id; try again."),
            Some(bad) => eprintln!("`{bad}` is not a user id; try again."),
            None => break ids.join(","),
        }
    };
    let dotenv = settings.home.join(".env");
    std::fs::create_dir_all(&settings.home)
        .map_err(|e| runtime(format!("cannot create {}: {e}", settings.home.display())))?;
    crate::setup::write_dotenv_key(&dotenv, platform.token_var, &token)?;
    for (name, value) in &more {
        crate::setup::write_dotenv_key(&dotenv, name, value)?;
    }
    if !allowed.is_empty() {
        crate::setup::write_dotenv_key(&dotenv, platform.allow_var, &allowed)?;
    }
    let who = if allowed.is_empty() {
        "nobody is allowed yet (pairing codes)".to_owned()
    } else {
        format!("{} = {allowed}", platform.allow_var)
    };
    eprintln!(
        "\n{} Saved {} for {bot}; {who} — in {} (mode 0600).\nCheck it: {}\nStart it: {}",
        style.green("✓"),
        platform.token_var,
        dotenv.display(),
        style.cyan("hermes gateway run --check"),
        style.cyan("hermes gateway run")
    );
    Ok(0)
}

/// The platform's own check of `token` with the `more` settings
/// (`getMe`, `users/@me`, the WhatsApp number): what answered, or a
/// sentence saying what is wrong.
fn verify(
    settings: &Settings,
    platform: &Platform,
    token: &str,
    more: &[(&'static str, String)],
) -> Result<String, String> {
    let mut trial = settings.clone();
    let given: Vec<(String, String)> = more
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .chain([(platform.token_var.to_owned(), token.to_owned())])
        .collect();
    trial.env = Environment::from_pairs(
        settings
            .env
            .iter()
            .filter(|(k, _)| !given.iter().any(|(g, _)| g == k))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .chain(given.iter().cloned()),
    );
    let bot = hermes_gateway::check::verify_platform(&trial, platform.name)?;
    Ok(bot.map_or_else(
        || format!("{} accepted the token", platform.label),
        |b| format!("{}: {b}", platform.label),
    ))
}
