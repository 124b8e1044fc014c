//! The schema and its ordered forward migrations.
//!
//! The schema version lives in `PRAGMA user_version`. Each [`Migration`] moves
//! the database from `version - 1` to `version`, inside one `IMMEDIATE`
//! transaction together with the `user_version` bump, so a crash or a second
//! process opening the same file never sees a half-migrated schema. Steps are
//! only ever appended: a released step is never edited, because databases in
//! the field were built by it.
//!
//! A new database skips the steps: [`LATEST`] creates what they build, in
//! one transaction. Replaying them cost a first run ≈ 18 M instructions
//! (86 % of it; every `ALTER TABLE` re-parses the whole schema) against
//! ≈ 1 M. Adding a step means writing its result into [`LATEST`]; the test
//! `a_new_database_gets_the_schema_the_migrations_build` (`migrate.rs`)
//! compares the two.

use rusqlite::Transaction;

/// One forward step of the schema.
#[derive(Debug)]
pub(super) struct Migration {
    /// The `user_version` the database has after this step.
    pub version: u32,
    /// What the step does, for logs.
    pub what: &'static str,
    /// What it runs.
    pub change: Change,
}

/// What a [`Migration`] runs, inside its transaction.
#[derive(Debug)]
pub(super) enum Change {
    /// SQL, run with `execute_batch`.
    Sql(&'static str),
    /// A change SQL statements cannot make alone.
    Code(fn(&Transaction<'_>) -> rusqlite::Result<()>),
}

impl Migration {
    /// Runs the step's change in `tx` (the caller bumps `user_version`).
    pub(super) fn apply(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        match self.change {
            Change::Sql(sql) => tx.execute_batch(sql),
            Change::Code(change) => change(tx),
        }
    }
}

/// Every step, in order; `MIGRATIONS[i].version == i + 1`.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        what: "sessions, messages and kv tables",
        change: Change::Sql(V1),
    },
    Migration {
        version: 2,
        what: "session titles and full-text search over message content",
        change: Change::Sql(V2),
    },
    Migration {
        version: 3,
        what: "full-text indexing by catch-up instead of per-row insert triggers; \
               session indexes that appends do not have to update",
        change: Change::Sql(V3),
    },
    Migration {
        version: 4,
        what: "compaction records: the compacted view of a transcript, beside its originals",
        change: Change::Sql(V4),
    },
    Migration {
        version: 5,
        what: "the working directory of each session (the CLI continues the latest session of a directory)",
        change: Change::Sql(V5),
    },
    Migration {
        version: 6,
        what: "per-message prompt-cache counts, answering model and reasoning details",
        change: Change::Sql(V6),
    },
    Migration {
        version: 7,
        what: "attachments of user messages (references to files in $HERMES_HOME/media)",
        change: Change::Sql(V7),
    },
    Migration {
        version: 8,
        what: "leases with fencing epochs (bots, sessions)",
        change: Change::Sql(V8),
    },
    Migration {
        version: 9,
        what: "scheduled jobs and their runs (the runs are the deliveries' outbox)",
        change: Change::Sql(V9),
    },
    Migration {
        version: 10,
        what: "scheduled jobs may start with a script (and skip the model)",
        change: Change::Sql(V10),
    },
    Migration {
        version: 11,
        what: "system prompts in a table of their own (appends no longer rewrite them)",
        change: Change::Sql(V11),
    },
    Migration {
        version: 12,
        what: "the CHECK on a session's status written as comparisons (no temporary b-tree per write)",
        change: Change::Code(v12),
    },
    Migration {
        version: 13,
        what: "messages' id and content refused to UPDATEs, in place of the trigger that re-indexed them",
        change: Change::Sql(V13),
    },
];

/// The newest schema this build knows.
pub(super) const LATEST_VERSION: u32 = MIGRATIONS.len() as u32;

/// What [`MIGRATIONS`] build, for a new database in one step: the same
/// tables, columns in the same order (`ALTER TABLE … ADD COLUMN` appends
/// after the last column), indexes, triggers and the full-text watermark
/// row. Each object's reasons are on the step that made it.
pub(super) const LATEST: &str = "
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    session_key     TEXT,
    source_platform TEXT,
    source_chat_id  TEXT,
    source_user_id  TEXT,
    model           TEXT,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    status          TEXT NOT NULL DEFAULT 'active'
                    CHECK (status = 'active' OR status = 'ended' OR status = 'suspended'),
    clean_shutdown  INTEGER NOT NULL DEFAULT 0,
    title           TEXT,
    workdir         TEXT
);
CREATE INDEX sessions_by_key ON sessions (session_key, status);
CREATE INDEX sessions_by_created ON sessions (created_at_ms);
CREATE INDEX sessions_by_workdir ON sessions (source_platform, workdir);

CREATE TABLE session_prompts (
    session_id    TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    system_prompt TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE messages (
    id                 INTEGER PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq                INTEGER NOT NULL,
    role               TEXT NOT NULL,
    content            TEXT,
    tool_calls         TEXT,
    tool_call_id       TEXT,
    reasoning          TEXT,
    prompt_tokens      INTEGER,
    completion_tokens  INTEGER,
    total_tokens       INTEGER,
    finish_reason      TEXT,
    interrupted        INTEGER NOT NULL DEFAULT 0,
    timestamp_ms       INTEGER NOT NULL,
    cached_tokens      INTEGER,
    cache_write_tokens INTEGER,
    model              TEXT,
    reasoning_details  TEXT,
    attachments        TEXT,
    UNIQUE (session_id, seq)
);

CREATE TABLE kv (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE messages_fts_state (
    id           INTEGER PRIMARY KEY CHECK (id = 0),
    indexed_upto INTEGER NOT NULL
);
INSERT INTO messages_fts_state (id, indexed_upto) VALUES (0, 0);
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', old.id, old.content FROM messages_fts_state
        WHERE id = 0 AND old.id <= indexed_upto;
    UPDATE messages_fts_state
        SET indexed_upto = (SELECT COALESCE(MAX(id), 0) FROM messages)
        WHERE id = 0 AND indexed_upto > (SELECT COALESCE(MAX(id), 0) FROM messages);
END;
CREATE TRIGGER messages_append_only BEFORE UPDATE OF id, content ON messages BEGIN
    SELECT RAISE(ABORT, 'a message''s id and content do not change (the search index holds them): delete it and insert another');
END;

CREATE TABLE compactions (
    id            INTEGER PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    head_end      INTEGER NOT NULL,
    tail_start    INTEGER NOT NULL,
    end_seq       INTEGER NOT NULL,
    placement     TEXT NOT NULL CHECK (placement IN ('standalone', 'before_next')),
    replaced      INTEGER NOT NULL,
    summary       TEXT NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after  INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    CHECK (head_end <= tail_start AND tail_start <= end_seq)
);
CREATE INDEX compactions_by_session ON compactions (session_id, id);

CREATE TABLE leases (
    name           TEXT PRIMARY KEY NOT NULL,
    owner          TEXT,
    epoch          INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    renewed_at_ms  INTEGER NOT NULL,
    state          TEXT
);

CREATE TABLE cron_jobs (
    id              TEXT PRIMARY KEY NOT NULL,
    name            TEXT NOT NULL,
    schedule        TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    deliver         TEXT NOT NULL,
    origin_platform TEXT,
    origin_chat     TEXT,
    origin_thread   TEXT,
    repeat_total    INTEGER,
    runs_done       INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state IN ('active', 'paused', 'done')),
    next_run_ms     INTEGER,
    last_run_ms     INTEGER,
    last_outcome    TEXT,
    created_at_ms   INTEGER NOT NULL,
    script          TEXT,
    no_agent        INTEGER NOT NULL DEFAULT 0 CHECK (no_agent IN (0, 1))
);
CREATE INDEX cron_jobs_due ON cron_jobs (state, next_run_ms);

CREATE TABLE cron_runs (
    id              TEXT PRIMARY KEY NOT NULL,
    job_id          TEXT NOT NULL,
    due_ms          INTEGER NOT NULL,
    state           TEXT NOT NULL,
    claimed_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    session_id      TEXT,
    answer          TEXT,
    error           TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    UNIQUE (job_id, due_ms)
);
CREATE INDEX cron_runs_open ON cron_runs (state, job_id);
CREATE INDEX cron_runs_by_job ON cron_runs (job_id, claimed_at_ms);
";

/// Version 1: the tables.
///
/// `messages.id` is an explicit `INTEGER PRIMARY KEY` (a stable rowid alias)
/// and `(session_id, seq)` is `UNIQUE` rather than the primary key: the
/// full-text index of version 2 refers to messages by rowid, and `VACUUM` may
/// renumber implicit rowids, which would silently point search hits at the
/// wrong messages. The uniqueness guarantee of `(session_id, seq)` is the same.
///
/// `clean_shutdown` is 0 while the session has been touched by a process that
/// has not (yet) stopped cleanly; see `Store::mark_clean_shutdown`.
const V1: &str = "
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    session_key     TEXT,
    source_platform TEXT,
    source_chat_id  TEXT,
    source_user_id  TEXT,
    model           TEXT,
    system_prompt   TEXT,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    status          TEXT NOT NULL DEFAULT 'active'
                    CHECK (status IN ('active', 'ended', 'suspended')),
    clean_shutdown  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_key ON sessions (session_key, status, updated_at_ms);
CREATE INDEX sessions_by_updated ON sessions (updated_at_ms);

CREATE TABLE messages (
    id                INTEGER PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq               INTEGER NOT NULL,
    role              TEXT NOT NULL,
    content           TEXT,
    tool_calls        TEXT,
    tool_call_id      TEXT,
    reasoning         TEXT,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    total_tokens      INTEGER,
    finish_reason     TEXT,
    interrupted       INTEGER NOT NULL DEFAULT 0,
    timestamp_ms      INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);

CREATE TABLE kv (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
";

/// Version 2: titles, and an FTS5 index over message content.
///
/// The index is an external-content table (the text is stored once, in
/// `messages`) kept in sync by triggers; the triggers are unconditional so
/// that rows with NULL content (tool-call-only assistant messages) are
/// inserted and deleted symmetrically, which keeps the index's own
/// `integrity-check` clean. The final `rebuild` indexes messages written by
/// version 1.
const V2: &str = "
ALTER TABLE sessions ADD COLUMN title TEXT;
CREATE INDEX sessions_by_created ON sessions (created_at_ms);

CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
";

/// Version 3: the full-text index catches up instead of following every
/// insert.
///
/// Why: the version-2 insert trigger made every append pay for FTS5 (a
/// segment flush per transaction plus the tokenizing, most of the cost of an
/// append), although the index is read only by `Store::search`. Now
/// `messages_fts_state.indexed_upto` (one row, `id = 0`) is a watermark `W`
/// with the invariant
///
/// > an existing message is in the index **iff** its id is `<= W`,
///
/// and `Store::search` first indexes every message with an id above `W` in
/// one `INSERT … SELECT` and raises `W`, in one write transaction, so its
/// results stay exact.
///
/// The invariant needs new messages to get ids above `W`. SQLite gives a new
/// row `MAX(id) + 1`, so deleting the highest ids would let the next insert
/// reuse an id `<= W` that was never indexed. The delete trigger therefore
/// (a) removes an indexed row from the index (an external-content table
/// needs the old text for that, and must not be told to delete a row it
/// never saw), then (b) lowers `W` to `MAX(id)` when it is above it. (b)
/// runs after (a) in the same trigger, and never drops `W` below a row that
/// still exists, so rows later in the same `DELETE` are still recognised as
/// indexed. Content or id updates (hermes makes none; hand edits might) are
/// mirrored the same way.
///
/// Nothing hermes writes inserts an explicit id; a hand-inserted row with an
/// id `<= W` would not be indexed until the next `rebuild`.
///
/// Every message was indexed by the version-2 triggers, so `W` starts at
/// `MAX(id)`.
///
/// Also: every append bumps `sessions.updated_at_ms`, and each index holding
/// that column is one more 4 KiB page written to the WAL (and checksummed)
/// per append. `sessions_by_key` loses the column (the few sessions of one
/// key are sorted on the fly) and `sessions_by_updated` goes: its readers,
/// `latest_session` and the start-up crash scan, run once per process and a
/// scan of the sessions table is cheap for them. An append now writes three
/// pages (the session row, the message row, its `(session_id, seq)` entry)
/// instead of five.
const V3: &str = "
DROP INDEX sessions_by_updated;
DROP INDEX sessions_by_key;
CREATE INDEX sessions_by_key ON sessions (session_key, status);

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;

CREATE TABLE messages_fts_state (
    id           INTEGER PRIMARY KEY CHECK (id = 0),
    indexed_upto INTEGER NOT NULL
);
INSERT INTO messages_fts_state (id, indexed_upto)
    SELECT 0, COALESCE(MAX(id), 0) FROM messages;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', old.id, old.content FROM messages_fts_state
        WHERE id = 0 AND old.id <= indexed_upto;
    UPDATE messages_fts_state
        SET indexed_upto = (SELECT COALESCE(MAX(id), 0) FROM messages)
        WHERE id = 0 AND indexed_upto > (SELECT COALESCE(MAX(id), 0) FROM messages);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF id, content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', old.id, old.content FROM messages_fts_state
        WHERE id = 0 AND old.id <= indexed_upto;
    INSERT INTO messages_fts (rowid, content)
        SELECT new.id, new.content FROM messages_fts_state
        WHERE id = 0 AND new.id <= indexed_upto;
    UPDATE messages_fts_state
        SET indexed_upto = (SELECT COALESCE(MAX(id), 0) FROM messages)
        WHERE id = 0 AND indexed_upto > (SELECT COALESCE(MAX(id), 0) FROM messages);
END;
";

/// Version 4: compactions (SPEC X1).
///
/// A compaction replaces the middle of what the model is given by a summary;
/// the original messages stay in `messages` (searchable, exportable) and
/// this table says how the *view* is made of them: messages with
/// `seq < head_end`, then the summary, then messages with
/// `seq >= tail_start` (including every later append). With placement
/// `before_next` the summary is the beginning of message `tail_start` (a
/// user message) instead of an entry of its own. `end_seq` is one past the
/// last message at the time: messages `[tail_start, end_seq)` were kept
/// verbatim and their recorded token usage predates the compaction. Only
/// the latest row of a session counts (each summary folds in the one
/// before); older rows are history. `/undo` deletes the rows made after the
/// turn it removes (`end_seq` above its first message).
const V4: &str = "
CREATE TABLE compactions (
    id            INTEGER PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    head_end      INTEGER NOT NULL,
    tail_start    INTEGER NOT NULL,
    end_seq       INTEGER NOT NULL,
    placement     TEXT NOT NULL CHECK (placement IN ('standalone', 'before_next')),
    replaced      INTEGER NOT NULL,
    summary       TEXT NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after  INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    CHECK (head_end <= tail_start AND tail_start <= end_seq)
);
CREATE INDEX compactions_by_session ON compactions (session_id, id);
";

/// Version 5: each session's working directory, so `hermes chat --continue`
/// resumes the latest session *of the current directory*. Sessions stored
/// before have none (NULL) and are reached with `--resume ID`. The index
/// serves that look-up (`source_platform, workdir`, then the few rows of one
/// directory sorted on the fly); appends never touch either column.
const V5: &str = "
ALTER TABLE sessions ADD COLUMN workdir TEXT;
CREATE INDEX sessions_by_workdir ON sessions (source_platform, workdir);
";

/// Version 6: what prices and the prompt cache need per message (SPEC X2,
/// X3): the tokens read from and written to the provider's cache, the
/// configured model that produced an assistant message (with a fallback
/// chain, not always the session's), and the provider's reasoning blocks
/// (OpenRouter's `reasoning_details` form) that some providers want back
/// within a tool loop. All nullable: older rows have none of them.
const V6: &str = "
ALTER TABLE messages ADD COLUMN cached_tokens INTEGER;
ALTER TABLE messages ADD COLUMN cache_write_tokens INTEGER;
ALTER TABLE messages ADD COLUMN model TEXT;
ALTER TABLE messages ADD COLUMN reasoning_details TEXT;
";

/// Version 7: the attachments of user messages (SPEC X6) — a JSON array of
/// references (kind, media type, path relative to `$HERMES_HOME/media`,
/// size, description), NULL for a message without any. The files
/// themselves never enter the database.
const V7: &str = "
ALTER TABLE messages ADD COLUMN attachments TEXT;
";

/// Version 8: leases (SPEC X8).
///
/// One row per lease (`bot:<platform>:<id>`, `session:<key>`): the holder
/// (`NULL` once released), the epoch every acquisition bumps — the fencing
/// token writes are checked against —, when it lapses unless renewed, and
/// the holder's note (a running turn). On SQLite one gateway holds the file
/// lock, so leases mostly record what runs; the same code serves
/// PostgreSQL, where several gateways compete for them.
const V8: &str = "
CREATE TABLE leases (
    name           TEXT PRIMARY KEY NOT NULL,
    owner          TEXT,
    epoch          INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    renewed_at_ms  INTEGER NOT NULL,
    state          TEXT
);
";

/// Version 9: scheduled jobs (SPEC Y1, `store/src/jobs.rs`).
///
/// `cron_jobs.next_run_ms` is what a claim is conditional on: the claim
/// moves it on in the transaction that inserts the run, so one due time
/// gives one run. `cron_runs` is the outbox: a run's answer is stored
/// (`pending`) before it is sent and the delivery recorded after.
/// `cron_runs_open` serves the per-tick "no open run" test and the sweep of
/// open runs; `cron_jobs_due` the due scan.
const V9: &str = "
CREATE TABLE cron_jobs (
    id              TEXT PRIMARY KEY NOT NULL,
    name            TEXT NOT NULL,
    schedule        TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    deliver         TEXT NOT NULL,
    origin_platform TEXT,
    origin_chat     TEXT,
    origin_thread   TEXT,
    repeat_total    INTEGER,
    runs_done       INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state IN ('active', 'paused', 'done')),
    next_run_ms     INTEGER,
    last_run_ms     INTEGER,
    last_outcome    TEXT,
    created_at_ms   INTEGER NOT NULL
);
CREATE INDEX cron_jobs_due ON cron_jobs (state, next_run_ms);

CREATE TABLE cron_runs (
    id              TEXT PRIMARY KEY NOT NULL,
    job_id          TEXT NOT NULL,
    due_ms          INTEGER NOT NULL,
    state           TEXT NOT NULL,
    claimed_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    session_id      TEXT,
    answer          TEXT,
    error           TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    UNIQUE (job_id, due_ms)
);
CREATE INDEX cron_runs_open ON cron_runs (state, job_id);
CREATE INDEX cron_runs_by_job ON cron_runs (job_id, claimed_at_ms);
";

/// Version 10: a job's script under `$HERMES_HOME/scripts/` (its output
/// is the run's context, or with `no_agent` the answer itself).
const V10: &str = "
ALTER TABLE cron_jobs ADD COLUMN script TEXT;
ALTER TABLE cron_jobs ADD COLUMN no_agent INTEGER NOT NULL DEFAULT 0 CHECK (no_agent IN (0, 1));
";

/// Version 11: each session's system prompt in a table of its own.
///
/// Every append bumps `sessions.updated_at_ms`, and SQLite rewrites a whole
/// row to change one column: with the prompt (4–20 KB) in the session row,
/// each append read it into a buffer of its own (a fresh `mmap` and
/// `munmap` under musl), compared and wrote it back, and the bumped column,
/// stored after the prompt, sat on an overflow page. Out of the row, a tool
/// turn of a one-shot costs 10 k fewer instructions with a 2.6 KB prompt
/// (224 k → 214 k) and 46 k fewer with a 16 KB one (310 k → 264 k)
/// (issue 39; BENCHMARKS.md "Per iteration").
/// A prompt is written when a session starts and when it is replaced.
/// `ON DELETE CASCADE` removes it with its session. `WITHOUT ROWID`: the
/// table is one b-tree keyed by session, no second index to parse at each
/// open or to write when a session starts.
const V11: &str = "
CREATE TABLE session_prompts (
    session_id    TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    system_prompt TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO session_prompts (session_id, system_prompt)
    SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL;
ALTER TABLE sessions DROP COLUMN system_prompt;
";

/// Version 12: the CHECK on `sessions.status` as comparisons.
///
/// SQLite evaluates `status IN ('active', 'ended', 'suspended')` through
/// an ephemeral b-tree of the three values, with a page cache, a page and
/// a temporary buffer of its own, at every insert of a session and every
/// change of its status, as a one-shot's start and end: 30 k of a 0-turn
/// run's 2.8 M instructions (issue 39; BENCHMARKS.md "Start-up").
/// Comparisons are evaluated in place, and admit the same values.
///
/// SQLite has no statement that rewrites an unnamed constraint (its
/// `ALTER TABLE … DROP CONSTRAINT` takes a name). The table's text is
/// edited as its documentation describes for removing one ("Making Other
/// Kinds Of Table Schema Changes", lang_altertable.html): in the step's
/// transaction, with `writable_schema` on, and the schema cookie bumped so
/// that every connection reads the schema again. That is safe where every
/// row satisfies the new constraint, as here: it is the old one, written
/// differently. A table whose text differs (none hermes wrote) keeps its
/// CHECK, and is only slower.
fn v12(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    const IN_LIST: &str = "CHECK (status IN ('active', 'ended', 'suspended'))";
    const COMPARISONS: &str =
        "CHECK (status = 'active' OR status = 'ended' OR status = 'suspended')";
    let cookie: i64 = tx.pragma_query_value(None, "schema_version", |r| r.get(0))?;
    tx.pragma_update(None, "writable_schema", true)?;
    let edit = tx
        .execute(
            "UPDATE sqlite_schema SET sql = replace(sql, ?1, ?2) \
             WHERE type = 'table' AND name = 'sessions' AND instr(sql, ?1) > 0",
            [IN_LIST, COMPARISONS],
        )
        .and_then(|edited| match edited {
            0 => Ok(()),
            _ => tx.pragma_update(None, "schema_version", cookie + 1),
        });
    // Off again even when the edit failed: the flag belongs to the
    // connection, not to the transaction that rolls the edit back.
    let off = tx.pragma_update(None, "writable_schema", false);
    edit.and(off)
}

/// Version 13: a message's `id` and `content` cannot be updated; an
/// `UPDATE` of either aborts with a message that says why. Until now a
/// trigger re-indexed the full-text index on such updates, but the store
/// never makes one — a transcript is appended to, cut (`/undo`) or replaced
/// whole, by deletes and inserts — and every connection parses the whole
/// schema as it opens: that trigger was 145 k instructions of every
/// process's start, this one 25 k (callgrind, issue 39). A hand edit of a
/// message's text, which would have left the index out of step, is refused
/// instead.
const V13: &str = "
DROP TRIGGER messages_fts_update;
CREATE TRIGGER messages_append_only BEFORE UPDATE OF id, content ON messages BEGIN
    SELECT RAISE(ABORT, 'a message''s id and content do not change (the search index holds them): delete it and insert another');
END;
";
