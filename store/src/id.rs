//! Session ids: `YYYYMMDD_HHMMSS_xxxxxx` (UTC time of creation + 24 random bits).
//!
//! Sortable by creation time and readable in logs; the random suffix keeps ids
//! unique within one second, and the store retries on the (rare) collision.

/// Formats a session id for the time `now_ms` with the random `suffix`
/// (only its low 24 bits are used).
pub(super) fn session_id(now_ms: u64, suffix: u32) -> String {
    let secs = now_ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}_{:02}{:02}{:02}_{:06x}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        suffix & 0x00FF_FFFF
    )
}

/// A fresh random suffix, from the system's generator (`getrandom`): rand's
/// thread generator would first detect its ChaCha code's CPU features, and
/// in a VM those `cpuid`s trap to the hypervisor — ≈ 37 µs of a one-shot's
/// start on the machine we measure on (issue 39). Should the system refuse,
/// the clock's nanoseconds do: the store retries an id that collides.
pub(super) fn random_suffix() -> u32 {
    use rand::TryRng;
    rand::rngs::SysRng.try_next_u32().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos())
    })
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(session_id(0, 0), "19700101_000000_000000");
        // 2026-11-30T00:15:03.999Z
        assert_eq!(
            session_id(1_795_997_703_999, 0xa1b2c3),
            "20261130_001503_a1b2c3"
        );
        // Leap day, and only 24 bits of the suffix are used.
        // 2024-02-29T23:59:59Z
        assert_eq!(
            session_id(1_709_251_199_000, 0xffa1b2c3),
            "20240229_235959_a1b2c3"
        );
        // 2000-03-01T12:00:00Z (day after a 400-year leap day)
        assert_eq!(session_id(951_912_000_000, 1), "20000301_120000_000001");
    }
}
