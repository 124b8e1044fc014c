//! Scheduled jobs and their runs on PostgreSQL (see `store/src/jobs.rs`).
//!
//! A claim is one `UPDATE … WHERE next_run_ms = $due` and an `INSERT`, in
//! one transaction: of two gateways claiming the same due time, the second
//! `UPDATE` waits for the first to commit, then re-reads the row (READ
//! COMMITTED), finds `next_run_ms` moved on and changes nothing.

use postgres::Row;

use super::conn::prepare;
use super::{Postgres, check_fence, from_db, to_db};
use crate::backend::Jobs;
use crate::jobs::{
    Claim, JobRecord, RunRecord, RunUpdate, count, job_state, one_job_of, opt_i64, opt_u64,
    run_state,
};
use crate::{Fence, StoreError, from_i64, to_i64};

macro_rules! job_columns {
    () => {
        "id, name, schedule, prompt, deliver, origin_platform, origin_chat, origin_thread, \
         repeat_total, runs_done, state, next_run_ms, last_run_ms, last_outcome, created_at_ms, \
         script, no_agent"
    };
}

macro_rules! run_columns {
    () => {
        "id, job_id, due_ms, state, claimed_at_ms, finished_at_ms, session_id, answer, error, \
         attempts, next_attempt_ms"
    };
}

fn text(row: &Row, i: usize) -> Result<String, StoreError> {
    let s: String = row.try_get(i)?;
    Ok(from_db(&s).into_owned())
}

fn opt_text(row: &Row, i: usize) -> Result<Option<String>, StoreError> {
    let s: Option<String> = row.try_get(i)?;
    Ok(s.map(|s| from_db(&s).into_owned()))
}

fn job(row: &Row) -> Result<JobRecord, StoreError> {
    let id: String = row.try_get(0)?;
    let repeat: Option<i64> = row.try_get(8)?;
    let state: String = row.try_get(10)?;
    Ok(JobRecord {
        name: text(row, 1)?,
        schedule: text(row, 2)?,
        prompt: text(row, 3)?,
        deliver: text(row, 4)?,
        origin_platform: opt_text(row, 5)?,
        origin_chat: opt_text(row, 6)?,
        origin_thread: opt_text(row, 7)?,
        repeat: repeat.map(|r| count(&id, "repeat", r)).transpose()?,
        runs_done: count(&id, "runs_done", row.try_get(9)?)?,
        state: job_state(&id, &state)?,
        next_run_ms: opt_u64(&id, "next run", row.try_get(11)?)?,
        last_run_ms: opt_u64(&id, "last run", row.try_get(12)?)?,
        last_outcome: opt_text(row, 13)?,
        created_at_ms: from_i64(&id, "created_at_ms", row.try_get(14)?)?,
        script: opt_text(row, 15)?,
        no_agent: row.try_get(16)?,
        id,
    })
}

fn run(row: &Row) -> Result<RunRecord, StoreError> {
    let id: String = row.try_get(0)?;
    let state: String = row.try_get(3)?;
    Ok(RunRecord {
        job_id: row.try_get(1)?,
        due_ms: from_i64(&id, "due", row.try_get(2)?)?,
        state: run_state(&id, &state)?,
        claimed_at_ms: from_i64(&id, "claimed", row.try_get(4)?)?,
        finished_at_ms: opt_u64(&id, "finished", row.try_get(5)?)?,
        session_id: row.try_get(6)?,
        answer: opt_text(row, 7)?,
        error: opt_text(row, 8)?,
        attempts: count(&id, "attempts", row.try_get(9)?)?,
        next_attempt_ms: opt_u64(&id, "next attempt", row.try_get(10)?)?,
        id,
    })
}

fn db(s: &str) -> String {
    to_db(s).into_owned()
}

fn opt_db(s: Option<&String>) -> Option<String> {
    s.map(|s| db(s))
}

impl Jobs for Postgres {
    fn job_insert(&mut self, j: &JobRecord) -> Result<(), StoreError> {
        let values: (String, String, String, String, String) = (
            j.id.clone(),
            db(&j.name),
            db(&j.schedule),
            db(&j.prompt),
            db(&j.deliver),
        );
        let origin = (
            opt_db(j.origin_platform.as_ref()),
            opt_db(j.origin_chat.as_ref()),
            opt_db(j.origin_thread.as_ref()),
        );
        let repeat = j.repeat.map(i64::from);
        let done = i64::from(j.runs_done);
        let state = j.state.as_str();
        let next = opt_i64("next run", j.next_run_ms)?;
        let last = opt_i64("last run", j.last_run_ms)?;
        let outcome = opt_db(j.last_outcome.as_ref());
        let created = to_i64("created_at_ms", j.created_at_ms)?;
        let script = (opt_db(j.script.as_ref()), j.no_agent);
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "INSERT INTO cron_jobs (",
                job_columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17)"
            ))?;
            session.client.execute(
                &stmt,
                &[
                    &values.0, &values.1, &values.2, &values.3, &values.4, &origin.0, &origin.1,
                    &origin.2, &repeat, &done, &state, &next, &last, &outcome, &created, &script.0,
                    &script.1,
                ],
            )?;
            Ok(())
        })
    }

    fn find_job(&self, id_or_prefix: &str) -> Result<Option<JobRecord>, StoreError> {
        let given = id_or_prefix.to_owned();
        let found = self.conn.call(move |session| {
            let exact = session.statement(concat!(
                "SELECT ",
                job_columns!(),
                " FROM cron_jobs WHERE id = $1"
            ))?;
            if let Some(row) = session.client.query_opt(&exact, &[&given])? {
                return Ok(vec![job(&row)?]);
            }
            if given.is_empty() {
                return Ok(Vec::new());
            }
            let stmt = session.statement(concat!(
                "SELECT ",
                job_columns!(),
                " FROM cron_jobs WHERE starts_with(id, $1) ORDER BY id LIMIT 5"
            ))?;
            session
                .client
                .query(&stmt, &[&given])?
                .iter()
                .map(job)
                .collect::<Result<Vec<_>, _>>()
        })?;
        one_job_of(id_or_prefix, found)
    }

    fn jobs(&self, all: bool) -> Result<Vec<JobRecord>, StoreError> {
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                job_columns!(),
                " FROM cron_jobs WHERE $1 OR state <> 'done' ORDER BY created_at_ms, ordinal"
            ))?;
            session
                .client
                .query(&stmt, &[&all])?
                .iter()
                .map(job)
                .collect()
        })
    }

    fn job_update(&mut self, j: &JobRecord) -> Result<bool, StoreError> {
        let fields = (
            j.id.clone(),
            db(&j.name),
            db(&j.schedule),
            db(&j.prompt),
            db(&j.deliver),
        );
        let repeat = j.repeat.map(i64::from);
        let state = j.state.as_str();
        let next = opt_i64("next run", j.next_run_ms)?;
        let script = (opt_db(j.script.as_ref()), j.no_agent);
        self.conn.call(move |session| {
            let stmt = session.statement(
                "UPDATE cron_jobs SET name = $2, schedule = $3, prompt = $4, deliver = $5, \
                 repeat_total = $6, state = $7, next_run_ms = $8, script = $9, no_agent = $10 \
                 WHERE id = $1",
            )?;
            let n = session.client.execute(
                &stmt,
                &[
                    &fields.0, &fields.1, &fields.2, &fields.3, &fields.4, &repeat, &state, &next,
                    &script.0, &script.1,
                ],
            )?;
            Ok(n > 0)
        })
    }

    fn job_delete(&mut self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let del = prepare(statements, &mut tx, "DELETE FROM cron_jobs WHERE id = $1")?;
            let n = tx.execute(&del, &[&id])?;
            let runs = prepare(
                statements,
                &mut tx,
                "DELETE FROM cron_runs WHERE job_id = $1 AND state = 'running'",
            )?;
            tx.execute(&runs, &[&id])?;
            tx.commit()?;
            Ok(n > 0)
        })
    }

    fn due_jobs(&self, now_ms: u64, n: usize) -> Result<Vec<JobRecord>, StoreError> {
        let now = to_i64("now", now_ms)?;
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                job_columns!(),
                " FROM cron_jobs j WHERE state = 'active' \
                 AND next_run_ms IS NOT NULL AND next_run_ms <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM cron_runs r \
                     WHERE r.state IN ('running', 'pending') AND r.job_id = j.id) \
                 ORDER BY next_run_ms LIMIT $2"
            ))?;
            session
                .client
                .query(&stmt, &[&now, &n])?
                .iter()
                .map(job)
                .collect()
        })
    }

    fn job_claim(&mut self, c: &Claim<'_>) -> Result<bool, StoreError> {
        let job_id = c.job_id.to_owned();
        let run_id = c.run_id.to_owned();
        let due = to_i64("due", c.due_ms)?;
        let next = opt_i64("next run", c.next_run_ms)?;
        let now = to_i64("now", c.now_ms)?;
        let state = c.state;
        let finished = (!state.is_open()).then_some(now);
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let moved = prepare(
                statements,
                &mut tx,
                "UPDATE cron_jobs SET next_run_ms = $3, runs_done = runs_done + 1, \
                 last_run_ms = $2, state = CASE WHEN $3::BIGINT IS NULL THEN 'done' ELSE state END \
                 WHERE id = $1 AND state = 'active' AND next_run_ms = $2 \
                 AND NOT EXISTS (SELECT 1 FROM cron_runs r \
                     WHERE r.state IN ('running', 'pending') AND r.job_id = $1)",
            )?;
            if tx.execute(&moved, &[&job_id, &due, &next])? == 0 {
                return Ok(false);
            }
            let insert = prepare(
                statements,
                &mut tx,
                "INSERT INTO cron_runs (id, job_id, due_ms, state, claimed_at_ms, finished_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )?;
            tx.execute(
                &insert,
                &[&run_id, &job_id, &due, &state.as_str(), &now, &finished],
            )?;
            if !state.is_open() {
                let outcome = prepare(
                    statements,
                    &mut tx,
                    "UPDATE cron_jobs SET last_outcome = $2 WHERE id = $1",
                )?;
                tx.execute(&outcome, &[&job_id, &state.to_string()])?;
            }
            tx.commit()?;
            Ok(true)
        })
    }

    fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                run_columns!(),
                " FROM cron_runs WHERE state IN ('running', 'pending') \
                 ORDER BY claimed_at_ms, ordinal"
            ))?;
            session.client.query(&stmt, &[])?.iter().map(run).collect()
        })
    }

    fn job_runs(&self, job_id: &str, n: usize) -> Result<Vec<RunRecord>, StoreError> {
        let job_id = job_id.to_owned();
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.conn.call(move |session| {
            let stmt = session.statement(concat!(
                "SELECT ",
                run_columns!(),
                " FROM cron_runs WHERE job_id = $1 \
                 ORDER BY claimed_at_ms DESC, due_ms DESC LIMIT $2"
            ))?;
            session
                .client
                .query(&stmt, &[&job_id, &n])?
                .iter()
                .map(run)
                .collect()
        })
    }

    fn run_update(&mut self, run_id: &str, u: &RunUpdate, fence: &Fence) -> Result<(), StoreError> {
        let run_id = run_id.to_owned();
        let fence = fence.clone();
        let state = u.state.as_str();
        let session_id = u.session_id.clone();
        let answer = opt_db(u.answer.as_ref());
        let error = opt_db(u.error.as_ref());
        let attempts = i64::from(u.attempts);
        let next = opt_i64("next attempt", u.next_attempt_ms)?;
        let finished = opt_i64("finished", u.finished_at_ms)?;
        let outcome = db(&u.outcome);
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            check_fence(statements, &mut tx, &fence)?;
            let stmt = prepare(
                statements,
                &mut tx,
                "UPDATE cron_runs SET state = $2, session_id = $3, answer = $4, error = $5, \
                 attempts = $6, next_attempt_ms = $7, finished_at_ms = $8 WHERE id = $1",
            )?;
            tx.execute(
                &stmt,
                &[
                    &run_id,
                    &state,
                    &session_id,
                    &answer,
                    &error,
                    &attempts,
                    &next,
                    &finished,
                ],
            )?;
            let job = prepare(
                statements,
                &mut tx,
                "UPDATE cron_jobs SET last_outcome = $2 \
                 WHERE id = (SELECT job_id FROM cron_runs WHERE id = $1)",
            )?;
            tx.execute(&job, &[&run_id, &outcome])?;
            tx.commit()?;
            Ok(())
        })
    }

    fn run_failed_after_delivery(
        &mut self,
        run_id: &str,
        error: &str,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        let run_id = run_id.to_owned();
        let error = db(error);
        let outcome = db(outcome);
        self.conn.call(move |session| {
            let (statements, client) = session.parts();
            let mut tx = client.transaction()?;
            let stmt = prepare(
                statements,
                &mut tx,
                "UPDATE cron_runs SET state = 'delivery_failed', error = $2 \
                 WHERE id = $1 AND state = 'delivered'",
            )?;
            let changed = tx.execute(&stmt, &[&run_id, &error])?;
            if changed > 0 {
                let job = prepare(
                    statements,
                    &mut tx,
                    "UPDATE cron_jobs SET last_outcome = $2 \
                     WHERE id = (SELECT job_id FROM cron_runs WHERE id = $1) \
                     AND NOT EXISTS (SELECT 1 FROM cron_runs later, cron_runs this \
                       WHERE this.id = $1 AND later.job_id = this.job_id \
                       AND later.claimed_at_ms > this.claimed_at_ms)",
                )?;
                tx.execute(&job, &[&run_id, &outcome])?;
            }
            tx.commit()?;
            Ok(changed > 0)
        })
    }
}
