//! The system's time zone without walking the time zone database.
//!
//! `jiff::tz::TimeZone::try_system` names the zone `/etc/localtime` links
//! to and then looks the name up in jiff's zoneinfo database, whose first
//! use walks all of `/usr/share/zoneinfo` (≈ 1,800 files): 4.5 M
//! instructions, 37 % of a one-shot that makes no tool call, paid by every
//! command that loads the settings (the spending caps' day and month).
//! Here the common case — no `TZ`, `/etc/localtime` a symlink into a
//! zoneinfo directory — reads that one file; anything else goes to jiff.

use jiff::tz::TimeZone;

const LOCALTIME: &str = "/etc/localtime";

/// The system's time zone (`TZ`, else `/etc/localtime`), UTC when none is
/// found — the rule both the scheduler and the caps follow.
pub fn system() -> TimeZone {
    if std::env::var_os("TZ").is_none()
        && let Some(tz) = linked_localtime()
    {
        return tz;
    }
    TimeZone::try_system().unwrap_or(TimeZone::UTC)
}

/// `/etc/localtime` when it links into a zoneinfo directory: the name after
/// `zoneinfo/` (`Europe/Berlin`), the data of the file it links to.
fn linked_localtime() -> Option<TimeZone> {
    let target = std::fs::read_link(LOCALTIME).ok()?;
    let target = target.to_str()?;
    let name = &target[target.rfind("zoneinfo/")? + "zoneinfo/".len()..];
    if name.is_empty() {
        return None;
    }
    let data = std::fs::read(LOCALTIME).ok()?;
    TimeZone::tzif(name, &data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_zone_is_the_one_jiff_finds() {
        // Whatever this machine's zone is, the shortcut agrees with jiff's
        // full lookup on its name and on its offset now.
        let ours = system();
        let jiffs = TimeZone::try_system().unwrap_or(TimeZone::UTC);
        let now = jiff::Timestamp::now();
        assert_eq!(ours.to_offset(now), jiffs.to_offset(now));
        if std::env::var_os("TZ").is_none() && std::fs::read_link(LOCALTIME).is_ok() {
            assert_eq!(ours.iana_name(), jiffs.iana_name());
        }
    }
}
