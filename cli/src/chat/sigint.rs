//! Ctrl-C of a one-shot run, answered in the signal handler itself.
//!
//! The interactive chat routes Ctrl-C through `ctrlc`'s thread (`CtrlC` in
//! the parent module): there the line editor, the type-ahead and the
//! prompts share the terminal with the handler. A one-shot needs less:
//! the first press sets the turn's interrupt flag and prints a hint, a
//! second one within two seconds (or any press outside the turn) prints
//! the goodbye line and exits with status 130 (SPEC L11). Each of those is
//! an atomic or a `write`, safe in a signal handler, so a one-shot starts
//! no thread for them: creating `ctrlc`'s thread and tearing it down at
//! the exit was ≈ 8 % of a 0-turn one-shot's CPU (issue 39).
//!
//! The texts are prepared outside the handler (they need the heap) and
//! published through a pointer the handler reads; a replaced text is
//! leaked, since the handler may be reading it.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use hermes_core::InterruptFlag;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// The flag of the run's turns.
static FLAG: OnceLock<InterruptFlag> = OnceLock::new();
/// A turn is running: a first press interrupts it rather than exiting.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// The monotonic clock's milliseconds at the last press (0: none yet).
static LAST_PRESS_MS: AtomicU64 = AtomicU64::new(0);
/// Written at a first press during a turn.
static HINT: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());
/// Written before exiting.
static GOODBYE: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());

/// Routes this process's Ctrl-C to the handler below: a press during a
/// turn sets `flag` and writes `hint`; `goodbye` is written before an
/// exit (see [`set_goodbye`]).
pub fn install(flag: &InterruptFlag, hint: String, goodbye: String) {
    let _ = FLAG.set(flag.clone());
    publish(&HINT, hint);
    publish(&GOODBYE, goodbye);
    let action = SigAction::new(
        SigHandler::Handler(on_sigint),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only reads atomics, stores one, reads the clock
    // and writes to stderr: all async-signal-safe.
    if let Err(e) = unsafe { sigaction(Signal::SIGINT, &action) } {
        tracing::warn!("cannot install the Ctrl-C handler: {e}");
    }
}

/// Whether [`install`] ran.
pub fn installed() -> bool {
    FLAG.get().is_some()
}

/// Whether a turn is running.
pub fn set_running(running: bool) {
    RUNNING.store(running, Ordering::Release);
}

/// What an exit by Ctrl-C writes from now on.
pub fn set_goodbye(text: String) {
    publish(&GOODBYE, text);
}

fn publish(slot: &AtomicPtr<Vec<u8>>, text: String) {
    let bytes = Box::into_raw(Box::new(text.into_bytes()));
    // The text it replaces is left: the handler may be writing it.
    slot.swap(bytes, Ordering::AcqRel);
}

extern "C" fn on_sigint(_: c_int) {
    // The code this interrupted may be about to read `errno`.
    let errno = nix::errno::Errno::last_raw();
    answer_press();
    nix::errno::Errno::set_raw(errno);
}

fn answer_press() {
    let now = monotonic_ms().max(1);
    let last = LAST_PRESS_MS.swap(now, Ordering::AcqRel);
    if exits(last, now, RUNNING.load(Ordering::Acquire)) {
        write_text(&GOODBYE);
        // SAFETY: `_exit` is async-signal-safe; the store has nothing
        // unwritten that a commit acknowledged (SQLite's WAL).
        unsafe { nix::libc::_exit(130) };
    }
    if let Some(flag) = FLAG.get() {
        flag.interrupt();
    }
    write_text(&HINT);
}

/// Whether a press at `now` exits, the previous one having come at `last`
/// (0: none), while a turn runs or not.
fn exits(last: u64, now: u64, running: bool) -> bool {
    let again_within = u64::try_from(super::AGAIN_WITHIN.as_millis()).unwrap_or(u64::MAX);
    !running || (last != 0 && now.saturating_sub(last) < again_within)
}

fn monotonic_ms() -> u64 {
    let mut now = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; `clock_gettime` is async-signal-safe.
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC, &mut now) };
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let millis = u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000_000;
    secs.saturating_mul(1_000).saturating_add(millis)
}

/// Writes a published text to stderr, with `write` alone.
fn write_text(slot: &AtomicPtr<Vec<u8>>) {
    let text = slot.load(Ordering::Acquire);
    if text.is_null() {
        return;
    }
    // SAFETY: a published text is never freed.
    let mut rest = unsafe { (*text).as_slice() };
    while !rest.is_empty() {
        // SAFETY: `rest` is valid for its length; `write` is
        // async-signal-safe.
        let n = unsafe { nix::libc::write(2, rest.as_ptr().cast(), rest.len()) };
        match usize::try_from(n) {
            Ok(0) => return,
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(_) if nix::errno::Errno::last() == nix::errno::Errno::EINTR => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC L11: outside a turn any press exits; in a turn the first press
    /// does not, a second one within two seconds does, a later one does
    /// not (it interrupts again).
    #[test]
    fn a_second_press_within_two_seconds_or_any_outside_a_turn_exits() {
        assert!(exits(0, 5_000, false));
        assert!(!exits(0, 5_000, true));
        assert!(exits(5_000, 6_999, true));
        assert!(!exits(5_000, 7_000, true));
        assert!(exits(5_000, 9_000, false));
    }
}
