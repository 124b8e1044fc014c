//! Scheduled jobs and their runs on SQLite (see `store/src/jobs.rs`).

use rusqlite::{OptionalExtension, Row, params};

use super::lease::check_fence;
use super::{Sqlite, WriteTx, to_i64};
use crate::backend::Jobs;
use crate::jobs::{
    Claim, JobRecord, RunRecord, RunUpdate, count, job_state, one_job_of, opt_i64, opt_u64,
    run_state,
};
use crate::{Fence, StoreError, from_i64, prefix_end};

const JOB_COLUMNS: &str = "id, name, schedule, prompt, deliver, origin_platform, origin_chat, \
     origin_thread, repeat_total, runs_done, state, next_run_ms, last_run_ms, last_outcome, \
     created_at_ms, script, no_agent";

const RUN_COLUMNS: &str = "id, job_id, due_ms, state, claimed_at_ms, finished_at_ms, session_id, \
     answer, error, attempts, next_attempt_ms";

type RawJob = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    Option<String>,
    i64,
);

/// The columns of schema 10 (a job's script) beside the rest.
type RawJobScript = (RawJob, Option<String>, bool);

fn raw_job(row: &Row<'_>) -> rusqlite::Result<RawJobScript> {
    let base = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
        row.get(12)?,
        row.get(13)?,
        row.get(14)?,
    );
    Ok((base, row.get(15)?, row.get(16)?))
}

fn job((raw, script, no_agent): RawJobScript) -> Result<JobRecord, StoreError> {
    let (
        id,
        name,
        schedule,
        prompt,
        deliver,
        op,
        oc,
        ot,
        repeat,
        done,
        state,
        next,
        last,
        outcome,
        created,
    ) = raw;
    Ok(JobRecord {
        repeat: repeat.map(|r| count(&id, "repeat", r)).transpose()?,
        runs_done: count(&id, "runs_done", done)?,
        state: job_state(&id, &state)?,
        next_run_ms: opt_u64(&id, "next run", next)?,
        last_run_ms: opt_u64(&id, "last run", last)?,
        created_at_ms: from_i64(&id, "created_at_ms", created)?,
        id,
        name,
        schedule,
        prompt,
        deliver,
        origin_platform: op,
        origin_chat: oc,
        origin_thread: ot,
        last_outcome: outcome,
        script,
        no_agent,
    })
}

type RawRun = (
    String,
    String,
    i64,
    String,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
);

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
    ))
}

fn run(raw: RawRun) -> Result<RunRecord, StoreError> {
    let (id, job_id, due, state, claimed, finished, session_id, answer, error, attempts, next) =
        raw;
    Ok(RunRecord {
        due_ms: from_i64(&id, "due", due)?,
        state: run_state(&id, &state)?,
        claimed_at_ms: from_i64(&id, "claimed", claimed)?,
        finished_at_ms: opt_u64(&id, "finished", finished)?,
        attempts: count(&id, "attempts", attempts)?,
        next_attempt_ms: opt_u64(&id, "next attempt", next)?,
        id,
        job_id,
        session_id,
        answer,
        error,
    })
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Jobs for Sqlite {
    fn job_insert(&mut self, j: &JobRecord) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT INTO cron_jobs ({JOB_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
        );
        self.conn.prepare_cached(&sql)?.execute(params![
            j.id,
            j.name,
            j.schedule,
            j.prompt,
            j.deliver,
            j.origin_platform,
            j.origin_chat,
            j.origin_thread,
            j.repeat,
            j.runs_done,
            j.state.as_str(),
            opt_i64("next run", j.next_run_ms)?,
            opt_i64("last run", j.last_run_ms)?,
            j.last_outcome,
            to_i64("created_at_ms", j.created_at_ms)?,
            j.script,
            j.no_agent,
        ])?;
        Ok(())
    }

    fn find_job(&self, id_or_prefix: &str) -> Result<Option<JobRecord>, StoreError> {
        let exact = format!("SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id = ?1");
        if let Some(raw) = self
            .conn
            .prepare_cached(&exact)?
            .query_row([id_or_prefix], raw_job)
            .optional()?
        {
            return job(raw).map(Some);
        }
        let Some(end) = prefix_end(id_or_prefix) else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 5"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let found = stmt
            .query_map([id_or_prefix, end.as_str()], raw_job)?
            .collect::<Result<Vec<_>, _>>()?;
        one_job_of(
            id_or_prefix,
            found.into_iter().map(job).collect::<Result<_, _>>()?,
        )
    }

    fn jobs(&self, all: bool) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE ?1 OR state <> 'done' \
             ORDER BY created_at_ms, id"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([all], raw_job)?;
        rows.map(|r| job(r?)).collect()
    }

    fn job_update(&mut self, j: &JobRecord) -> Result<bool, StoreError> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE cron_jobs SET name = ?2, schedule = ?3, prompt = ?4, deliver = ?5, \
                 repeat_total = ?6, state = ?7, next_run_ms = ?8, script = ?9, no_agent = ?10 \
                 WHERE id = ?1",
            )?
            .execute(params![
                j.id,
                j.name,
                j.schedule,
                j.prompt,
                j.deliver,
                j.repeat,
                j.state.as_str(),
                opt_i64("next run", j.next_run_ms)?,
                j.script,
                j.no_agent,
            ])?;
        Ok(changed > 0)
    }

    fn job_delete(&mut self, id: &str) -> Result<bool, StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        let deleted = tx
            .prepare_cached("DELETE FROM cron_jobs WHERE id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM cron_runs WHERE job_id = ?1 AND state = 'running'")?
            .execute([id])?;
        tx.commit()?;
        Ok(deleted > 0)
    }

    fn due_jobs(&self, now_ms: u64, n: usize) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs j WHERE state = 'active' \
             AND next_run_ms IS NOT NULL AND next_run_ms <= ?1 \
             AND NOT EXISTS (SELECT 1 FROM cron_runs r \
                 WHERE r.state IN ('running', 'pending') AND r.job_id = j.id) \
             ORDER BY next_run_ms LIMIT ?2"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![to_i64("now", now_ms)?, limit(n)], raw_job)?;
        rows.map(|r| job(r?)).collect()
    }

    fn job_claim(&mut self, c: &Claim<'_>) -> Result<bool, StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        let moved = tx
            .prepare_cached(
                "UPDATE cron_jobs SET next_run_ms = ?3, runs_done = runs_done + 1, \
                 last_run_ms = ?2, state = CASE WHEN ?3 IS NULL THEN 'done' ELSE state END \
                 WHERE id = ?1 AND state = 'active' AND next_run_ms = ?2 \
                 AND NOT EXISTS (SELECT 1 FROM cron_runs r \
                     WHERE r.state IN ('running', 'pending') AND r.job_id = ?1)",
            )?
            .execute(params![
                c.job_id,
                to_i64("due", c.due_ms)?,
                opt_i64("next run", c.next_run_ms)?,
            ])?;
        if moved == 0 {
            return Ok(false);
        }
        let finished = (!c.state.is_open()).then_some(c.now_ms);
        tx.prepare_cached(
            "INSERT INTO cron_runs (id, job_id, due_ms, state, claimed_at_ms, finished_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            c.run_id,
            c.job_id,
            to_i64("due", c.due_ms)?,
            c.state.as_str(),
            to_i64("now", c.now_ms)?,
            opt_i64("finished", finished)?,
        ])?;
        if !c.state.is_open() {
            tx.prepare_cached("UPDATE cron_jobs SET last_outcome = ?2 WHERE id = ?1")?
                .execute(params![c.job_id, c.state.to_string()])?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE state IN ('running', 'pending') \
             ORDER BY claimed_at_ms, id"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([], raw_run)?;
        rows.map(|r| run(r?)).collect()
    }

    fn job_runs(&self, job_id: &str, n: usize) -> Result<Vec<RunRecord>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = ?1 \
             ORDER BY claimed_at_ms DESC, due_ms DESC LIMIT ?2"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![job_id, limit(n)], raw_run)?;
        rows.map(|r| run(r?)).collect()
    }

    fn run_update(&mut self, run_id: &str, u: &RunUpdate, fence: &Fence) -> Result<(), StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        check_fence(&tx, fence)?;
        tx.prepare_cached(
            "UPDATE cron_runs SET state = ?2, session_id = ?3, answer = ?4, error = ?5, \
             attempts = ?6, next_attempt_ms = ?7, finished_at_ms = ?8 WHERE id = ?1",
        )?
        .execute(params![
            run_id,
            u.state.as_str(),
            u.session_id,
            u.answer,
            u.error,
            u.attempts,
            opt_i64("next attempt", u.next_attempt_ms)?,
            opt_i64("finished", u.finished_at_ms)?,
        ])?;
        tx.prepare_cached(
            "UPDATE cron_jobs SET last_outcome = ?2 \
             WHERE id = (SELECT job_id FROM cron_runs WHERE id = ?1)",
        )?
        .execute(params![run_id, u.outcome])?;
        tx.commit()?;
        Ok(())
    }

    fn run_failed_after_delivery(
        &mut self,
        run_id: &str,
        error: &str,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        let tx = WriteTx::begin(&self.conn)?;
        let changed = tx
            .prepare_cached(
                "UPDATE cron_runs SET state = 'delivery_failed', error = ?2 \
                 WHERE id = ?1 AND state = 'delivered'",
            )?
            .execute(params![run_id, error])?;
        if changed > 0 {
            tx.prepare_cached(
                "UPDATE cron_jobs SET last_outcome = ?2 \
                 WHERE id = (SELECT job_id FROM cron_runs WHERE id = ?1) \
                 AND NOT EXISTS (SELECT 1 FROM cron_runs later, cron_runs this \
                   WHERE this.id = ?1 AND later.job_id = this.job_id \
                   AND later.claimed_at_ms > this.claimed_at_ms)",
            )?
            .execute(params![run_id, outcome])?;
        }
        tx.commit()?;
        Ok(changed > 0)
    }
}
