//! Scheduled jobs in the store (SPEC Y1), on both backends: the job
//! operations and their refusals, one claim per due time even with
//! claimers racing on separate connections, the outbox's fenced writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::backends;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use backends::{Db, both};
use hermes_runtime::cron::{self, CronContext, CronError, JobSpec, Origin, TimeZone};
use hermes_runtime::store::{
    Claim, JobState, LeaseGrant, RunState, RunUpdate, StoreError, job_lease, new_run_id,
};

// 2026-12-02T08:30:00Z
const NOW: u64 = 1_796_200_200_000;

fn ctx(now_ms: u64) -> CronContext {
    CronContext {
        now_ms,
        tz: TimeZone::UTC,
        platforms: Some(vec!["telegram".into()]),
        scripts_dir: None,
    }
}

fn spec(schedule: &str, prompt: &str) -> JobSpec {
    JobSpec {
        schedule: Some(schedule.into()),
        prompt: Some(prompt.into()),
        ..JobSpec::default()
    }
}

fn origin() -> Origin {
    Origin {
        platform: "telegram".into(),
        chat: "42".into(),
        thread: None,
    }
}

fn jobs_are_created_listed_changed_and_removed(db: Db) {
    let mut s = db.open();
    let job = cron::create(
        &mut s,
        &spec("every 30m", "check the disk"),
        Some(&origin()),
        &ctx(NOW),
    )
    .unwrap();
    assert_eq!(job.next_run_ms, Some(NOW + 1_800_000));
    assert_eq!(job.deliver, "origin");
    assert_eq!(job.origin_chat.as_deref(), Some("42"));
    let once = cron::create(
        &mut s,
        &JobSpec {
            deliver: Some("local".into()),
            name: Some("reminder".into()),
            ..spec("2h", "stretch")
        },
        None,
        &ctx(NOW),
    )
    .unwrap();
    assert_eq!(once.repeat, Some(1));
    assert_eq!(s.jobs(false).unwrap().len(), 2);
    // A unique prefix names a job.
    let found = cron::find(&s, &job.id[..8]).unwrap();
    assert_eq!(found, job);
    let paused = cron::set_paused(&mut s, &job.id, true, &ctx(NOW)).unwrap();
    assert_eq!(paused.state, JobState::Paused);
    assert!(
        s.due_jobs(NOW + 10_000_000, 10)
            .unwrap()
            .iter()
            .all(|j| j.id != job.id)
    );
    let resumed = cron::set_paused(&mut s, &job.id, false, &ctx(NOW + 10_000_000)).unwrap();
    assert_eq!(resumed.state, JobState::Active);
    assert_eq!(
        resumed.next_run_ms,
        Some(NOW + 10_000_000 + 1_800_000),
        "not for the paused period"
    );
    let updated = cron::update(
        &mut s,
        &job.id,
        &JobSpec {
            prompt: Some("check the disk and the memory".into()),
            ..JobSpec::default()
        },
        &ctx(NOW),
    )
    .unwrap();
    assert_eq!(updated.prompt, "check the disk and the memory");
    assert_eq!(updated.schedule, job.schedule);
    cron::remove(&mut s, &job.id).unwrap();
    assert!(matches!(
        cron::find(&s, &job.id),
        Err(CronError::NotFound(_))
    ));
    assert_eq!(s.jobs(false).unwrap().len(), 1);
}

fn bad_input_is_refused_and_nothing_is_stored(db: Db) {
    let mut s = db.open();
    let cases = [
        (spec("whenever", "x"), "every 30m"),
        (spec("30m", ""), "prompt is empty"),
        (
            spec("30m", &"x".repeat(cron::MAX_PROMPT_BYTES + 1)),
            "at most",
        ),
        (
            JobSpec {
                deliver: Some("discord".into()),
                ..spec("30m", "x")
            },
            "not a configured platform",
        ),
        (
            JobSpec {
                deliver: Some("tele gram".into()),
                ..spec("30m", "x")
            },
            "platform:chat_id",
        ),
        (
            JobSpec {
                repeat: Some(0),
                ..spec("every 1h", "x")
            },
            "at least 1",
        ),
    ];
    for (bad, says) in cases {
        let err = cron::create(&mut s, &bad, Some(&origin()), &ctx(NOW))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{err}");
    }
    // Origin needs a chat.
    let to_origin = JobSpec {
        deliver: Some("origin".into()),
        ..spec("30m", "x")
    };
    let err = cron::create(&mut s, &to_origin, None, &ctx(NOW))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no chat"), "{err}");
    assert!(s.jobs(true).unwrap().is_empty(), "nothing half-created");
    let err = cron::remove(&mut s, "jnope").unwrap_err();
    assert!(matches!(err, CronError::NotFound(_)), "{err}");
}

fn one_claim_per_due_time_across_connections(db: Db) {
    let mut s = db.open();
    let job = cron::create(
        &mut s,
        &spec("every 1m", "tick"),
        Some(&origin()),
        &ctx(NOW),
    )
    .unwrap();
    let due = job.next_run_ms.unwrap();
    let n = 4;
    let barrier = Arc::new(Barrier::new(n));
    let target = db.target();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let target = target.clone();
            let job_id = job.id.clone();
            std::thread::spawn(move || {
                let mut s = hermes_runtime::store::Store::open_target(&target).unwrap();
                let run_id = new_run_id();
                barrier.wait();
                s.job_claim(&Claim {
                    job_id: &job_id,
                    due_ms: due,
                    next_run_ms: Some(due + 60_000),
                    run_id: &run_id,
                    state: RunState::Running,
                    now_ms: due,
                })
                .unwrap()
            })
        })
        .collect();
    let wins = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|w| *w)
        .count();
    assert_eq!(wins, 1, "exactly one claimer gets the run");
    let runs = s.job_runs(&job.id, 10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].state, RunState::Running);
    // While the run is open the job is not due again.
    assert!(s.due_jobs(due + 120_000, 10).unwrap().is_empty());
    assert_eq!(s.open_runs().unwrap().len(), 1);

    // The outbox: writes need the job lease's fence.
    let fence = match s
        .lease_acquire(
            &job_lease(&job.id),
            "a",
            Duration::from_secs(60),
            None,
            false,
        )
        .unwrap()
    {
        LeaseGrant::Granted { fence, .. } => fence,
        LeaseGrant::Held(h) => panic!("{h:?}"),
    };
    let pending = RunUpdate {
        state: RunState::Pending,
        session_id: Some("s1".into()),
        answer: Some("disk at 80 %\u{0}".into()),
        error: None,
        attempts: 0,
        next_attempt_ms: None,
        finished_at_ms: None,
        outcome: "answered; delivering".into(),
    };
    s.run_update(&runs[0].id, &pending, &fence).unwrap();
    // Another holder takes the lease over: the first one's writes are refused.
    s.lease_acquire(
        &job_lease(&job.id),
        "b",
        Duration::from_secs(60),
        None,
        true,
    )
    .unwrap();
    let delivered = RunUpdate {
        state: RunState::Delivered,
        finished_at_ms: Some(due + 1),
        outcome: "delivered".into(),
        ..pending.clone()
    };
    let err = s.run_update(&runs[0].id, &delivered, &fence).unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    let run = s.job_runs(&job.id, 1).unwrap().remove(0);
    assert_eq!(run.state, RunState::Pending);
    assert_eq!(
        run.answer.as_deref(),
        Some("disk at 80 %\u{0}"),
        "exact round trip"
    );
    let job = cron::find(&s, &job.id).unwrap();
    assert_eq!(job.last_outcome.as_deref(), Some("answered; delivering"));
    assert_eq!(job.runs_done, 1);
    assert_eq!(job.next_run_ms, Some(due + 60_000));
}

fn a_one_off_ends_and_a_removed_job_leaves_no_runnable_run(db: Db) {
    let mut s = db.open();
    let job = cron::create(&mut s, &spec("90s", "once"), Some(&origin()), &ctx(NOW)).unwrap();
    let due = job.next_run_ms.unwrap();
    let next = cron::next_due(&job, due, due, &TimeZone::UTC).unwrap();
    assert_eq!(next, None);
    let run_id = new_run_id();
    let claim = Claim {
        job_id: &job.id,
        due_ms: due,
        next_run_ms: next,
        run_id: &run_id,
        state: RunState::Running,
        now_ms: due,
    };
    assert!(s.job_claim(&claim).unwrap());
    assert!(
        !s.job_claim(&claim).unwrap(),
        "the same due time is claimed once"
    );
    assert_eq!(cron::find(&s, &job.id).unwrap().state, JobState::Done);
    assert!(
        s.jobs(false).unwrap().is_empty(),
        "done jobs only with --all"
    );
    assert_eq!(s.jobs(true).unwrap().len(), 1);
    // Removing it drops the run it had not finished.
    cron::remove(&mut s, &job.id).unwrap();
    assert!(s.open_runs().unwrap().is_empty());
    // A skipped catch-up is recorded, not opened.
    let job = cron::create(&mut s, &spec("every 1m", "x"), Some(&origin()), &ctx(NOW)).unwrap();
    let due = job.next_run_ms.unwrap();
    let run_id = new_run_id();
    assert!(
        s.job_claim(&Claim {
            job_id: &job.id,
            due_ms: due,
            next_run_ms: Some(due + 60_000),
            run_id: &run_id,
            state: RunState::Skipped,
            now_ms: due + 3_600_000
        })
        .unwrap()
    );
    assert!(s.open_runs().unwrap().is_empty());
    assert_eq!(
        cron::find(&s, &job.id).unwrap().last_outcome.as_deref(),
        Some("skipped")
    );
}

/// A delivered run whose message the platform reported failed later
/// becomes "delivery failed" once; an open run, or a later run of the job,
/// is left alone.
fn a_delivery_reported_failed_later_is_recorded_once(db: Db) {
    let mut s = db.open();
    let job = cron::create(&mut s, &spec("every 1m", "x"), Some(&origin()), &ctx(NOW)).unwrap();
    let fence = match s
        .lease_acquire(
            &job_lease(&job.id),
            "a",
            Duration::from_secs(60),
            None,
            false,
        )
        .unwrap()
    {
        LeaseGrant::Granted { fence, .. } => fence,
        LeaseGrant::Held(h) => panic!("{h:?}"),
    };
    let mut due = job.next_run_ms.unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run_id = new_run_id();
        assert!(
            s.job_claim(&Claim {
                job_id: &job.id,
                due_ms: due,
                next_run_ms: Some(due + 60_000),
                run_id: &run_id,
                state: RunState::Running,
                now_ms: due,
            })
            .unwrap()
        );
        // While it is open, a late report changes nothing.
        assert!(
            !s.run_failed_after_delivery(&run_id, "late", "delivery failed: late")
                .unwrap()
        );
        let delivered = RunUpdate {
            state: RunState::Delivered,
            session_id: None,
            answer: Some("report".into()),
            error: None,
            attempts: 1,
            next_attempt_ms: None,
            finished_at_ms: Some(due + 1),
            outcome: "delivered to whatsapp:1555".into(),
        };
        s.run_update(&run_id, &delivered, &fence).unwrap();
        runs.push(run_id);
        due += 60_000;
    }
    // The first run fails late: its row changes, the job's outcome (the
    // second run's) does not.
    let why = "outside the window (error 131047: too late)";
    let outcome = format!("delivery failed: {why}");
    assert!(
        s.run_failed_after_delivery(&runs[0], why, &outcome)
            .unwrap()
    );
    let before = s.job_runs(&job.id, 5).unwrap();
    let first = before.iter().find(|r| r.id == runs[0]).unwrap();
    assert_eq!(first.state, RunState::DeliveryFailed);
    assert_eq!(first.error.as_deref(), Some(why));
    assert_eq!(
        first.answer.as_deref(),
        Some("report"),
        "the answer is kept"
    );
    assert_eq!(
        cron::find(&s, &job.id).unwrap().last_outcome.as_deref(),
        Some("delivered to whatsapp:1555")
    );
    // The same report again: no change.
    assert!(
        !s.run_failed_after_delivery(&runs[0], "other", "delivery failed: other")
            .unwrap()
    );
    assert_eq!(s.job_runs(&job.id, 5).unwrap(), before);
    // The latest run fails late: the job's outcome says so.
    assert!(
        s.run_failed_after_delivery(&runs[1], why, &outcome)
            .unwrap()
    );
    assert_eq!(
        cron::find(&s, &job.id).unwrap().last_outcome.as_deref(),
        Some(outcome.as_str())
    );
    assert!(
        !s.run_failed_after_delivery("r000000000000", why, &outcome)
            .unwrap()
    );
}

both!(
    jobs_are_created_listed_changed_and_removed,
    bad_input_is_refused_and_nothing_is_stored,
    one_claim_per_due_time_across_connections,
    a_one_off_ends_and_a_removed_job_leaves_no_runnable_run,
    a_delivery_reported_failed_later_is_recorded_once,
);
