#![allow(clippy::unwrap_used)]
use super::*;

/// 2026-11-30T23:30:00Z: still November in UTC, already 1 December in Berlin.
const LATE_NOVEMBER_UTC: u64 = 1_796_081_400_000;
const HOUR: u64 = 3_600_000;

fn limits(toml: &str, vars: &[(&str, &str)]) -> Result<SpendingLimits, LimitsError> {
    let file: toml::Table = toml.parse().unwrap();
    let var = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    SpendingLimits::from_config(&file, var, None, Some("telegram:1"))
}

#[test]
fn caps_are_read_from_the_file_and_the_variables_win() {
    let l = limits(
        "[limits]\nuser_day_tokens = 5000\nuser_month_usd = 2.5\nbot_day_usd = 10\ntimezone = \"UTC\"\n",
        &[("HERMES_LIMIT_USER_DAY_TOKENS", "7000"), ("HERMES_LIMIT_BOT_MONTH_USD", "$40")],
    )
    .unwrap();
    assert_eq!(l.user_day_tokens, Some(7000));
    assert_eq!(l.user_month_usd, Some(2.5));
    assert_eq!(l.bot_day_usd, Some(10.0));
    assert_eq!(l.bot_month_usd, Some(40.0));
    assert_eq!(l.user_month_tokens, None);
    assert!(!l.owner_exempt);
    assert_eq!(l.unattended_account, "telegram:1", "the owner by default");
}

#[test]
fn negative_zero_absurd_and_malformed_caps_are_refused_by_name() {
    for (toml, vars, key, says) in [
        (
            "[limits]\nuser_day_tokens = -5\n",
            &[][..],
            "[limits] user_day_tokens",
            "-5 is not a cap",
        ),
        (
            "[limits]\nuser_day_tokens = 0\n",
            &[],
            "[limits] user_day_tokens",
            "leave it out",
        ),
        (
            "[limits]\nuser_month_tokens = 99999999999999999\n",
            &[],
            "[limits] user_month_tokens",
            "from 1 to",
        ),
        (
            "[limits]\nuser_day_usd = -1.0\n",
            &[],
            "[limits] user_day_usd",
            "above 0",
        ),
        (
            "[limits]\nbot_month_usd = 1e12\n",
            &[],
            "[limits] bot_month_usd",
            "at most",
        ),
        (
            "[limits]\nbot_day_usd = nan\n",
            &[],
            "[limits] bot_day_usd",
            "not a cap",
        ),
        (
            "[limits]\nuser_day_usd = \"lots\"\n",
            &[],
            "[limits] user_day_usd",
            "not an amount",
        ),
        (
            "",
            &[("HERMES_LIMIT_USER_DAY_TOKENS", "-1")],
            "HERMES_LIMIT_USER_DAY_TOKENS",
            "not a cap",
        ),
        (
            "",
            &[("HERMES_LIMIT_BOT_DAY_USD", "abc")],
            "HERMES_LIMIT_BOT_DAY_USD",
            "not an amount",
        ),
        (
            "[limits]\ntimezone = \"Mars/Olympus\"\n",
            &[],
            "[limits] timezone",
            "unknown time zone",
        ),
        (
            "[limits]\nowner_exempt = \"yes\"\n",
            &[],
            "[limits] owner_exempt",
            "true or false",
        ),
        (
            "[limits]\nunattended_account = \"nobody\"\n",
            &[],
            "[limits] unattended_account",
            "PLATFORM:USER_ID",
        ),
    ] {
        let err = limits(toml, vars).unwrap_err();
        assert_eq!(err.key, key, "{toml}");
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn the_month_rolls_over_at_midnight_of_the_configured_zone() {
    let berlin = limits("[limits]\ntimezone = \"Europe/Berlin\"\n", &[]).unwrap();
    let utc = limits("[limits]\ntimezone = \"UTC\"\n", &[]).unwrap();
    assert_eq!(berlin.periods(LATE_NOVEMBER_UTC).month_key(), "m:2026-12");
    assert_eq!(berlin.periods(LATE_NOVEMBER_UTC).day_key(), "d:2026-12-01");
    assert_eq!(utc.periods(LATE_NOVEMBER_UTC).month_key(), "m:2026-11");
    assert_eq!(
        utc.periods(LATE_NOVEMBER_UTC + HOUR).month_key(),
        "m:2026-12"
    );
}

#[test]
fn a_month_cap_reached_in_november_is_lifted_by_the_zones_december() {
    let l = limits(
        "[limits]\nuser_month_tokens = 100\ntimezone = \"Europe/Berlin\"\n",
        &[],
    )
    .unwrap();
    let mut store = Store::open_in_memory().unwrap();
    // 22:00 UTC on 30 November is 23:00 in Berlin: still November there.
    let november = LATE_NOVEMBER_UTC - 90 * 60_000;
    let writes = l.charge("telegram:7", november, 150, 0);
    let w: Vec<KvWrite<'_>> = writes.iter().map(Charge::write).collect();
    assert!(store.kv_commit(&w).unwrap());
    let spent = l.spent(&store, "telegram:7", november).unwrap();
    let hit = l.reached("telegram:7", &spent).unwrap();
    assert_eq!(hit.cap, Cap::MonthTokens);
    assert_eq!(
        l.refusal(&hit, november),
        "Sorry — your monthly usage limit (100 tokens) has been reached, so I can't answer until it resets on 2026-12-01 at 00:00 (Europe/Berlin)."
    );
    // Another user is not affected.
    assert!(
        l.reached(
            "telegram:8",
            &l.spent(&store, "telegram:8", november).unwrap()
        )
        .is_none()
    );
    // 23:30 UTC is 00:30 on 1 December in Berlin: a new month.
    let december = l.spent(&store, "telegram:7", LATE_NOVEMBER_UTC).unwrap();
    assert_eq!(december.month_tokens, 0);
    assert!(l.reached("telegram:7", &december).is_none());
}

#[test]
fn the_owner_is_capped_unless_exempt_and_the_bot_cap_holds_for_everyone() {
    let spent = Spent {
        day_tokens: 10,
        bot_day_micro_usd: 3_000_000,
        ..Spent::default()
    };
    let capped = limits("[limits]\nuser_day_tokens = 10\n", &[]).unwrap();
    assert!(capped.reached("telegram:1", &spent).is_some());
    let exempt = limits("[limits]\nuser_day_tokens = 10\nowner_exempt = true\n", &[]).unwrap();
    assert!(exempt.reached("telegram:1", &spent).is_none());
    assert!(exempt.reached("telegram:2", &spent).is_some());
    let bot = limits("[limits]\nowner_exempt = true\nbot_day_usd = 3\n", &[]).unwrap();
    assert_eq!(
        bot.reached("telegram:1", &spent).unwrap().cap,
        Cap::BotDayUsd
    );
}

#[test]
fn a_call_costs_its_prompt_and_completion_tokens_and_its_price() {
    let usage = hermes_core::Usage {
        prompt_tokens: 1000,
        completion_tokens: 500,
        total_tokens: 1500,
        ..hermes_core::Usage::default()
    };
    let price = Price {
        input: 3.0,
        output: 15.0,
        cache_read: None,
        cache_write: None,
    };
    assert_eq!(cost_of(&usage, Some(&price)), (1500, 10_500));
    assert_eq!(cost_of(&usage, None), (1500, 0), "no price: tokens only");
}

struct At(u64);
impl hermes_core::Clock for At {
    fn now_ms(&self) -> u64 {
        self.0
    }
}

fn answer(model: &str, prompt: u64, completion: u64) -> hermes_core::LedgerEntry {
    let mut entry = hermes_core::LedgerEntry::new(hermes_core::Message::assistant("a"));
    entry.meta.model = Some(model.to_owned());
    entry.meta.usage = Some(hermes_core::Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        ..hermes_core::Usage::default()
    });
    entry
}

/// Issue 44: a reservation holds the largest call seen in every capped
/// account, is refused once an account (spent plus held) reached its cap,
/// is replaced by the actual cost in the charge that stores the call, and
/// what is still held goes back on release.
#[test]
fn a_reservation_holds_a_calls_worth_until_settled_or_released() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let l = limits(
        "[limits]\nuser_day_tokens = 2500\ntimezone = \"UTC\"\n",
        &[],
    )
    .unwrap();
    let now = LATE_NOVEMBER_UTC;
    let key = account_key("tok", &l.periods(now).day_key(), "telegram:7");
    let read = |store: &Store| store.kv_get(&key).unwrap().unwrap_or_default();
    let sizes = std::sync::Arc::new(CallSizes::default());
    let wallet = std::sync::Arc::new(Wallet::new(l.clone(), "telegram:7".into(), sizes.clone()));
    let charge = reserving_charger(
        l.clone(),
        "telegram:7".into(),
        |_| None,
        std::sync::Arc::new(At(now)),
        Some(wallet.clone()),
    );
    // Nothing seen yet: the first reservation holds 0 (still a test).
    assert!(wallet.reserve(&mut store, now).unwrap());
    let writes = charge(&[answer("m", 600, 400)]);
    store
        .kv_commit(&writes.iter().map(Charge::write).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(read(&store), "1000");
    // Now a call is worth 1,000: held at once, settled by the actual 900.
    assert!(wallet.reserve(&mut store, now).unwrap());
    assert_eq!(read(&store), "2000", "spent 1,000 + held 1,000");
    // Another turn of the same person is admitted while the account is
    // below the cap (2,000 < 2,500) and holds it at 3,000: no further call
    // passes until a settlement brings it back under.
    let other = Wallet::new(l.clone(), "telegram:7".into(), sizes.clone());
    assert!(other.reserve(&mut store, now).unwrap());
    assert_eq!(read(&store), "3000");
    assert!(!other.reserve(&mut store, now).unwrap(), "at the cap");
    let writes = charge(&[answer("m", 500, 400)]);
    store
        .kv_commit(&writes.iter().map(Charge::write).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(read(&store), "2900", "1,000 + 900 spent, 1,000 held");
    // The other turn's call failed: its hold goes back.
    other.release(&mut store).unwrap();
    assert_eq!(read(&store), "1900");
    wallet.release(&mut store).unwrap();
    assert_eq!(read(&store), "1900", "nothing left to give back");
    // No cap set: nothing reserved, nothing refused.
    let free = Wallet::new(SpendingLimits::default(), "telegram:7".into(), sizes);
    assert!(free.reserve(&mut store, now).unwrap());
    assert_eq!(read(&store), "1900");
}

/// Issue 44: the largest call is kept in the store with the next
/// reservation, so a gateway that starts — or another one on the same
/// database — holds a call's worth at its first reservation instead of 0
/// (two fresh gateways' first calls for a person near her cap would
/// otherwise both pass it).
#[test]
fn a_fresh_gateway_reserves_the_largest_call_any_gateway_saw() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let l = limits(
        "[limits]\nuser_day_tokens = 2500\ntimezone = \"UTC\"\n",
        &[],
    )
    .unwrap();
    let now = LATE_NOVEMBER_UTC;
    let key = account_key("tok", &l.periods(now).day_key(), "telegram:7");
    let read = |store: &Store, key: &str| store.kv_get(key).unwrap().unwrap_or_default();
    let first_gateway = std::sync::Arc::new(CallSizes::default());
    let wallet = std::sync::Arc::new(Wallet::new(
        l.clone(),
        "telegram:7".into(),
        first_gateway.clone(),
    ));
    let charge = reserving_charger(
        l.clone(),
        "telegram:7".into(),
        |_| None,
        std::sync::Arc::new(At(now)),
        Some(wallet.clone()),
    );
    assert!(wallet.reserve(&mut store, now).unwrap());
    let writes = charge(&[answer("m", 600, 400)]);
    store
        .kv_commit(&writes.iter().map(Charge::write).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(read(&store, &key), "1000");
    assert_eq!(
        read(&store, "spend:largest:telegram:7"),
        "",
        "not before the next reservation"
    );
    assert!(wallet.reserve(&mut store, now).unwrap());
    assert_eq!(read(&store, "spend:largest:telegram:7"), "1000 0");
    wallet.release(&mut store).unwrap();
    assert_eq!(read(&store, &key), "1000");
    // A gateway that starts now knows nothing in memory, and still holds
    // 1,000 at its first reservation; at 2,000 the account is below its cap
    // and admits one more, which brings it to 3,000: refused after that.
    let second_gateway = std::sync::Arc::new(CallSizes::default());
    let fresh = Wallet::new(l.clone(), "telegram:7".into(), second_gateway.clone());
    assert!(fresh.reserve(&mut store, now).unwrap());
    assert_eq!(read(&store, &key), "2000", "spent 1,000 + held 1,000");
    let also_fresh = Wallet::new(l.clone(), "telegram:7".into(), second_gateway);
    assert!(also_fresh.reserve(&mut store, now).unwrap());
    assert!(!also_fresh.reserve(&mut store, now).unwrap(), "at the cap");
    assert_eq!(read(&store, &key), "3000");
    // A stored size that is not two numbers reads as nothing known.
    store
        .kv_commit(&[KvWrite::Set {
            key: "spend:largest:telegram:8",
            value: "lots",
        }])
        .unwrap();
    let stranger = Wallet::new(
        l,
        "telegram:8".into(),
        std::sync::Arc::new(CallSizes::default()),
    );
    assert!(stranger.reserve(&mut store, now).unwrap());
}

/// Counts the warnings logged through it.
struct Warnings(std::sync::atomic::AtomicUsize);
impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Issue 44: "no price is known" is said once per model and process, not
/// on every call of a busy bot.
#[test]
fn a_model_without_a_price_is_warned_about_once_per_process() {
    let warnings = std::sync::Arc::new(Warnings(std::sync::atomic::AtomicUsize::new(0)));
    let l = limits("[limits]\nuser_day_usd = 1\n", &[]).unwrap();
    let charge = charger(l, "telegram:7".into(), |_| None, std::sync::Arc::new(At(0)));
    let dispatch = tracing::Dispatch::from(warnings.clone());
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..5 {
            charge(&[answer("unpriced-model-of-this-test", 10, 10)]);
        }
        charge(&[answer("another-unpriced-model-of-this-test", 10, 10)]);
        charge(&[answer("another-unpriced-model-of-this-test", 10, 10)]);
    });
    assert_eq!(
        warnings.0.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one warning per model"
    );
}

/// Issue 44: usage rows of periods before last month are forgotten; last
/// month's and this month's (days and months) are kept, and nothing else
/// in the store is touched.
#[test]
fn usage_rows_before_last_month_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let l = limits("[limits]\ntimezone = \"UTC\"\n", &[]).unwrap();
    // 2026-12-04 in UTC.
    let now = LATE_NOVEMBER_UTC + 3 * 24 * HOUR + HOUR;
    let keys = [
        ("usage/tok/d:2026-09-30/telegram:7", false),
        ("usage/tok/d:2026-10-31/telegram:7", false),
        ("usage/usd/m:2026-10/bot", false),
        ("usage/tok/d:2026-11-01/telegram:7", true),
        ("usage/usd/m:2026-11/bot", true),
        ("usage/tok/d:2026-12-04/telegram:7", true),
        ("usage/tok/m:2026-12/telegram:7", true),
        ("telegram.offset", true),
    ];
    for (key, _) in keys {
        store.kv_set(key, "5").unwrap();
    }
    assert_eq!(l.prune(&mut store, now).unwrap(), 3);
    for (key, kept) in keys {
        assert_eq!(store.kv_get(key).unwrap().is_some(), kept, "{key}");
    }
    assert_eq!(l.prune(&mut store, now).unwrap(), 0);
}
