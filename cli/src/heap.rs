//! The program's heap: the system allocator, except that once a run has
//! nothing left to do but exit, memory is no longer handed back.
//!
//! The end of a one-shot run drops its whole workbench — the tool
//! definitions' JSON trees, the session's state, the prompt — and musl's
//! `free` was ≈ two thirds of that teardown: ≈ 0.3 M instructions, 6 % of a
//! 0-turn run, plus the `munmap`s of the emptied pages, all for memory the
//! exit gives back anyway (issue 39). Everything still runs its `Drop` — a
//! temporary folder is removed, a child process killed, a terminal
//! restored —; only the bookkeeping of freeing is skipped.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether `dealloc` still gives memory back.
static FREEING: AtomicBool = AtomicBool::new(true);

/// The global allocator: [`System`], with [`stop_freeing`].
pub struct Heap;

// Not inlined (`inline(never)`): as std's own allocator functions, one
// call at each of the program's thousands of allocation sites — inlined,
// the check and `System`'s alignment test were ≈ 40 KB more code.
//
// SAFETY: every call is passed on to `System` unchanged, except that a
// `dealloc` after `stop_freeing` does nothing; never freeing a block is
// always sound (it leaks; the block stays valid and is never reused).
unsafe impl GlobalAlloc for Heap {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.alloc(layout) }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if FREEING.load(Ordering::Relaxed) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above. A block that moves is freed by `System` even
        // after `stop_freeing`: rare at exit, and still correct.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// From now on nothing is freed: call only when the process exits once
/// the values still alive are dropped (the end of a one-shot run).
pub fn stop_freeing() {
    FREEING.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dropped block is not reused once freeing stopped: its memory
    /// still belongs to the program (the flag is global, so the other
    /// tests of this binary leak from then on, which changes nothing for
    /// them).
    #[test]
    fn nothing_is_reused_after_freeing_stopped() {
        let layout = Layout::new::<[u64; 6]>();
        // SAFETY: a non-zero layout; each block freed once, with it.
        unsafe {
            let first = Heap.alloc(layout);
            assert!(!first.is_null());
            stop_freeing();
            Heap.dealloc(first, layout);
            for _ in 0..64 {
                let next = Heap.alloc(layout);
                assert_ne!(next, first);
                Heap.dealloc(next, layout);
            }
        }
    }
}
