//! Locking that survives a panic: the one poison-tolerant [`lock`] every
//! crate uses instead of a copy of its own.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, recovering from poisoning. A poisoned mutex only means some
/// holder panicked mid-update (a tool, a turn, a handler); what it guards
/// here — maps, caches, counters, a store handle — stays structurally
/// valid, and one panic must not take the whole process down (E4).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(vec![1]));
        let poisoner = std::sync::Arc::clone(&m);
        let panicked = std::thread::spawn(move || {
            let mut guard = lock(&poisoner);
            guard.push(2);
            panic!("a holder panics mid-update");
        })
        .join();
        assert!(panicked.is_err(), "the holder panicked");
        assert!(m.is_poisoned(), "the mutex is poisoned");
        lock(&m).push(3);
        assert_eq!(*lock(&m), vec![1, 2, 3]);
    }
}
