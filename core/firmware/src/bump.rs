//! A bump allocator over a static arena: the whole heap a firmware needs for
//! one agent turn, with no free list.
//!
//! Memory is handed out by moving a pointer up. Freeing or growing the most
//! recent block is undone or done in place (a growing `String` or `Vec` is
//! usually the last thing allocated), anything else is left until
//! [`Bump::reset`], which a firmware calls between turns once the previous
//! turn's values are gone. [`Bump::peak`] is the high-water mark: the heap a
//! turn really needs.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

/// A bump allocator over `N` bytes.
pub struct Bump<const N: usize> {
    arena: UnsafeCell<[u8; N]>,
    /// Offset of the first free byte.
    next: AtomicUsize,
    /// Offset of the most recent block plus one (0: none), for in-place
    /// free and grow. Every field starts at zero, so the allocator lives in
    /// `.bss` and costs no flash.
    last_plus_one: AtomicUsize,
    peak: AtomicUsize,
}

// SAFETY: the arena is only reached through `alloc`/`dealloc`/`realloc`,
// which hand out disjoint ranges; the program is single-threaded (no OS, no
// allocation in interrupt handlers), and the offsets are atomics anyway.
unsafe impl<const N: usize> Sync for Bump<N> {}

impl<const N: usize> Bump<N> {
    /// An empty arena.
    pub const fn new() -> Self {
        Bump {
            arena: UnsafeCell::new([0; N]),
            next: AtomicUsize::new(0),
            last_plus_one: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// The most bytes in use at any time since the start or the last reset.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The arena's size.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Forgets every allocation.
    ///
    /// # Safety
    /// No pointer handed out before may be used afterwards.
    pub unsafe fn reset(&self) {
        self.next.store(0, Ordering::Relaxed);
        self.last_plus_one.store(0, Ordering::Relaxed);
        self.peak.store(0, Ordering::Relaxed);
    }

    /// Whether `start..start + size` is the most recent block.
    fn is_last(&self, start: usize, size: usize) -> bool {
        self.last_plus_one.load(Ordering::Relaxed) == start.wrapping_add(1)
            && start.wrapping_add(size) == self.next.load(Ordering::Relaxed)
    }

    fn base(&self) -> *mut u8 {
        self.arena.get().cast()
    }

    fn offset_of(&self, ptr: *mut u8) -> usize {
        (ptr as usize).wrapping_sub(self.base() as usize)
    }

    /// Moves the top to `end` if it fits, recording the peak.
    fn set_top(&self, start: usize, end: usize) -> bool {
        if end > N {
            return false;
        }
        self.next.store(end, Ordering::Relaxed);
        self.last_plus_one.store(start + 1, Ordering::Relaxed);
        self.peak.fetch_max(end, Ordering::Relaxed);
        true
    }
}

impl<const N: usize> Default for Bump<N> {
    fn default() -> Self {
        Self::new()
    }
}

unsafe impl<const N: usize> GlobalAlloc for Bump<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.base() as usize;
        let next = self.next.load(Ordering::Relaxed);
        // Align the address, not the offset: the arena itself is only byte-aligned.
        let Some(start) = (base + next)
            .checked_next_multiple_of(layout.align())
            .map(|addr| addr - base)
        else {
            return ptr::null_mut();
        };
        let Some(end) = start.checked_add(layout.size()) else {
            return ptr::null_mut();
        };
        if !self.set_top(start, end) {
            return ptr::null_mut();
        }
        // SAFETY: start + size <= N, so the range lies inside the arena.
        unsafe { self.base().add(start) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = self.offset_of(ptr);
        if self.is_last(start, layout.size()) {
            self.next.store(start, Ordering::Relaxed);
            self.last_plus_one.store(0, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = self.offset_of(ptr);
        if self.is_last(start, layout.size()) {
            // The most recent block grows or shrinks where it is.
            return match start.checked_add(new_size) {
                Some(end) if self.set_top(start, end) => ptr,
                _ => ptr::null_mut(),
            };
        }
        // SAFETY: the caller guarantees `layout.align()` is a valid alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and distinct
            // (the new one lies above the old one's end).
            unsafe { ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        }
        new
    }
}
