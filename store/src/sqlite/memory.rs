//! SQLite's memory, taken from the program's global allocator.
//!
//! Left to itself, SQLite calls libc's `malloc`, beside whatever allocator
//! the program set: on the static builds that is musl's, which maps a size
//! class's memory a small group of pages at a time — ≈ 75 of a 0-turn
//! one-shot's page faults were musl's allocator writing the first header
//! into a group SQLite had asked for (`perf record -e page-faults`, issue
//! 39). Through `std::alloc`, SQLite's blocks come from wherever Rust's do:
//! the CLI's start-up arena during a one-shot, and nothing is freed once
//! the run only has to exit (the CLI's `heap`).
//!
//! Each block carries its size in an 8-byte header, as SQLite's own
//! `malloc` wrapper does where `malloc_usable_size` is not used (the
//! bundled build): `xSize` must answer it, and `dealloc` needs the layout.
//!
//! Blocks of [`LARGE`] bytes or more go to the system allocator directly:
//! a statement journal held in memory takes 64 KiB chunks, one for each
//! statement of a transaction that may need undoing — 17 of them (1.1 MB)
//! as a new database's schema is built — and an arena that never reuses a
//! block was full before the run's own first turn (a fresh home's 20-turn
//! one-shot: 11.24 M instructions against 10.57 M with libc's `malloc`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_int, c_void};

use rusqlite::ffi;

/// Bytes before each block: its size. Also the blocks' alignment, which
/// SQLite requires to be 8.
const HEADER: usize = 8;

/// Blocks this large (with their header) come from [`System`], not the
/// global allocator.
const LARGE: usize = 64 << 10;

/// A block of `layout` from the allocator its size calls for.
///
/// # Safety
/// As [`GlobalAlloc::alloc`].
unsafe fn allocate(layout: Layout) -> *mut u8 {
    if layout.size() >= LARGE {
        // SAFETY: the caller's guarantees.
        unsafe { System.alloc(layout) }
    } else {
        // SAFETY: as above.
        unsafe { std::alloc::alloc(layout) }
    }
}

/// Gives back a block of [`allocate`].
///
/// # Safety
/// As [`GlobalAlloc::dealloc`], with a block of [`allocate`].
unsafe fn deallocate(start: *mut u8, layout: Layout) {
    if layout.size() >= LARGE {
        // SAFETY: the caller's guarantees: [`System`]'s block.
        unsafe { System.dealloc(start, layout) }
    } else {
        // SAFETY: as above, the global allocator's.
        unsafe { std::alloc::dealloc(start, layout) }
    }
}

/// The layout of a block of `size` bytes with its header.
fn layout_for(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(HEADER)?, HEADER).ok()
}

/// A block of `size` bytes: its header written, the address after it
/// returned; null if `size` is negative or the allocator refused.
///
/// # Safety
/// Called by SQLite only (`xMalloc`).
unsafe extern "C" fn malloc(size: c_int) -> *mut c_void {
    let Some(layout) = usize::try_from(size).ok().and_then(layout_for) else {
        return std::ptr::null_mut();
    };
    #[cfg(test)]
    tests::MALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the layout is never zero-sized (the header).
    let start = unsafe { allocate(layout) };
    if start.is_null() {
        return start.cast();
    }
    // SAFETY: `start` is HEADER-aligned and has HEADER + size bytes.
    unsafe {
        start.cast::<usize>().write(layout.size() - HEADER);
        start.add(HEADER).cast()
    }
}

/// The start and layout of the block SQLite knows as `block`.
///
/// # Safety
/// `block` was returned by [`malloc`] or [`realloc`] and not freed.
unsafe fn start_of(block: *mut c_void) -> (*mut u8, Layout) {
    // SAFETY: the caller's guarantee: a header precedes `block`.
    let start = unsafe { block.cast::<u8>().sub(HEADER) };
    // SAFETY: as above; the header holds the size it was made with.
    let size = unsafe { start.cast::<usize>().read() };
    // SAFETY: the same size and alignment made a valid layout before.
    let layout = unsafe { Layout::from_size_align_unchecked(size + HEADER, HEADER) };
    (start, layout)
}

/// # Safety
/// Called by SQLite only (`xFree`), with a block of [`malloc`] or
/// [`realloc`]; SQLite never passes null here.
unsafe extern "C" fn free(block: *mut c_void) {
    if block.is_null() {
        return;
    }
    // SAFETY: the caller's guarantee.
    let (start, layout) = unsafe { start_of(block) };
    // SAFETY: allocated with this layout by `allocate`.
    unsafe { deallocate(start, layout) };
}

/// # Safety
/// Called by SQLite only (`xRealloc`), with a live block and a new size.
unsafe extern "C" fn realloc(block: *mut c_void, size: c_int) -> *mut c_void {
    let Some(new_layout) = usize::try_from(size).ok().and_then(layout_for) else {
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's guarantee.
    let (start, layout) = unsafe { start_of(block) };
    let moved = if (layout.size() >= LARGE) == (new_layout.size() >= LARGE) {
        // SAFETY: allocated with `layout` by the allocator that also takes
        // the new size; that size is non-zero and, rounded to the
        // alignment, does not overflow.
        unsafe {
            if layout.size() >= LARGE {
                System.realloc(start, layout, new_layout.size())
            } else {
                std::alloc::realloc(start, layout, new_layout.size())
            }
        }
    } else {
        // Across the threshold: a block of the other allocator.
        // SAFETY: a non-zero layout.
        let moved = unsafe { allocate(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks hold the smaller size after the headers;
            // they are distinct; the old one is then given back once.
            unsafe {
                let kept = layout.size().min(new_layout.size()) - HEADER;
                std::ptr::copy_nonoverlapping(start.add(HEADER), moved.add(HEADER), kept);
                deallocate(start, layout);
            }
        }
        moved
    };
    if moved.is_null() {
        return moved.cast();
    }
    // SAFETY: as in `malloc`.
    unsafe {
        moved.cast::<usize>().write(new_layout.size() - HEADER);
        moved.add(HEADER).cast()
    }
}

/// # Safety
/// Called by SQLite only (`xSize`), with a live block or null.
unsafe extern "C" fn size_of(block: *mut c_void) -> c_int {
    if block.is_null() {
        return 0;
    }
    // SAFETY: the caller's guarantee.
    let (_, layout) = unsafe { start_of(block) };
    // At most `c_int::MAX` bytes were asked for.
    c_int::try_from(layout.size() - HEADER).unwrap_or(c_int::MAX)
}

/// The size SQLite is told a request of `size` rounds up to: a multiple
/// of 8, as its own wrapper answers, which keeps its lookaside and
/// page-cache arithmetic as before ([`malloc`] itself hands out exactly
/// what is asked, and [`size_of`] answers that).
extern "C" fn roundup(size: c_int) -> c_int {
    size.saturating_add(7) & !7
}

extern "C" fn init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

extern "C" fn shutdown(_: *mut c_void) {}

/// Hands SQLite [`malloc`] and the rest. Only before the library has
/// initialised (`super::configure_library`); returns SQLite's answer.
pub(super) fn use_global_allocator() -> c_int {
    let methods = ffi::sqlite3_mem_methods {
        xMalloc: Some(malloc),
        xFree: Some(free),
        xRealloc: Some(realloc),
        xSize: Some(size_of),
        xRoundup: Some(roundup),
        xInit: Some(init),
        xShutdown: Some(shutdown),
        pAppData: std::ptr::null_mut(),
    };
    // SAFETY: `SQLITE_CONFIG_MALLOC` takes a pointer to the methods, which
    // SQLite copies; each function keeps SQLite's contract (8-byte aligned
    // blocks, `xSize` of a live block, null on failure).
    unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls of [`malloc`] in this test binary.
    pub(super) static MALLOCS: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    /// Once the store has configured the library, SQLite's blocks come
    /// from [`malloc`] (the test binary's other tests may call it too: the
    /// count only grows).
    #[test]
    fn sqlite_allocates_here_once_the_store_configured_it() {
        super::super::configure_library();
        let before = MALLOCS.load(std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a block of SQLite's, asked its size and freed once.
        unsafe {
            let block = ffi::sqlite3_malloc(13);
            assert!(!block.is_null());
            assert_eq!(ffi::sqlite3_msize(block), 13);
            ffi::sqlite3_free(block);
        }
        assert!(
            MALLOCS.load(std::sync::atomic::Ordering::Relaxed) > before,
            "SQLite kept its own malloc"
        );
    }

    /// A block keeps its size and contents through a realloc, and is
    /// aligned as SQLite needs.
    #[test]
    fn blocks_keep_their_size_and_contents() {
        // SAFETY: the functions are used as SQLite uses them: each block
        // freed once, sizes within range.
        unsafe {
            let block = malloc(13);
            assert!(!block.is_null());
            assert_eq!(block as usize % 8, 0);
            assert_eq!(size_of(block), 13);
            block.cast::<u8>().copy_from(b"hello, sqlite".as_ptr(), 13);
            let grown = realloc(block, 4000);
            assert_eq!(size_of(grown), 4000);
            assert_eq!(
                std::slice::from_raw_parts(grown.cast::<u8>(), 13),
                b"hello, sqlite"
            );
            free(grown);
            // Across the threshold of the system allocator, both ways.
            let small = malloc(100);
            small.cast::<u8>().write_bytes(5, 100);
            let large = realloc(small, 100 << 10);
            assert_eq!(size_of(large), 100 << 10);
            assert!(
                std::slice::from_raw_parts(large.cast::<u8>(), 100)
                    .iter()
                    .all(|b| *b == 5)
            );
            let small = realloc(large, 50);
            assert_eq!(size_of(small), 50);
            assert!(
                std::slice::from_raw_parts(small.cast::<u8>(), 50)
                    .iter()
                    .all(|b| *b == 5)
            );
            free(small);
            free(malloc(LARGE as c_int));
            assert!(malloc(-1).is_null());
            assert_eq!(size_of(std::ptr::null_mut()), 0);
            assert_eq!(roundup(13), 16);
        }
    }
}
