//! The README's table of what each platform supports, built from the
//! harnesses' declarations (so it cannot drift from what the suite checks).

use super::{Access, Capabilities, Capability, Harness};

/// One platform's column: its name, what it has, what its harness does not
/// drive yet.
pub struct Column {
    pub name: &'static str,
    pub caps: Capabilities,
    pub uncovered: &'static [Capability],
    /// `None`: the kill -9 soak runs in CI; else what the table says
    /// instead (its test is `#[ignore]`d with the reason).
    pub soak_note: Option<&'static str>,
}

/// The column of harness `H`.
pub fn column<H: Harness>() -> Column {
    Column {
        name: H::NAME,
        caps: H::capabilities(),
        uncovered: H::uncovered(),
        soak_note: None,
    }
}

/// The Markdown table: a row per promise, a column per platform. "✓": the
/// suite checks it on every CI run; "—": the platform lacks it (reported
/// "not applicable"); "not checked": the platform has it, its harness does
/// not drive it yet; a soak `#[ignore]`d says why in a word or two.
pub fn markdown(columns: &[Column]) -> String {
    type Cell = fn(&Capabilities) -> Option<String>;
    let rows: [(&str, Option<Capability>, Cell); 12] = [
        ("a DM answered once", None, |_| Some(String::new())),
        ("group: a session per user", Some(Capability::Groups), |c| {
            yes(c.groups)
        }),
        (
            "thread/topic: its own session",
            Some(Capability::Threads),
            |c| yes(c.threads),
        ),
        (
            "written while down: answered at start",
            Some(Capability::AnswersWhileDown),
            |c| yes(c.answers_while_down),
        ),
        ("restart: nothing answered twice", None, |_| {
            Some(String::new())
        }),
        ("kill -9 soak: 0 lost, 0 twice", None, |_| {
            Some(String::new())
        }),
        (
            "a long reply arrives whole",
            Some(Capability::ReplyLimit),
            |c| c.reply_limit.map(|n| format!(" ({n} chars)")),
        ),
        ("rate limit waited out", Some(Capability::RateLimit), |c| {
            yes(c.rate_limit)
        }),
        (
            "unknown user: no model call",
            Some(Capability::Access),
            |c| match c.access {
                Access::AllowList => Some(" (allow-list)".to_owned()),
                Access::Pairing => Some(" (pairing code)".to_owned()),
                Access::Open => None,
            },
        ),
        ("photo → vision", Some(Capability::PhotoIn), |c| {
            yes(c.photo_in)
        }),
        (
            "voice note → transcript",
            Some(Capability::VoiceIn),
            |c| yes(c.voice_in),
        ),
        ("`send_file` out", Some(Capability::FileOut), |c| {
            yes(c.file_out)
        }),
    ];
    let home: (&str, Option<Capability>, Cell) = (
        "home channel: a scheduled answer once",
        Some(Capability::HomeChannel),
        |c| yes(c.home_channel),
    );
    let mut out = String::from("| promise |");
    for c in columns {
        out.push_str(&format!(" {} |", c.name));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    for (promise, needs, cell) in rows.iter().chain(std::iter::once(&home)) {
        out.push_str(&format!("| {promise} |"));
        for c in columns {
            let soak_note = c.soak_note.filter(|_| promise.starts_with("kill -9"));
            let text = match cell(&c.caps) {
                _ if soak_note.is_some() => soak_note.unwrap_or_default().to_owned(),
                None => "—".to_owned(),
                Some(_) if needs.is_some_and(|n| c.uncovered.contains(&n)) => {
                    "not checked".to_owned()
                }
                Some(note) => format!("✓{note}"),
            };
            out.push_str(&format!(" {text} |"));
        }
        out.push('\n');
    }
    out
}

/// A plain "has it" cell.
fn yes(has: bool) -> Option<String> {
    has.then(String::new)
}

/// The README's table, between its markers.
pub fn in_readme(readme: &str) -> Option<&str> {
    let start = readme.find(START)? + START.len();
    let end = readme[start..].find(END)? + start;
    Some(readme[start..end].trim_matches('\n'))
}

pub const START: &str = "<!-- conformance table: generated from the harnesses, checked by gateway/tests/conformance.rs -->";
pub const END: &str = "<!-- end of conformance table -->";
