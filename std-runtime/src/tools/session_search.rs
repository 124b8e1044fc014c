//! `session_search`: the model searches the user's earlier sessions (SPEC
//! Y6), modelled on hermes-agent's tool of the same name.
//!
//! The search runs on the store's full-text index (FTS5 on SQLite,
//! `tsvector` on PostgreSQL) over the originals, so messages a compaction
//! replaced are found too. **Whose sessions** comes from the runtime, never
//! from the model's arguments: the tool is built for one session id, and
//! the scope is that session's record — the sessions of its session key in
//! the gateway (one chat, or one user in a group: never another user's),
//! the CLI sessions for a CLI session (the local user's), and otherwise the
//! session alone. The asking session itself is left out: its messages are
//! in the conversation already.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::{failed, parse_args};
use crate::store::{SearchHit, SearchScope, SessionRecord, Store};

/// Sessions listed when the model does not say.
const DEFAULT_LIMIT: usize = 3;
/// The most sessions one call lists.
const MAX_LIMIT: usize = 10;
/// Excerpts shown per session.
const SNIPPETS_PER_SESSION: usize = 3;
/// Matching messages read per session asked for: enough that a session
/// with many matches does not crowd the others out.
const HITS_PER_SESSION: usize = 8;

#[derive(Deserialize)]
struct SessionSearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<u64>,
}

/// What `session_search` needs from the front-end: the store, and the
/// session it serves (whose record says whose sessions may be searched).
#[derive(Clone)]
pub struct SearchSource {
    /// The session store.
    pub store: Arc<Mutex<Store>>,
    /// The session the tool is offered in; `None` (a registry built before
    /// its session exists, for the prompt's tool list): nothing is searched.
    pub session_id: Option<String>,
}

impl std::fmt::Debug for SearchSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchSource")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// Searches the earlier sessions of the user the session belongs to.
pub struct SessionSearchTool {
    spec: ToolSpec,
    store: Arc<Mutex<Store>>,
    session_id: Option<String>,
}

impl std::fmt::Debug for SessionSearchTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSearchTool")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl SessionSearchTool {
    /// The tool of the session `source` names, searching its store.
    pub fn new(source: SearchSource) -> Self {
        SessionSearchTool {
            spec: spec(),
            store: source.store,
            session_id: source.session_id,
        }
    }
}

/// The tool's definition (also what a registry built without a session
/// lists).
pub fn spec() -> ToolSpec {
    super::spec(
        "session_search",
        "Search the user's earlier sessions with you by keywords (all must match); \
         returns session ids, dates and excerpts.",
        schema_text!(
            r#"{
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "description": "Sessions to return (3; at most 10)."}
            },
            "required": ["query"]
        }"#,
        ),
    )
}

/// Where the session `record` may search.
fn scope_of(record: &SessionRecord) -> SearchScope<'_> {
    match (&record.session_key, record.platform.as_deref()) {
        (Some(key), _) => SearchScope::SessionKey(key),
        (None, Some("cli")) => SearchScope::Platform("cli"),
        (None, _) => SearchScope::Session(&record.id),
    }
}

/// `2026-12-02 05:43 UTC`.
fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || "unknown date".to_owned(),
            |t| t.strftime("%Y-%m-%d %H:%M UTC").to_string(),
        )
}

impl Tool for SessionSearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: SessionSearchArgs = parse_args("session_search", arguments)?;
        let query = args.query.trim();
        if !query.chars().any(char::is_alphanumeric) {
            return Err(failed(
                "Error: 'query' has no words; give keywords to search for.",
            ));
        }
        let limit = args
            .limit
            .map_or(DEFAULT_LIMIT, |l| usize::try_from(l).unwrap_or(MAX_LIMIT))
            .clamp(1, MAX_LIMIT);
        let store = self
            .store
            .lock()
            .map_err(|_| failed("Error: the session store is unavailable."))?;
        let unavailable = |e: crate::store::StoreError| {
            tracing::warn!(error = %e, "session_search failed");
            failed("Error: the session store could not be searched; try again later.")
        };
        let current = match &self.session_id {
            Some(id) => store.session(id).map_err(unavailable)?,
            None => None,
        };
        let Some(current) = current else {
            return Ok("No earlier sessions to search yet.".to_owned());
        };
        let scope = scope_of(&current);
        let exclude = (!matches!(scope, SearchScope::Session(_))).then_some(current.id.as_str());
        let hits = store
            .search_in(query, scope, exclude, limit * HITS_PER_SESSION)
            .map_err(unavailable)?;
        // Sessions in the order of their best match.
        let mut order: Vec<String> = Vec::new();
        let mut by_session: HashMap<String, Vec<SearchHit>> = HashMap::new();
        for hit in hits {
            if !by_session.contains_key(&hit.session_id) {
                if order.len() == limit {
                    continue;
                }
                order.push(hit.session_id.clone());
            }
            by_session
                .entry(hit.session_id.clone())
                .or_default()
                .push(hit);
        }
        if order.is_empty() {
            return Ok(format!("No earlier session mentions \"{query}\"."));
        }
        let mut out = if order.len() == 1 {
            format!("1 earlier session mentions \"{query}\":\n")
        } else {
            format!(
                "{} earlier sessions mention \"{query}\" (best match first):\n",
                order.len()
            )
        };
        for id in &order {
            let record = store.session(id).map_err(unavailable)?;
            let _ = write!(out, "\nSession {id}");
            if let Some(r) = &record {
                let _ = write!(
                    out,
                    " — started {}, last active {}",
                    utc(r.created_at_ms),
                    utc(r.updated_at_ms)
                );
                if let Some(title) = r.title.as_deref().filter(|t| !t.is_empty()) {
                    let _ = write!(out, " — \"{title}\"");
                }
            }
            out.push('\n');
            for hit in by_session
                .get(id)
                .into_iter()
                .flatten()
                .take(SNIPPETS_PER_SESSION)
            {
                let snippet = hit.snippet.split_whitespace().collect::<Vec<_>>().join(" ");
                let _ = writeln!(
                    out,
                    "- {} (message {}): {snippet}",
                    hit.role.as_str(),
                    hit.seq
                );
            }
        }
        Ok(out)
    }
}
