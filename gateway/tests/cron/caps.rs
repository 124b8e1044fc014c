//! Spending caps of scheduled jobs and webhooks (issue 44).

use super::*;

/// What each answer of the scheduling model costs: 700 tokens.
pub(super) const CALL_USAGE: hermes_core::Usage = hermes_core::Usage {
    prompt_tokens: 600,
    completion_tokens: 100,
    total_tokens: 700,
    cached_tokens: 0,
    cache_write_tokens: 0,
};

/// Issue 44: a job's runs count against the unattended account (the
/// owner's unless configured); once it reached a cap, a due job does not
/// call the model and its run fails with the line saying when it resets —
/// at midnight of the configured zone (Berlin), with the clock moved by
/// hand to either side of it.
#[test]
fn a_jobs_runs_count_against_its_account_and_a_capped_account_makes_no_call() {
    let mut s = settings(CatchUp::Once);
    s.limits.user_month_tokens = Some(1000);
    s.limits.unattended_account = "telegram:1".into();
    s.limits.tz = hermes_runtime::cron::time_zone(Some("Europe/Berlin")).unwrap();
    let g = gateway(s.clone(), true);
    let month = s.limits.periods(T0).month_key();
    let account = hermes_runtime::spending::account_key("tok", &month, "telegram:1");
    let first = g.create(spec("90s", "first", None), Some(&alice()));
    g.clock.advance(Duration::from_secs(91));
    g.wait_run(&first.id, |r| r.first().is_some_and(|r| !r.state.is_open()));
    assert_eq!(
        g.store.lock().unwrap().kv_get(&account).unwrap().as_deref(),
        Some("700")
    );
    g.store
        .lock()
        .unwrap()
        .kv_commit(&[hermes_runtime::store::KvWrite::Add {
            key: &account,
            amount: 300,
        }])
        .unwrap();
    let calls = g.model.seen.lock().unwrap().len();
    // A job due at `ms`.
    let run_at = |ms: u64, prompt: &str| {
        g.clock.set(ms - 91_000);
        let job = g.create(spec("90s", prompt, None), Some(&alice()));
        g.clock.set(ms);
        g.wait_run(&job.id, |r| r.first().is_some_and(|r| !r.state.is_open()))
    };
    // 2026-12-31T23:00:00Z is midnight in Berlin (UTC is still in December).
    const BERLIN_NEW_YEAR: u64 = 1_798_758_000_000;
    // Due at 23:59:30 on 31 December in Berlin: still this month, refused.
    let runs = run_at(BERLIN_NEW_YEAR - 30_000, "late");
    assert_eq!(runs[0].state, RunState::Failed);
    assert!(
        runs[0].error.as_deref().unwrap().contains(
            "your monthly usage limit (1000 tokens) has been reached, so I can't answer until it resets on 2027-01-01 at 00:00 (Europe/Berlin)"
        ),
        "{:?}",
        runs[0].error
    );
    assert_eq!(g.model.seen.lock().unwrap().len(), calls, "no model call");
    // Thirty seconds after Berlin's midnight the month is new: served.
    let runs = run_at(BERLIN_NEW_YEAR + 30_000, "new year");
    assert_ne!(runs[0].state, RunState::Failed, "{:?}", runs[0].error);
    assert_eq!(g.model.seen.lock().unwrap().len(), calls + 1);
}
