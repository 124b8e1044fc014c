//! `hermes usage`: the owner's view of everyone's spending today and this
//! month (issue 44), from the accounts the gateway keeps in the store
//! ([`hermes_runtime::spending`]), with the configured caps.

use hermes_runtime::config::Settings;
use hermes_runtime::spending::{BOT_ACCOUNT, Spent};

use crate::app::{CliError, open_store};

/// Prints one line per account, the bot's total last.
pub fn run(settings: &Settings) -> Result<i32, CliError> {
    let limits = settings
        .spending_limits()
        .map_err(|e| CliError::Config(e.to_string()))?;
    let store = open_store(settings)?;
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
    )
    .unwrap_or(u64::MAX);
    let everyone = limits
        .everyone(&store, now)
        .map_err(|e| CliError::Config(format!("cannot read the accounts: {e}")))?;
    let p = limits.periods(now);
    println!(
        "Usage on {} and in {} ({}):",
        &p.day_key()[2..],
        &p.month_key()[2..],
        limits.tz.iana_name().unwrap_or("system time zone")
    );
    if everyone.is_empty() {
        println!("No usage yet.");
    }
    let usd = |m: u64| m as f64 / 1e6;
    for (account, s) in &everyone {
        let Spent {
            day_tokens,
            month_tokens,
            day_micro_usd,
            month_micro_usd,
            ..
        } = *s;
        let name = if account == BOT_ACCOUNT {
            "everyone"
        } else {
            account
        };
        println!(
            "{name:<24} today {day_tokens:>10} tokens ${:>9.4}   month {month_tokens:>12} tokens ${:>10.4}",
            usd(day_micro_usd),
            usd(month_micro_usd)
        );
    }
    let caps = [
        (
            "user_day_tokens",
            limits.user_day_tokens.map(|n| n.to_string()),
        ),
        (
            "user_month_tokens",
            limits.user_month_tokens.map(|n| n.to_string()),
        ),
        (
            "user_day_usd",
            limits.user_day_usd.map(|x| format!("${x:.2}")),
        ),
        (
            "user_month_usd",
            limits.user_month_usd.map(|x| format!("${x:.2}")),
        ),
        (
            "bot_day_usd",
            limits.bot_day_usd.map(|x| format!("${x:.2}")),
        ),
        (
            "bot_month_usd",
            limits.bot_month_usd.map(|x| format!("${x:.2}")),
        ),
    ];
    let set: Vec<String> = caps
        .iter()
        .filter_map(|(k, v)| Some(format!("{k} = {}", v.as_ref()?)))
        .collect();
    if set.is_empty() {
        println!("No caps configured ([limits] in config.toml).");
    } else {
        println!("Caps: {}", set.join(", "));
    }
    Ok(0)
}
