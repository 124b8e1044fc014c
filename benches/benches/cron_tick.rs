//! The scheduler's cost per tick with 10 000 jobs (SPEC Y1): what each
//! tick asks the store when nothing is due — the due scan and the open-run
//! sweep — on a real SQLite file; and one claim of a due job.
//!
//! `cargo bench -p hermes-benches --bench cron_tick`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hermes_runtime::cron::{self, CronContext, JobSpec, Origin, TimeZone};
use hermes_runtime::store::{Claim, RunState, Store, new_run_id};

/// 2026-12-02T08:30:00Z.
const NOW: u64 = 1_796_200_200_000;
const JOBS: usize = 10_000;

fn store_with_jobs(dir: &tempfile::TempDir) -> Store {
    let mut store = Store::open(&dir.path().join("state.db")).unwrap();
    let ctx = CronContext {
        now_ms: NOW,
        tz: TimeZone::UTC,
        platforms: None,
        scripts_dir: None,
    };
    let origin = Origin {
        platform: "telegram".into(),
        chat: "42".into(),
        thread: None,
    };
    let schedules = ["every 30m", "0 9 * * *", "2h", "every 1d", "*/5 * * * *"];
    for i in 0..JOBS {
        let spec = JobSpec {
            schedule: Some(schedules[i % schedules.len()].into()),
            prompt: Some(format!("job number {i}: check something")),
            ..JobSpec::default()
        };
        cron::create(&mut store, &spec, Some(&origin), &ctx).unwrap();
    }
    store
}

fn tick(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with_jobs(&dir);
    // Nothing due yet (the earliest is 5 minutes away): a tick's reads.
    c.bench_function("cron_tick_idle_10000_jobs", |b| {
        b.iter(|| {
            let due = store.due_jobs(black_box(NOW + 1_000), 256).unwrap();
            let open = store.open_runs().unwrap();
            black_box((due.len(), open.len()))
        });
    });
    // One claim of a due job (a transaction: the job moves on, a run row),
    // the same recurring job again and again, each time at its next due time.
    let job = store
        .jobs(false)
        .unwrap()
        .into_iter()
        .find(|j| j.schedule.starts_with("every:"))
        .unwrap();
    let mut due = job.next_run_ms.unwrap();
    c.bench_function("cron_claim_one_due_job", |b| {
        b.iter(|| {
            let run_id = new_run_id();
            let claimed = store
                .job_claim(&Claim {
                    job_id: &job.id,
                    due_ms: due,
                    next_run_ms: Some(due + 1_800_000),
                    run_id: &run_id,
                    state: RunState::Skipped,
                    now_ms: due,
                })
                .unwrap();
            assert!(claimed);
            due += 1_800_000;
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = tick
}
criterion_main!(benches);
