//! The PostgreSQL schema and its ordered forward migrations.
//!
//! The version lives in `hermes_schema` (one row). Each [`Migration`] moves
//! the database from `version - 1` to `version` in one transaction together
//! with the version bump, under a transaction-scoped advisory lock, so
//! several gateways starting at once on an old database run each step
//! exactly once and none sees a half-migrated schema. Steps are only ever
//! appended, as on SQLite (`sqlite/schema.rs`); the two numberings are
//! independent.
//!
//! The tables mirror SQLite's, with these differences:
//! - `messages.search` is the `tsvector` of the message's words, computed in
//!   Rust when the message is stored (`fts.rs`), indexed with GIN;
//! - `sessions.next_seq` hands out sequence numbers: an append bumps it in
//!   the `UPDATE` that locks the session row, so concurrent appends to one
//!   session never compute the same number (SQLite serialises all writers
//!   instead); `sessions.ordinal` breaks ties in orderings as SQLite's rowid;
//! - keys and lease names use the `C` collation, so prefix scans and key
//!   order are byte order, as on SQLite, whatever the database's locale;
//! - `hermes_now_ms()` is the server's clock, which leases lapse by.

/// One forward step of the schema.
#[derive(Debug)]
pub(super) struct Migration {
    /// The version the database has after this step.
    pub version: u32,
    /// What the step does, for logs.
    pub what: &'static str,
    /// The SQL, run with `batch_execute`.
    pub sql: &'static str,
}

/// Every step, in order; `MIGRATIONS[i].version == i + 1`.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        what: "sessions, messages with full-text vectors, compactions, kv and leases",
        sql: V1,
    },
    Migration {
        version: 2,
        what: "per-message prompt-cache counts, answering model and reasoning details",
        sql: V2,
    },
    Migration {
        version: 3,
        what: "attachments of user messages (references to files in $HERMES_HOME/media)",
        sql: V3,
    },
    Migration {
        version: 4,
        what: "scheduled jobs and their runs (the runs are the deliveries' outbox)",
        sql: V4,
    },
    Migration {
        version: 5,
        what: "scheduled jobs may start with a script (and skip the model)",
        sql: V5,
    },
];

/// The newest schema this build knows.
pub(super) const LATEST_VERSION: u32 = MIGRATIONS.len() as u32;

/// Creates the version table if needed (idempotent, safe to race: the
/// advisory lock is taken first).
pub(super) const BOOTSTRAP: &str = "
CREATE TABLE IF NOT EXISTS hermes_schema (
    id      INTEGER PRIMARY KEY CHECK (id = 0),
    version INTEGER NOT NULL
);
INSERT INTO hermes_schema (id, version) VALUES (0, 0) ON CONFLICT (id) DO NOTHING;
";

/// The advisory lock key migrations hold (`hermes` in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x6865_726d_6573;

/// Version 1: everything SQLite's versions 1–5 and 7 built.
const V1: &str = "
CREATE FUNCTION hermes_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
    $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,
    ordinal         BIGINT GENERATED ALWAYS AS IDENTITY,
    session_key     TEXT,
    source_platform TEXT,
    source_chat_id  TEXT,
    source_user_id  TEXT,
    model           TEXT,
    system_prompt   TEXT,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'active'
                    CHECK (status IN ('active', 'ended', 'suspended')),
    clean_shutdown  BOOLEAN NOT NULL DEFAULT false,
    title           TEXT,
    workdir         TEXT,
    next_seq        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_key ON sessions (session_key, status);
CREATE INDEX sessions_by_created ON sessions (created_at_ms);
CREATE INDEX sessions_by_workdir ON sessions (source_platform, workdir);

CREATE TABLE messages (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq               BIGINT NOT NULL,
    role              TEXT NOT NULL,
    content           TEXT,
    tool_calls        TEXT,
    tool_call_id      TEXT,
    reasoning         TEXT,
    prompt_tokens     BIGINT,
    completion_tokens BIGINT,
    total_tokens      BIGINT,
    finish_reason     TEXT,
    interrupted       BOOLEAN NOT NULL DEFAULT false,
    timestamp_ms      BIGINT NOT NULL,
    search            TSVECTOR NOT NULL DEFAULT ''::tsvector,
    UNIQUE (session_id, seq)
);
CREATE INDEX messages_search ON messages USING gin (search);

CREATE TABLE compactions (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    head_end      BIGINT NOT NULL,
    tail_start    BIGINT NOT NULL,
    end_seq       BIGINT NOT NULL,
    placement     TEXT NOT NULL CHECK (placement IN ('standalone', 'before_next')),
    replaced      BIGINT NOT NULL,
    summary       TEXT NOT NULL,
    tokens_before BIGINT NOT NULL,
    tokens_after  BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    CHECK (head_end <= tail_start AND tail_start <= end_seq)
);
CREATE INDEX compactions_by_session ON compactions (session_id, id);

CREATE TABLE kv (
    key   TEXT COLLATE \"C\" PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE leases (
    name           TEXT COLLATE \"C\" PRIMARY KEY,
    owner          TEXT,
    epoch          BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    acquired_at_ms BIGINT NOT NULL,
    renewed_at_ms  BIGINT NOT NULL,
    state          TEXT
);
";

/// Version 2: SQLite's version 6 — what prices and the prompt cache need
/// per message (SPEC X2, X3): tokens read from and written to the
/// provider's cache, the configured model that answered, and the provider's
/// reasoning blocks. All nullable: older rows have none of them.
const V2: &str = "
ALTER TABLE messages
    ADD COLUMN cached_tokens BIGINT,
    ADD COLUMN cache_write_tokens BIGINT,
    ADD COLUMN model TEXT,
    ADD COLUMN reasoning_details TEXT;
";

/// Version 3: SQLite's version 7 — the attachments of user messages (SPEC
/// X6): a JSON array of references (kind, media type, path relative to
/// `$HERMES_HOME/media`, size, description), NULL for a message without
/// any. The files themselves never enter the database.
const V3: &str = "
ALTER TABLE messages ADD COLUMN attachments TEXT;
";

/// Version 4: SQLite's version 9 — scheduled jobs and their runs (SPEC Y1,
/// `store/src/jobs.rs`). Ids use the `C` collation, so prefix look-ups are byte
/// ranges as on SQLite.
const V4: &str = "
CREATE TABLE cron_jobs (
    id              TEXT COLLATE \"C\" PRIMARY KEY,
    ordinal         BIGINT GENERATED ALWAYS AS IDENTITY,
    name            TEXT NOT NULL,
    schedule        TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    deliver         TEXT NOT NULL,
    origin_platform TEXT,
    origin_chat     TEXT,
    origin_thread   TEXT,
    repeat_total    BIGINT,
    runs_done       BIGINT NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state IN ('active', 'paused', 'done')),
    next_run_ms     BIGINT,
    last_run_ms     BIGINT,
    last_outcome    TEXT,
    created_at_ms   BIGINT NOT NULL
);
CREATE INDEX cron_jobs_due ON cron_jobs (state, next_run_ms);

CREATE TABLE cron_runs (
    id              TEXT COLLATE \"C\" PRIMARY KEY,
    ordinal         BIGINT GENERATED ALWAYS AS IDENTITY,
    job_id          TEXT NOT NULL,
    due_ms          BIGINT NOT NULL,
    state           TEXT NOT NULL,
    claimed_at_ms   BIGINT NOT NULL,
    finished_at_ms  BIGINT,
    session_id      TEXT,
    answer          TEXT,
    error           TEXT,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT,
    UNIQUE (job_id, due_ms)
);
CREATE INDEX cron_runs_open ON cron_runs (state, job_id);
CREATE INDEX cron_runs_by_job ON cron_runs (job_id, claimed_at_ms);
";

/// Version 5: SQLite's version 10 — a job's script.
const V5: &str = "
ALTER TABLE cron_jobs ADD COLUMN script TEXT;
ALTER TABLE cron_jobs ADD COLUMN no_agent BOOLEAN NOT NULL DEFAULT FALSE;
";
