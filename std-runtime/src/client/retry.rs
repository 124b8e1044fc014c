//! Retry policy: which failures are worth another attempt, how long to wait,
//! and the `Retry-After` header (SPEC L12).
//!
//! The rules are deliberately small and fixed:
//! - **retried**: 429, every 5xx (500, 502, 503, 504, 529, …), connection
//!   failures, timeouts, and a stream that broke before any answer text
//!   reached the user;
//! - **never retried**: every other 4xx (400, 401, 403, 404, 413, 422, …) —
//!   the same request would fail the same way — and malformed responses;
//! - **wait**: the server's `Retry-After` (or OpenAI's `retry-after-ms`)
//!   when present, capped by `max_retry_after`; otherwise exponential backoff
//!   `backoff_base · 2^(attempt-1)` with "equal jitter" (a random 50–100 % of
//!   the step), also capped, so clients that failed together do not retry in
//!   lockstep.

// Header values come from the network: no arithmetic on them may wrap.
#![warn(clippy::arithmetic_side_effects)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether an HTTP status is worth another attempt.
pub(crate) fn status_is_retryable(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// The delay before attempt `attempt + 1`, given that attempt `attempt`
/// (1-based) just failed.
pub(crate) fn delay_before_next(
    attempt: u32,
    retry_after: Option<Duration>,
    backoff_base: Duration,
    cap: Duration,
) -> Duration {
    if let Some(server_said) = retry_after {
        return server_said.min(cap);
    }
    let exp = attempt.saturating_sub(1).min(16);
    let step = backoff_base.saturating_mul(1u32 << exp).min(cap);
    let jitter: f64 = rand::random_range(0.5..=1.0);
    step.mul_f64(jitter)
}

/// Reads `retry-after-ms` (OpenAI's precise variant) or `Retry-After`, the
/// latter either delta-seconds or an HTTP date. Unparseable values are
/// ignored (the normal backoff applies), never an error.
pub(crate) fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms.min(1e12) / 1000.0));
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = parse_http_date(value)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP
/// date form servers still send, into seconds since the Unix epoch.
///
/// The header comes from the network (or a broken proxy): every field is
/// parsed into a type that bounds it and the year is held to four digits, so
/// `Sun, 06 Jan -9223372036854775808 08:49:37 GMT` is "no date", not an
/// overflow.
pub(crate) fn parse_http_date(s: &str) -> Option<u64> {
    let mut parts = s.split_ascii_whitespace();
    let _weekday = parts.next()?;
    let day: u8 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    // Four digits, as RFC 9110 writes it: anything else is not a date we
    // send a client to sleep for.
    let year: u16 = parts.next()?.parse().ok().filter(|y| *y <= 9999)?;
    let mut hms = parts.next()?.split(':');
    let h: u8 = hms.next()?.parse().ok()?;
    let m: u8 = hms.next()?.parse().ok()?;
    let sec: u8 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    days.checked_mul(86_400)?
        .checked_add(seconds_of_day(h, m, sec))
}

#[allow(
    clippy::arithmetic_side_effects,
    reason = "at most 255 * 3600 + 255 * 60 + 255"
)]
fn seconds_of_day(h: u8, m: u8, s: u8) -> u64 {
    u64::from(h) * 3600 + u64::from(m) * 60 + u64::from(s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`). The types bound the inputs (year ≤ 65535, month and
/// day < 256), far inside what `i64` holds.
#[allow(
    clippy::arithmetic_side_effects,
    reason = "every operand is bounded by the u16/u8 argument types"
)]
fn days_from_civil(year: u16, month: u8, day: u8) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn statuses() {
        for s in [429, 500, 502, 503, 504, 529] {
            assert!(status_is_retryable(s), "{s}");
        }
        for s in [400, 401, 403, 404, 408, 413, 422] {
            assert!(!status_is_retryable(s), "{s}");
        }
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        assert_eq!(parse_http_date("tomorrow"), None);
        assert_eq!(
            parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799)
        );
    }

    #[test]
    fn retry_after_dates_with_absurd_years_do_not_overflow() {
        // Found by fuzzing: each of these overflowed the day arithmetic (a
        // panic in debug builds, a wrapped wait in release ones).
        for date in [
            "x, 5 Jan 1434858071792 0:0:0 GMT",
            "Sun, 06 Nov 9223372036854775807 08:49:37 GMT",
            "Sun, 06 Jan -9223372036854775808 08:49:37 GMT",
            "Sun, 06 Jan -1 08:49:37 GMT",
            "Sun, 06 Jan 10000 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(date), None, "{date}");
            assert_eq!(parse_retry_after(None, Some(date)), None, "{date}");
        }
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            parse_retry_after(None, Some("2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(Some("1500"), Some("9")),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after(None, Some("soon")), None);
        assert_eq!(parse_retry_after(None, Some("-3")), None);
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after(None, Some("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        let far = parse_retry_after(None, Some("Fri, 01 Jan 2100 00:00:00 GMT")).unwrap();
        assert!(far > Duration::from_secs(3600));
    }

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(1);
        for _ in 0..50 {
            let d1 = delay_before_next(1, None, base, cap);
            assert!(d1 >= Duration::from_millis(50) && d1 <= base, "{d1:?}");
            let d3 = delay_before_next(3, None, base, cap);
            assert!(
                d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400),
                "{d3:?}"
            );
            assert!(delay_before_next(30, None, base, cap) <= cap);
        }
        assert_eq!(
            delay_before_next(1, Some(Duration::from_secs(3600)), base, cap),
            cap
        );
        assert_eq!(
            delay_before_next(1, Some(Duration::from_millis(20)), base, cap),
            Duration::from_millis(20)
        );
    }
}
