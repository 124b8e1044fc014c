//! Which session a message belongs to: expiry (G10), suspended sessions
//! (G11), and the daily-reset clock.

use hermes_runtime::store::{NewSession, SessionRecord, SessionStatus, Store, StoreError};

use super::{Inner, duration_ms};
use crate::event::SessionSource;

const DAY_MS: i64 = 86_400_000;

/// The most recent instant at or before `now_ms` whose local time (UTC +
/// `offset_s`) is `hour`:00, in ms since the epoch.
pub fn last_daily_boundary(now_ms: u64, hour: u8, offset_s: i64) -> u64 {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let local = now.saturating_add(offset_s.saturating_mul(1000));
    let day_start = local.div_euclid(DAY_MS) * DAY_MS;
    let mut boundary = day_start + i64::from(hour) * 3_600_000;
    if boundary > local {
        boundary -= DAY_MS;
    }
    u64::try_from(boundary - offset_s.saturating_mul(1000)).unwrap_or(0)
}

/// The system time zone's UTC offset at `at_ms`, in seconds (0 if unknown).
pub fn system_utc_offset(at_ms: u64) -> i64 {
    // The type is `time_t`, inferred: naming `libc::time_t` warns on musl
    // (the libc crate deprecates the alias there, issue 39's static builds).
    let secs = (at_ms / 1000).try_into().unwrap_or(0);
    // SAFETY: `localtime_r` is the re-entrant variant; it writes only into
    // the `tm` we own and reads `secs`. A zeroed `tm` is a valid value.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(std::ptr::from_ref(&secs), &mut tm).is_null() {
            return 0;
        }
        // `c_long` is 32 bits on armv7 (found by the cross build): widen it;
        // on 64-bit targets this is the identity.
        #[allow(clippy::useless_conversion)]
        let offset = i64::from(tm.tm_gmtoff);
        offset
    }
}

impl Inner {
    pub(super) fn new_session_spec<'a>(
        key: &'a str,
        source: &'a SessionSource,
        model: &'a str,
    ) -> NewSession<'a> {
        NewSession {
            session_key: Some(key),
            platform: Some(&source.platform),
            chat_id: Some(&source.chat_id),
            user_id: Some(&source.user_id),
            model: Some(model),
            system_prompt: None,
            ..NewSession::default()
        }
    }

    /// The session a message belongs to: the active one, unless it expired
    /// (G10) — a fresh one starts and `notices` says why — or was suspended
    /// by crash recovery (G11) — a fresh one starts; its user was told at
    /// start-up.
    pub(super) fn resolve_session(
        &self,
        store: &mut Store,
        key: &str,
        source: &SessionSource,
        now: u64,
        notices: &mut Vec<String>,
    ) -> Result<SessionRecord, StoreError> {
        let default_model = self.agents.factory.default_model();
        match store.active_session_for_key(key)? {
            None => store.create_session(&Self::new_session_spec(key, source, &default_model)),
            Some(s) if s.status != SessionStatus::Active => {
                store.reset(key, &Self::new_session_spec(key, source, &default_model))
            }
            // A resumed conversation's idle time counts from its resumption.
            Some(s) => match self.expiry(
                s.updated_at_ms.max(Self::resumed_at(store, key, &s.id)),
                now,
            ) {
                None => Ok(s),
                Some(why) => {
                    notices.push(why);
                    let model = s.model.clone().unwrap_or(default_model);
                    store.reset(key, &Self::new_session_spec(key, source, &model))
                }
            },
        }
    }

    /// Whether a session last active at `last_ms` has expired by `now_ms`,
    /// and the notice to give.
    pub(super) fn expiry(&self, last_ms: u64, now_ms: u64) -> Option<String> {
        if let Some(idle) = self.config.idle_reset
            && now_ms.saturating_sub(last_ms) > duration_ms(idle)
        {
            let hours = idle.as_secs() / 3600;
            return Some(format!(
                "(Your previous conversation was idle for more than {hours} h; starting a new one.)"
            ));
        }
        if let Some(hour) = self.config.daily_reset_hour {
            let boundary = last_daily_boundary(now_ms, hour, (self.local_offset)(now_ms));
            if last_ms < boundary && boundary <= now_ms {
                return Some(format!(
                    "(Daily reset at {hour:02}:00: starting a new conversation.)"
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    pub(super) fn daily_boundary_is_the_last_local_four_oclock() {
        let h = 3_600_000u64;
        let day = 24 * h;
        // 2024-01-02 05:00 UTC, offset 0 → boundary 2024-01-02 04:00.
        let base = 19_724 * day; // 2024-01-02 00:00 UTC
        assert_eq!(last_daily_boundary(base + 5 * h, 4, 0), base + 4 * h);
        // 03:00 → yesterday's 04:00.
        assert_eq!(last_daily_boundary(base + 3 * h, 4, 0), base - day + 4 * h);
        // Exactly 04:00 counts as passed.
        assert_eq!(last_daily_boundary(base + 4 * h, 4, 0), base + 4 * h);
        // UTC+2: local 04:00 is 02:00 UTC.
        assert_eq!(last_daily_boundary(base + 3 * h, 4, 7200), base + 2 * h);
        // UTC-5: local 04:00 is 09:00 UTC.
        assert_eq!(last_daily_boundary(base + 10 * h, 4, -18_000), base + 9 * h);
        assert_eq!(
            last_daily_boundary(base + 8 * h, 4, -18_000),
            base - day + 9 * h
        );
    }
}
