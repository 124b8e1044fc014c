//! The store against real databases: each test of `both!` runs on a SQLite
//! file in a temp dir and on a fresh PostgreSQL database (a private server,
//! see `backends/mod.rs`); the rest test what only one backend has
//! (SQLite's migrations from old files, file modes, WAL; PostgreSQL's
//! schema table and connection errors).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod postgres_only;
mod reserve;
mod scoped_search;
mod search;
mod sessions;
mod sqlite_only;
mod support;
mod transcripts;
