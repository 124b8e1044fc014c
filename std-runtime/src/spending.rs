//! Spending caps (issue 44): what each person, and the bot as a whole, may
//! spend per day and per month.
//!
//! **Accounts.** Usage is counted per identity — `PLATFORM:USER_ID`, the
//! identity that scopes memory and `session_search` — and for the bot as a
//! whole, per day and per month of the configured time zone, in the store's
//! key-value table: `usage/tok/d:2026-12-04/telegram:42` (prompt plus
//! completion tokens) and `usage/usd/m:2026-12/telegram:42` (micro-dollars,
//! where the model's price is known). [`SpendingLimits::charge`] gives the
//! [`KvWrite::Add`]s for a batch of messages; the writer applies them in
//! the transaction that stores those messages, so N gateways on one
//! PostgreSQL count into the same accounts and no call is counted twice or
//! lost.
//!
//! **Caps.** `[limits]` (or `HERMES_LIMIT_*`): `user_day_tokens`,
//! `user_month_tokens`, `user_day_usd`, `user_month_usd` per person,
//! `bot_day_usd`, `bot_month_usd` for everyone together. Days and months
//! roll over at midnight of `[limits] timezone` (default: `[gateway]
//! timezone`, else the system's). The owner (`[memory] owner`) is capped
//! like anyone unless `owner_exempt = true` (the bot's caps still apply).
//! Cron jobs and webhooks count against `[limits] unattended_account`
//! (default: the owner; else the account `unattended`).

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

use crate::price::Price;
use crate::store::{KvWrite, Store, StoreError};

mod reserve;
pub use reserve::{CallSizes, Wallet};

/// The bot-wide account (no identity has no colon).
pub const BOT_ACCOUNT: &str = "bot";

/// The account of unattended runs when neither an account nor an owner
/// is configured.
pub const UNATTENDED: &str = "unattended";

/// The environment variables of the caps, with their `[limits]` keys.
pub const LIMIT_VARS: [(&str, &str); 6] = [
    ("HERMES_LIMIT_USER_DAY_TOKENS", "user_day_tokens"),
    ("HERMES_LIMIT_USER_MONTH_TOKENS", "user_month_tokens"),
    ("HERMES_LIMIT_USER_DAY_USD", "user_day_usd"),
    ("HERMES_LIMIT_USER_MONTH_USD", "user_month_usd"),
    ("HERMES_LIMIT_BOT_DAY_USD", "bot_day_usd"),
    ("HERMES_LIMIT_BOT_MONTH_USD", "bot_month_usd"),
];

/// The largest token cap accepted: beyond it a "cap" is a typo.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
/// The largest dollar cap accepted.
pub const MAX_USD: f64 = 1_000_000.0;

/// Why `[limits]` is refused, naming the key or variable.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct LimitsError {
    /// `[limits] user_day_tokens` or `HERMES_LIMIT_USER_DAY_TOKENS`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// The configured caps (`None`: no cap) and how days are counted.
#[derive(Clone, Debug)]
pub struct SpendingLimits {
    /// Tokens per person per day.
    pub user_day_tokens: Option<u64>,
    /// Tokens per person per month.
    pub user_month_tokens: Option<u64>,
    /// Dollars per person per day.
    pub user_day_usd: Option<f64>,
    /// Dollars per person per month.
    pub user_month_usd: Option<f64>,
    /// Dollars for the whole bot per day.
    pub bot_day_usd: Option<f64>,
    /// Dollars for the whole bot per month.
    pub bot_month_usd: Option<f64>,
    /// Where midnight is.
    pub tz: TimeZone,
    /// The owner's identity (`[memory] owner`), if configured.
    pub owner: Option<String>,
    /// The owner is not held to the per-person caps.
    pub owner_exempt: bool,
    /// The account cron jobs and webhooks count against.
    pub unattended_account: String,
}

// Compared field by field (dollars by their bits: they are checked finite),
// so settings that hold them can still be compared.
impl PartialEq for SpendingLimits {
    fn eq(&self, other: &Self) -> bool {
        let bits = |x: Option<f64>| x.map(f64::to_bits);
        self.user_day_tokens == other.user_day_tokens
            && self.user_month_tokens == other.user_month_tokens
            && bits(self.user_day_usd) == bits(other.user_day_usd)
            && bits(self.user_month_usd) == bits(other.user_month_usd)
            && bits(self.bot_day_usd) == bits(other.bot_day_usd)
            && bits(self.bot_month_usd) == bits(other.bot_month_usd)
            && self.tz == other.tz
            && self.owner == other.owner
            && self.owner_exempt == other.owner_exempt
            && self.unattended_account == other.unattended_account
    }
}

impl Eq for SpendingLimits {}

impl Default for SpendingLimits {
    fn default() -> Self {
        SpendingLimits {
            user_day_tokens: None,
            user_month_tokens: None,
            user_day_usd: None,
            user_month_usd: None,
            bot_day_usd: None,
            bot_month_usd: None,
            tz: TimeZone::UTC,
            owner: None,
            owner_exempt: false,
            unattended_account: UNATTENDED.to_owned(),
        }
    }
}

fn bad(key: &str, message: impl Into<String>) -> LimitsError {
    LimitsError {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// A token cap: a whole number from 1 to [`MAX_TOKENS`].
fn tokens_cap(key: &str, value: &toml::Value) -> Result<u64, LimitsError> {
    let n = match value {
        toml::Value::Integer(n) => *n,
        toml::Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| bad(key, format!("'{s}' is not a whole number of tokens")))?,
        _ => return Err(bad(key, "must be a whole number of tokens")),
    };
    u64::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_TOKENS).contains(n))
        .ok_or_else(|| {
            bad(
                key,
                format!(
                    "{n} is not a cap: give a number of tokens from 1 to {MAX_TOKENS}, or leave it out for no cap"
                ),
            )
        })
}

/// A dollar cap: more than 0, at most [`MAX_USD`].
fn usd_cap(key: &str, value: &toml::Value) -> Result<f64, LimitsError> {
    let x = match value {
        toml::Value::Integer(n) => *n as f64,
        toml::Value::Float(x) => *x,
        toml::Value::String(s) => s
            .trim()
            .trim_start_matches('$')
            .parse::<f64>()
            .map_err(|_| bad(key, format!("'{s}' is not an amount of dollars")))?,
        _ => return Err(bad(key, "must be an amount of dollars such as 2.50")),
    };
    if x.is_finite() && x > 0.0 && x <= MAX_USD {
        Ok(x)
    } else {
        Err(bad(
            key,
            format!(
                "{x} is not a cap: give dollars above 0 and at most {MAX_USD}, or leave it out for no cap"
            ),
        ))
    }
}

impl SpendingLimits {
    /// `[limits]` of `file`, each cap overridden by its `HERMES_LIMIT_*`
    /// variable (`var`), `gateway_tz` the `[gateway] timezone` it defaults
    /// to and `owner` the configured owner. Negative, zero, absurd or
    /// malformed values are refused with the key named.
    pub fn from_config<'v>(
        file: &toml::Table,
        var: impl Fn(&str) -> Option<&'v str>,
        gateway_tz: Option<&str>,
        owner: Option<&str>,
    ) -> Result<Self, LimitsError> {
        let section = file.get("limits").and_then(toml::Value::as_table);
        let get = |name: &str| section.and_then(|t| t.get(name));
        let mut limits = SpendingLimits {
            owner: owner.map(str::to_owned),
            ..SpendingLimits::default()
        };
        for (env, name) in LIMIT_VARS {
            let (key, value) = match var(env).filter(|v| !v.trim().is_empty()) {
                Some(v) => (env.to_owned(), toml::Value::String(v.to_owned())),
                None => match get(name) {
                    Some(v) => (format!("[limits] {name}"), v.clone()),
                    None => continue,
                },
            };
            match name {
                "user_day_tokens" => limits.user_day_tokens = Some(tokens_cap(&key, &value)?),
                "user_month_tokens" => limits.user_month_tokens = Some(tokens_cap(&key, &value)?),
                "user_day_usd" => limits.user_day_usd = Some(usd_cap(&key, &value)?),
                "user_month_usd" => limits.user_month_usd = Some(usd_cap(&key, &value)?),
                "bot_day_usd" => limits.bot_day_usd = Some(usd_cap(&key, &value)?),
                _ => limits.bot_month_usd = Some(usd_cap(&key, &value)?),
            }
        }
        let (tz_key, tz_name) = match get("timezone") {
            None => ("[gateway] timezone", gateway_tz),
            Some(toml::Value::String(s)) => ("[limits] timezone", Some(s.as_str())),
            Some(_) => {
                return Err(bad(
                    "[limits] timezone",
                    "must be a string such as \"Europe/Berlin\"",
                ));
            }
        };
        limits.tz = time_zone(tz_name).map_err(|e| bad(tz_key, e))?;
        limits.owner_exempt = match get("owner_exempt") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(bad("[limits] owner_exempt", "must be true or false")),
        };
        limits.unattended_account = match get("unattended_account") {
            Some(toml::Value::String(s))
                if crate::memory_scope::parse_identity(s.trim()).is_some() =>
            {
                s.trim().to_owned()
            }
            Some(_) => {
                return Err(bad(
                    "[limits] unattended_account",
                    "must be PLATFORM:USER_ID, the account cron jobs and webhooks count against",
                ));
            }
            None => owner.unwrap_or(UNATTENDED).to_owned(),
        };
        Ok(limits)
    }

    /// Whether any cap is set.
    pub fn any(&self) -> bool {
        self.user_day_tokens.is_some()
            || self.user_month_tokens.is_some()
            || self.user_day_usd.is_some()
            || self.user_month_usd.is_some()
            || self.bot_day_usd.is_some()
            || self.bot_month_usd.is_some()
    }

    /// The day and the month `now_ms` falls in, here.
    pub fn periods(&self, now_ms: u64) -> Periods {
        let ts = Timestamp::from_millisecond(i64::try_from(now_ms).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let date = ts.to_zoned(self.tz.clone()).date();
        Periods { date }
    }

    /// The writes that count `tokens` and `micro_usd` spent by `identity`
    /// at `now_ms` — its day and month, and the bot's — to apply with the
    /// messages that carry them.
    pub fn charge(&self, identity: &str, now_ms: u64, tokens: u64, micro_usd: u64) -> Vec<Charge> {
        let p = self.periods(now_ms);
        let mut out = Vec::new();
        for period in [p.day_key(), p.month_key()] {
            for account in [identity, BOT_ACCOUNT] {
                if tokens > 0 {
                    out.push(Charge::new("tok", &period, account, tokens));
                }
                if micro_usd > 0 {
                    out.push(Charge::new("usd", &period, account, micro_usd));
                }
            }
        }
        out
    }

    /// What `identity` (and the bot) spent in the periods of `now_ms`.
    pub fn spent(&self, store: &Store, identity: &str, now_ms: u64) -> Result<Spent, StoreError> {
        let p = self.periods(now_ms);
        let read = |kind: &str, period: &str, account: &str| -> Result<u64, StoreError> {
            Ok(store
                .kv_get(&account_key(kind, period, account))?
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map_or(0, |n| u64::try_from(n).unwrap_or(0)))
        };
        let (day, month) = (p.day_key(), p.month_key());
        Ok(Spent {
            day_tokens: read("tok", &day, identity)?,
            month_tokens: read("tok", &month, identity)?,
            day_micro_usd: read("usd", &day, identity)?,
            month_micro_usd: read("usd", &month, identity)?,
            bot_day_micro_usd: read("usd", &day, BOT_ACCOUNT)?,
            bot_month_micro_usd: read("usd", &month, BOT_ACCOUNT)?,
        })
    }

    /// Every account with usage today or this month (the bot's last),
    /// for the owner's `hermes usage`.
    pub fn everyone(&self, store: &Store, now_ms: u64) -> Result<Vec<(String, Spent)>, StoreError> {
        let p = self.periods(now_ms);
        let mut all: std::collections::BTreeMap<String, Spent> = std::collections::BTreeMap::new();
        for (kind, period) in [
            ("tok", p.day_key()),
            ("tok", p.month_key()),
            ("usd", p.day_key()),
            ("usd", p.month_key()),
        ] {
            let prefix = account_key(kind, &period, "");
            for (key, value) in store.kv_scan(&prefix)? {
                let account = key[prefix.len()..].to_owned();
                let n = value.trim().parse::<u64>().unwrap_or(0);
                let s = all.entry(account).or_default();
                match (kind, period.starts_with("d:")) {
                    ("tok", true) => s.day_tokens = n,
                    ("tok", false) => s.month_tokens = n,
                    (_, true) => s.day_micro_usd = n,
                    (_, false) => s.month_micro_usd = n,
                }
            }
        }
        let bot = all.remove(BOT_ACCOUNT);
        let mut out: Vec<(String, Spent)> = all.into_iter().collect();
        out.extend(bot.map(|b| (BOT_ACCOUNT.to_owned(), b)));
        Ok(out)
    }

    /// Forgets the accounts of periods before last month — days and months;
    /// `hermes usage` and `/usage` read only today and this month, and last
    /// month's stay for a look back — so a bot's usage rows do not grow
    /// for ever. Returns how many were deleted.
    pub fn prune(&self, store: &mut Store, now_ms: u64) -> Result<usize, StoreError> {
        let first = self.periods(now_ms).date.first_of_month();
        let last_month = first.yesterday().unwrap_or(first).first_of_month();
        let keep_day = format!("d:{last_month}");
        let keep_month = Periods { date: last_month }.month_key();
        let old: Vec<String> = store
            .kv_scan("usage/")?
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| {
                let period = key.split('/').nth(2).unwrap_or("");
                (period.starts_with("d:") && period < keep_day.as_str())
                    || (period.starts_with("m:") && period < keep_month.as_str())
            })
            .collect();
        let keys: Vec<&str> = old.iter().map(String::as_str).collect();
        if !keys.is_empty() {
            store.kv_delete(&keys)?;
        }
        Ok(keys.len())
    }

    /// The first cap `spent` reached, if any (the person's before the
    /// bot's; the owner's own caps only unless exempt).
    pub fn reached(&self, identity: &str, spent: &Spent) -> Option<Reached> {
        let exempt = self.owner_exempt && self.owner.as_deref() == Some(identity);
        let usd = |cap: Option<f64>, used: u64| cap.filter(|c| used as f64 >= c * 1e6);
        let tok = |cap: Option<u64>, used: u64| cap.filter(|c| used >= *c);
        let mine = [
            tok(self.user_day_tokens, spent.day_tokens).map(|c| (Cap::DayTokens, c as f64)),
            usd(self.user_day_usd, spent.day_micro_usd).map(|c| (Cap::DayUsd, c)),
            tok(self.user_month_tokens, spent.month_tokens).map(|c| (Cap::MonthTokens, c as f64)),
            usd(self.user_month_usd, spent.month_micro_usd).map(|c| (Cap::MonthUsd, c)),
        ];
        let bots = [
            usd(self.bot_day_usd, spent.bot_day_micro_usd).map(|c| (Cap::BotDayUsd, c)),
            usd(self.bot_month_usd, spent.bot_month_micro_usd).map(|c| (Cap::BotMonthUsd, c)),
        ];
        // A month cap outlasts a day cap: say the later reset.
        let pick = |caps: &[Option<(Cap, f64)>]| {
            caps.iter()
                .flatten()
                .copied()
                .max_by_key(|(cap, _)| cap.is_monthly())
        };
        let hit = if exempt { None } else { pick(&mine) }.or_else(|| pick(&bots));
        hit.map(|(cap, limit)| Reached { cap, limit })
    }

    /// The polite line for a turn refused (or stopped) because `reached`:
    /// which cap, and when it resets, in this time zone.
    pub fn refusal(&self, reached: &Reached, now_ms: u64) -> String {
        let p = self.periods(now_ms);
        let resets = if reached.cap.is_monthly() {
            p.next_month()
        } else {
            p.next_day()
        };
        let zone = self.tz.iana_name().unwrap_or("the system's time zone");
        let limit = if reached.cap.is_tokens() {
            format!("{} tokens", reached.limit as u64)
        } else {
            format!("${:.2}", reached.limit)
        };
        format!(
            "Sorry — {} ({limit}) has been reached, so I can't answer until it resets on {resets} at 00:00 ({zone}).",
            reached.cap.describe()
        )
    }
}

/// A time zone by IANA name, `UTC`, or the system's when `None` — the rule
/// of `[gateway] timezone` (`crate::cron::time_zone`, which this module
/// cannot import: the scheduler's settings carry the caps).
fn time_zone(name: Option<&str>) -> Result<TimeZone, String> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok(crate::zone::system()),
        Some(n) if n.eq_ignore_ascii_case("utc") => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|e| {
            format!("unknown time zone {n:?} ({e}); use an IANA name such as Europe/Berlin, or UTC")
        }),
    }
}

/// A day and a month of the configured time zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Periods {
    date: Date,
}

impl Periods {
    /// `d:2026-12-04`.
    pub fn day_key(&self) -> String {
        format!("d:{}", self.date)
    }
    /// `m:2026-12`.
    pub fn month_key(&self) -> String {
        format!("m:{:04}-{:02}", self.date.year(), self.date.month())
    }
    /// The next day, when a day cap resets.
    pub fn next_day(&self) -> Date {
        self.date.tomorrow().unwrap_or(self.date)
    }
    /// The first of next month, when a month cap resets.
    pub fn next_month(&self) -> Date {
        self.date.last_of_month().tomorrow().unwrap_or(self.date)
    }
}

/// The store key of an account.
pub fn account_key(kind: &str, period: &str, account: &str) -> String {
    format!("usage/{kind}/{period}/{account}")
}

/// One addition to an account, owned so a writer can keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// The account's key.
    pub key: String,
    /// What to add.
    pub amount: i64,
}

impl Charge {
    fn new(kind: &str, period: &str, account: &str, amount: u64) -> Self {
        Charge {
            key: account_key(kind, period, account),
            amount: i64::try_from(amount).unwrap_or(i64::MAX),
        }
    }

    /// As a store write.
    pub fn write(&self) -> KvWrite<'_> {
        KvWrite::Add {
            key: &self.key,
            amount: self.amount,
        }
    }
}

/// What one identity and the bot spent today and this month.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    /// The person's tokens today.
    pub day_tokens: u64,
    /// The person's tokens this month.
    pub month_tokens: u64,
    /// The person's micro-dollars today.
    pub day_micro_usd: u64,
    /// The person's micro-dollars this month.
    pub month_micro_usd: u64,
    /// Everyone's micro-dollars today.
    pub bot_day_micro_usd: u64,
    /// Everyone's micro-dollars this month.
    pub bot_month_micro_usd: u64,
}

/// Which cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// `user_day_tokens`.
    DayTokens,
    /// `user_month_tokens`.
    MonthTokens,
    /// `user_day_usd`.
    DayUsd,
    /// `user_month_usd`.
    MonthUsd,
    /// `bot_day_usd`.
    BotDayUsd,
    /// `bot_month_usd`.
    BotMonthUsd,
}

impl Cap {
    fn is_monthly(self) -> bool {
        matches!(self, Cap::MonthTokens | Cap::MonthUsd | Cap::BotMonthUsd)
    }
    fn is_tokens(self) -> bool {
        matches!(self, Cap::DayTokens | Cap::MonthTokens)
    }
    fn describe(self) -> &'static str {
        match self {
            Cap::DayTokens | Cap::DayUsd => "your daily usage limit",
            Cap::MonthTokens | Cap::MonthUsd => "your monthly usage limit",
            Cap::BotDayUsd => "this bot's daily spending limit",
            Cap::BotMonthUsd => "this bot's monthly spending limit",
        }
    }
}

/// A cap that was reached, and its value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reached {
    /// Which.
    pub cap: Cap,
    /// Its value (tokens or dollars).
    pub limit: f64,
}

/// Tokens and micro-dollars of one model call: prompt plus completion
/// tokens, and — when `price` is known — its cost.
pub fn cost_of(usage: &hermes_core::Usage, price: Option<&Price>) -> (u64, u64) {
    let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
    let micro = price.map_or(0, |p| (p.cost(usage) * 1e6).round().max(0.0) as u64);
    (tokens, micro)
}

/// What a writer's stored model calls cost `identity`, charged with them
/// ([`crate::persist::TurnWriter::charging`]): tokens always, dollars at
/// the price `price_of` knows for the entry's model. A model without a
/// price counts towards the token caps only (logged once per model and
/// process when dollar caps are set, [`warn_no_price`]).
pub fn charger(
    limits: SpendingLimits,
    identity: String,
    price_of: impl Fn(&str) -> Option<Price> + Send + 'static,
    clock: std::sync::Arc<dyn hermes_core::Clock>,
) -> impl Fn(&[hermes_core::LedgerEntry]) -> Vec<Charge> + Send + 'static {
    reserving_charger(limits, identity, price_of, clock, None)
}

/// [`charger`] that also settles the reservations `wallet` holds for the
/// calls it charges ([`Wallet::settle`]).
pub fn reserving_charger(
    limits: SpendingLimits,
    identity: String,
    price_of: impl Fn(&str) -> Option<Price> + Send + 'static,
    clock: std::sync::Arc<dyn hermes_core::Clock>,
    wallet: Option<std::sync::Arc<Wallet>>,
) -> impl Fn(&[hermes_core::LedgerEntry]) -> Vec<Charge> + Send + 'static {
    move |batch: &[hermes_core::LedgerEntry]| {
        let dollar_caps = limits.user_day_usd.is_some()
            || limits.user_month_usd.is_some()
            || limits.bot_day_usd.is_some()
            || limits.bot_month_usd.is_some();
        let (mut tokens, mut micro, mut largest, mut calls) = (0u64, 0u64, (0u64, 0u64), 0);
        for entry in batch {
            let Some(usage) = &entry.meta.usage else {
                continue;
            };
            calls += 1;
            let model = entry.meta.model.as_deref();
            let price = model.and_then(&price_of);
            if price.is_none() && dollar_caps {
                warn_no_price(model.unwrap_or("?"));
            }
            let (t, m) = cost_of(usage, price.as_ref());
            tokens = tokens.saturating_add(t);
            micro = micro.saturating_add(m);
            largest = (largest.0.max(t), largest.1.max(m));
        }
        let mut charges = limits.charge(&identity, clock.now_ms(), tokens, micro);
        if let Some(wallet) = wallet.as_ref().filter(|_| calls > 0) {
            wallet.settle(&mut charges, largest);
        }
        charges
    }
}

/// Logs that `model` has no known price — once per model and process, not
/// per call (a busy bot would otherwise repeat it on every answer).
/// Returns whether it logged.
pub fn warn_no_price(model: &str) -> bool {
    static WARNED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    let first = WARNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(model.to_owned());
    if first {
        tracing::warn!(
            model,
            "no price is known for this model: its calls count towards the token caps only \
             (said once per model and process; give the model a `price` to cap its dollars)"
        );
    }
    first
}

/// A report of `spent` against `limits`, for `/usage`.
pub fn report(limits: &SpendingLimits, spent: &Spent) -> String {
    let cap_tok = |c: Option<u64>| c.map(|c| format!(" of {c}")).unwrap_or_default();
    let cap_usd = |c: Option<f64>| c.map(|c| format!(" of ${c:.2}")).unwrap_or_default();
    let usd = |m: u64| m as f64 / 1e6;
    format!(
        "Today: {} tokens{}, ${:.4}{}\nThis month: {} tokens{}, ${:.4}{}",
        spent.day_tokens,
        cap_tok(limits.user_day_tokens),
        usd(spent.day_micro_usd),
        cap_usd(limits.user_day_usd),
        spent.month_tokens,
        cap_tok(limits.user_month_tokens),
        usd(spent.month_micro_usd),
        cap_usd(limits.user_month_usd),
    )
}

#[cfg(test)]
#[path = "spending_tests.rs"]
mod tests;
