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
//!
//! On the musl builds a one-shot run's blocks come from a start-up arena
//! first (`arena`): musl's allocator maps and unmaps small groups of pages
//! as a run's heap grows, a page fault each time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether `dealloc` still gives memory back.
static FREEING: AtomicBool = AtomicBool::new(true);

/// The global allocator: [`System`], with [`stop_freeing`], behind the
/// start-up arena on the musl builds.
pub struct Heap;

// Not inlined (`inline(never)`): as std's own allocator functions, one
// call at each of the program's thousands of allocation sites — inlined,
// the check and `System`'s alignment test were ≈ 40 KB more code.
//
// SAFETY: every call is passed on to `System` unchanged, except that a
// `dealloc` after `stop_freeing` does nothing, and that on the musl builds
// the arena's blocks are the arena's: each is aligned and at least as
// large as asked, within a mapping that lives as long as the process, and
// its room is handed out again only after it was given back (`arena`).
// Never freeing a block is always sound (it leaks; the block stays valid
// and is never reused).
unsafe impl GlobalAlloc for Heap {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_env = "musl")]
        if let Some(block) = crate::arena::alloc(layout) {
            return block;
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { System.alloc(layout) }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // An arena block may have been handed out and given back before.
        #[cfg(target_env = "musl")]
        if let Some(block) = crate::arena::alloc(layout) {
            // SAFETY: a fresh block of `layout.size()` bytes.
            unsafe { block.write_bytes(0, layout.size()) };
            return block;
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !FREEING.load(Ordering::Relaxed) {
            return;
        }
        // An arena block goes back to the arena, which hands its room out
        // again (`arena`).
        #[cfg(target_env = "musl")]
        if crate::arena::owns(ptr) {
            crate::arena::free(ptr);
            return;
        }
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(target_env = "musl")]
        if crate::arena::owns(ptr) {
            // SAFETY: the caller's guarantees, for a block of the arena.
            return unsafe { crate::arena::realloc(ptr, layout, new_size, &System) };
        }
        // SAFETY: as above. A block that moves is freed by `System` even
        // after `stop_freeing`: rare at exit, and still correct.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Any run but a one-shot: new blocks come from the system allocator, not
/// the start-up arena (a long run would keep what the arena never reuses).
pub fn close_arena() {
    #[cfg(target_env = "musl")]
    crate::arena::close();
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
