//! Schedules (SPEC Y1): when a job falls due.
//!
//! The grammar is hermes-agent's, plus seconds:
//! - a duration `90s`, `30m`, `2h`, `1d` — once, that long from now;
//! - `every 30m` — again and again, that often;
//! - a 5-field cron expression (`0 9 * * *`), evaluated in the configured
//!   time zone (`[cron] timezone`, else the system's), by `croner`;
//! - an ISO 8601 timestamp (`2026-12-24T09:00`, `…Z`, `…+01:00`) — once;
//!   without an offset it is a wall-clock time of the time zone.
//!
//! A job stores its schedule in the canonical form [`Schedule::stored`]
//! (`at:MS`, `every:MS`, `cron:EXPR`), which [`Schedule::from_stored`]
//! reads back without the clock: a relative `30m` becomes its instant once,
//! at creation.

use std::fmt;

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

/// The shortest repetition accepted: a tick is one second.
const MIN_PERIOD_MS: u64 = 1_000;
/// Nothing further out than this (ten years) is accepted.
const MAX_DELAY_MS: u64 = 10 * 366 * 86_400_000;

/// The accepted forms, for refusals and the tool's description.
pub const ACCEPTED_FORMS: &str = "a delay (`90s`, `30m`, `2h`, `1d`: once, that long from now), \
`every 30m` (repeating), a 5-field cron expression (`0 9 * * *`: minute hour day month weekday, \
in the configured time zone) or an ISO 8601 time (`2026-12-24T09:00`, optionally with `Z` or an offset)";

/// A parsed schedule.
#[derive(Clone)]
pub enum Schedule {
    /// Once, at this instant (ms since the epoch).
    At(u64),
    /// Every so many milliseconds, the first time one period from creation.
    Every(u64),
    /// A cron expression.
    Cron {
        /// As written (normalised spaces).
        expr: String,
        /// Parsed.
        cron: Box<Cron>,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stored())
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.stored() == other.stored()
    }
}

/// Why a schedule was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Not one of the accepted forms.
    #[error("cannot read the schedule {given:?}{why}; use {ACCEPTED_FORMS}")]
    Unreadable {
        /// What was given.
        given: String,
        /// Details (`: minute 61 is out of range`), or empty.
        why: String,
    },
    /// A one-off time that has passed.
    #[error("the time {0} has already passed; give a time in the future")]
    InThePast(String),
    /// Too short or too far out.
    #[error("{0}")]
    OutOfRange(String),
    /// A stored schedule this build cannot read (edited by hand).
    #[error("stored schedule {0:?} is unreadable")]
    Stored(String),
}

fn unreadable(given: &str, why: impl fmt::Display) -> ScheduleError {
    let why = why.to_string();
    ScheduleError::Unreadable {
        given: given.to_owned(),
        why: if why.is_empty() {
            why
        } else {
            format!(": {why}")
        },
    }
}

/// `90s`, `30m`, `2h`, `1d` (also `1w`; whole numbers) in milliseconds.
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let unit_ms: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 7 * 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
}

/// A cron expression of exactly five fields.
fn parse_cron(given: &str, expr: &str) -> Result<Schedule, ScheduleError> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(unreadable(given, "a cron expression has 5 fields"));
    }
    let expr = fields.join(" ");
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .build()
        .parse(&expr)
        .map_err(|e| unreadable(given, e))?;
    Ok(Schedule::Cron {
        expr,
        cron: Box::new(cron),
    })
}

fn in_range(given: &str, ms: u64) -> Result<u64, ScheduleError> {
    if ms < MIN_PERIOD_MS {
        return Err(ScheduleError::OutOfRange(format!(
            "{given:?} is shorter than a second"
        )));
    }
    if ms > MAX_DELAY_MS {
        return Err(ScheduleError::OutOfRange(format!(
            "{given:?} is more than ten years"
        )));
    }
    Ok(ms)
}

impl Schedule {
    /// Reads what a user or the model wrote, at `now_ms`, in `tz`.
    pub fn parse(given: &str, now_ms: u64, tz: &TimeZone) -> Result<Schedule, ScheduleError> {
        let text = given.trim();
        if text.is_empty() {
            return Err(unreadable(given, "it is empty"));
        }
        let lower = text.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("every ") {
            let ms = parse_duration(rest).ok_or_else(|| unreadable(given, ""))?;
            return Ok(Schedule::Every(in_range(given, ms)?));
        }
        if let Some(ms) = parse_duration(&lower) {
            let at = now_ms.saturating_add(in_range(given, ms)?);
            return Ok(Schedule::At(at));
        }
        if text.split_whitespace().count() == 5 {
            return parse_cron(given, text);
        }
        if text.starts_with(|c: char| c.is_ascii_digit()) && text.contains('-') {
            let at = parse_time(given, text, tz)?;
            if at <= now_ms {
                return Err(ScheduleError::InThePast(text.to_owned()));
            }
            if at - now_ms > MAX_DELAY_MS {
                return Err(ScheduleError::OutOfRange(format!(
                    "{text} is more than ten years away"
                )));
            }
            return Ok(Schedule::At(at));
        }
        Err(unreadable(given, ""))
    }

    /// The canonical stored form.
    pub fn stored(&self) -> String {
        match self {
            Schedule::At(ms) => format!("at:{ms}"),
            Schedule::Every(ms) => format!("every:{ms}"),
            Schedule::Cron { expr, .. } => format!("cron:{expr}"),
        }
    }

    /// Reads the canonical stored form back.
    pub fn from_stored(stored: &str) -> Result<Schedule, ScheduleError> {
        let bad = || ScheduleError::Stored(stored.to_owned());
        if let Some(ms) = stored.strip_prefix("at:") {
            return ms.parse().map(Schedule::At).map_err(|_| bad());
        }
        if let Some(ms) = stored.strip_prefix("every:") {
            return ms.parse().map(Schedule::Every).map_err(|_| bad());
        }
        if let Some(expr) = stored.strip_prefix("cron:") {
            return parse_cron(stored, expr).map_err(|_| bad());
        }
        Err(bad())
    }

    /// Whether it runs more than once.
    pub fn recurs(&self) -> bool {
        !matches!(self, Schedule::At(_))
    }

    /// The first due time of a job created at `now_ms`.
    pub fn first(&self, now_ms: u64, tz: &TimeZone) -> Option<u64> {
        match self {
            Schedule::At(ms) => Some(*ms),
            Schedule::Every(period) => Some(now_ms.saturating_add(*period)),
            Schedule::Cron { cron, .. } => cron_after(cron, now_ms, tz),
        }
    }

    /// The next due time strictly after `now_ms`, for a recurring schedule
    /// whose previous due time was `due_ms` (`None` for a one-off). A job
    /// that fell due several times while nothing ran is due once for the
    /// whole missed period: the next time is the first one after now.
    pub fn next_after(&self, due_ms: u64, now_ms: u64, tz: &TimeZone) -> Option<u64> {
        match self {
            Schedule::At(_) => None,
            Schedule::Every(period) => {
                let period = (*period).max(MIN_PERIOD_MS);
                let next = due_ms.saturating_add(period);
                if next > now_ms {
                    return Some(next);
                }
                // Stay on the job's grid: the first multiple after now.
                let missed = (now_ms - due_ms) / period + 1;
                Some(due_ms.saturating_add(missed.saturating_mul(period)))
            }
            Schedule::Cron { cron, .. } => cron_after(cron, due_ms.max(now_ms), tz),
        }
    }

    /// For people: `once at …`, `every 30m`, `cron 0 9 * * *`.
    pub fn describe(&self, tz: &TimeZone) -> String {
        match self {
            Schedule::At(ms) => format!("once at {}", local_time(*ms, tz)),
            Schedule::Every(ms) => format!("every {}", human_duration(*ms)),
            Schedule::Cron { expr, .. } => format!("cron {expr}"),
        }
    }
}

/// The first cron occurrence strictly after `after_ms`, in `tz`.
fn cron_after(cron: &Cron, after_ms: u64, tz: &TimeZone) -> Option<u64> {
    let ts = Timestamp::from_millisecond(i64::try_from(after_ms).ok()?).ok()?;
    let zoned = ts.to_zoned(tz.clone());
    let next = cron.find_next_occurrence(&zoned, false).ok()?;
    u64::try_from(next.timestamp().as_millisecond()).ok()
}

/// An ISO 8601 time: an instant (`Z`, an offset) or a wall-clock time in `tz`.
fn parse_time(given: &str, text: &str, tz: &TimeZone) -> Result<u64, ScheduleError> {
    let ts = match text.parse::<Timestamp>() {
        Ok(ts) => ts,
        Err(_) => {
            let civil: DateTime = text.parse().map_err(|e| unreadable(given, e))?;
            tz.to_ambiguous_zoned(civil)
                .compatible()
                .map_err(|e| unreadable(given, e))?
                .timestamp()
        }
    };
    u64::try_from(ts.as_millisecond()).map_err(|_| ScheduleError::InThePast(text.to_owned()))
}

/// `ms` as `2026-12-02 09:00 CET` in `tz`.
pub fn local_time(ms: u64, tz: &TimeZone) -> String {
    let Some(ts) = i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    else {
        return format!("{ms} ms");
    };
    ts.to_zoned(tz.clone())
        .strftime("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// `90s`, `30m`, `2h`, `1d`, `1h30m`.
pub fn human_duration(ms: u64) -> String {
    let mut secs = ms / 1000;
    if secs == 0 {
        return format!("{ms}ms");
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// The time zone named by `[cron] timezone` (an IANA name such as
/// `Europe/Berlin`, or `UTC`), else the system's.
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, ScheduleError> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok(crate::zone::system()),
        Some(n) if n.eq_ignore_ascii_case("utc") => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|e| {
            ScheduleError::OutOfRange(format!(
                "unknown time zone {n:?} ({e}); use an IANA name such as Europe/Berlin, or UTC"
            ))
        }),
    }
}

/// The time zone's name for `cron list` (`Europe/Berlin`, `UTC`, `system`).
pub fn zone_name(tz: &TimeZone) -> String {
    tz.iana_name().unwrap_or("system (no IANA name)").to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // 2026-12-02T08:30:00Z
    const NOW: u64 = 1_796_200_200_000;

    fn utc() -> TimeZone {
        TimeZone::UTC
    }

    #[test]
    fn durations_are_once_after_that_delay() {
        for (text, ms) in [
            ("90s", 90_000),
            ("30m", 1_800_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            (" 2 hours ", 7_200_000),
        ] {
            let s = Schedule::parse(text, NOW, &utc()).unwrap();
            assert_eq!(s, Schedule::At(NOW + ms), "{text}");
            assert!(!s.recurs());
            assert_eq!(s.next_after(NOW + ms, NOW + ms, &utc()), None);
        }
    }

    #[test]
    fn every_recurs_and_catches_up_once() {
        let s = Schedule::parse("every 30m", NOW, &utc()).unwrap();
        assert_eq!(s, Schedule::Every(1_800_000));
        assert_eq!(s.first(NOW, &utc()), Some(NOW + 1_800_000));
        // On time: the next period.
        assert_eq!(s.next_after(NOW, NOW, &utc()), Some(NOW + 1_800_000));
        // Ten periods missed: one run now, the next on the grid after now.
        let late = NOW + 10 * 1_800_000 + 5;
        assert_eq!(s.next_after(NOW, late, &utc()), Some(NOW + 11 * 1_800_000));
        assert_eq!(s.describe(&utc()), "every 30m");
    }

    #[test]
    fn cron_expressions_in_the_time_zone() {
        let s = Schedule::parse("0 9 * * *", NOW, &utc()).unwrap();
        // 09:00 UTC the same day.
        assert_eq!(s.first(NOW, &utc()), Some(NOW + 30 * 60_000));
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // 09:00 in Berlin (UTC+1 in December) is 08:00 UTC: tomorrow's.
        assert_eq!(s.first(NOW, &berlin), Some(NOW - 30 * 60_000 + 86_400_000));
        // Missed days run once; the next is the first after now.
        let due = NOW + 30 * 60_000;
        let late = due + 3 * 86_400_000 + 1;
        assert_eq!(s.next_after(due, late, &utc()), Some(due + 4 * 86_400_000));
        let back = Schedule::from_stored(&s.stored()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn iso_times_once() {
        let s = Schedule::parse("2026-12-24T09:00:00Z", NOW, &utc()).unwrap();
        assert_eq!(s, Schedule::At(1_798_102_800_000));
        let local = Schedule::parse(
            "2026-12-24T10:00",
            NOW,
            &TimeZone::get("Europe/Berlin").unwrap(),
        )
        .unwrap();
        assert_eq!(local, s);
        assert!(matches!(
            Schedule::parse("2020-01-01T00:00Z", NOW, &utc()),
            Err(ScheduleError::InThePast(_))
        ));
    }

    #[test]
    fn bad_schedules_are_refused_with_the_accepted_forms() {
        for bad in [
            "",
            "soon",
            "every blue moon",
            "61 * * * *",
            "* * * *",
            "0 0 9 * * *",
            "5x",
        ] {
            let err = Schedule::parse(bad, NOW, &utc()).unwrap_err().to_string();
            assert!(
                err.contains("every 30m") || err.contains("second") || err.contains("5 fields"),
                "{bad}: {err}"
            );
        }
        let err = Schedule::parse("0s", NOW, &utc()).unwrap_err();
        assert!(matches!(err, ScheduleError::OutOfRange(_)), "{err}");
        let err = Schedule::parse("every 20000d", NOW, &utc()).unwrap_err();
        assert!(matches!(err, ScheduleError::OutOfRange(_)), "{err}");
    }

    #[test]
    fn stored_forms_round_trip_and_bad_ones_are_named() {
        for s in [Schedule::At(5), Schedule::Every(60_000)] {
            assert_eq!(Schedule::from_stored(&s.stored()).unwrap(), s);
        }
        assert!(Schedule::from_stored("weekly").is_err());
        assert_eq!(human_duration(5_400_000), "1h30m");
        assert!(time_zone(Some("Mars/Olympus")).is_err());
        assert_eq!(zone_name(&time_zone(Some("utc")).unwrap()), "UTC");
    }
}
