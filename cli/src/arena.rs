//! The start-up arena of the musl builds: until a run turns out to be more
//! than a one-shot, memory is handed out from one reserved region by
//! moving a pointer, and its pages are asked for 16 KiB at a time.
//!
//! musl's allocator (mallocng) maps a small size class's memory a group at
//! a time — 4 KiB, then 8, 16, 32 KiB, unmapping the emptied ones — so a
//! 0-turn one-shot, whose Rust code asks for ≈ 0.5 MB in ≈ 2,200 blocks in
//! all, made ≈ 100 `mmap`/`munmap` calls and ≈ 270 page faults of its heap,
//! each fault ≈ 2.4 µs on the VMs we measure on (issue 39; BENCHMARKS.md
//! "Start-up"). A one-shot lives for one turn: here a block costs an
//! atomic add and its pages arrive in one `madvise(MADV_POPULATE_WRITE)`
//! per 16 KiB.
//!
//! A block given back is handed out again. The last one handed out gives
//! its room back to the pointer (a block that grows while it is the last
//! one, as a vector being filled, grows in place). Any other goes on a
//! list of its size class, and a later block of that class or one to two
//! classes smaller takes it. Without the lists about 40 % of a 0-turn
//! run's blocks were given back where no later block could use their
//! room — the command line's tree, vectors that grew and moved, SQLite's
//! temporary pages — and each tool turn left ≈ 14 KB behind it (issue 39).
//! The classes are four per doubling, from 16 bytes to [`MAX_CLASSED`]; a
//! block is handed out rounded up to its class, so any block of a class
//! fits any request of it.
//!
//! `free` takes no size, and neither does the arena's: a `dealloc` that
//! read its layout made each of the program's thousands of call sites
//! pass it, ≈ 170 KB of code. Each block has a header instead, the word
//! before it, holding its class (or, past the classes, its capacity).
//!
//! Bounded: the region is [`RESERVED`] bytes of address space; once it is
//! full, or closed ([`close`]: any run but a one-shot, right after the
//! command line is parsed), blocks come from the system allocator again.
//! Blocks already in the arena stay valid for as long as the process
//! lives. What a closed arena keeps is what start-up allocated before the
//! parse decided (≈ 120 KB).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Address space reserved for the arena (`MAP_NORESERVE`; only the pages
/// asked for count). With SQLite's blocks here too, a 0-turn one-shot in a
/// warm home takes ≈ 0.5 MB of it. At 1 MB a 20-turn run in a new home
/// filled it early and its later blocks cost musl's `malloc` and `free`
/// again: 241 k instructions a turn against 200 k (callgrind, issue 39).
pub const RESERVED: usize = 2 << 20;
/// Pages are asked for this much at a time, ahead of the pointer. The
/// kernel counts each page asked for as a page fault, touched or not: with
/// 64 KiB steps a 0-turn one-shot's last step left ≈ 9 pages unused (306
/// → 297 faults with 16 KiB), and its dozen more `madvise` calls cost less
/// than those pages did (CPU 2,121 → 1,986 µs, alternating runs; issue
/// 39). A run that allocates little (`hermes --version`) takes one step.
const STEP: usize = 16 << 10;
/// `MADV_POPULATE_WRITE` (Linux 5.14; the same number on every
/// architecture). An older kernel answers `EINVAL`: the pages then fault in
/// one by one, as any heap's.
const MADV_POPULATE_WRITE: nix::libc::c_int = 23;
/// Bytes before each block: its [`Header`], as a `usize`. Every block
/// starts at a multiple of this.
const HEADER: usize = 8;
/// The largest size class; larger blocks are handed out as asked and only
/// the last-block rule gives their room back.
pub const MAX_CLASSED: usize = 64 << 10;
/// Size classes: 16, 24, 32, then four per doubling up to [`MAX_CLASSED`].
const CLASSES: usize = 47;
/// A request also takes a freed block this many classes larger (at most
/// ≈ 1.6 times its size).
const LARGER_TAKEN: usize = 2;

/// Where the region starts: 0 before the first block, 1 when it could not
/// be reserved.
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Offset of the first byte not handed out (low 32 bits) and offset of
/// the last block handed out (high 32 bits; [`NO_LAST`] once that block
/// was given back): one word, so that handing out, growing and giving back
/// each see the two agree.
static STATE: AtomicU64 = AtomicU64::new(NO_LAST << 32);
/// No block can be given back by moving the top.
const NO_LAST: u64 = u32::MAX as u64;

fn state(top: usize, last: u64) -> u64 {
    (last << 32) | top as u64
}

fn top_of(state: u64) -> usize {
    // The offsets stay below `RESERVED`, far below 2^32.
    (state & u64::from(u32::MAX)) as usize
}

fn last_of(state: u64) -> u64 {
    state >> 32
}
/// Offset up to which the pages were asked for.
static POPULATED: AtomicUsize = AtomicUsize::new(0);
static OPEN: AtomicBool = AtomicBool::new(true);
const UNAVAILABLE: usize = 1;

/// The freed blocks of each class: the address of the first (0: none),
/// whose first word holds the next one's. Read and written only under
/// [`LISTS`].
static FREED: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];
/// Bit `i` set: class `i`'s list may hold a block. Written under
/// [`LISTS`]; read without it, so a request that finds no bit in its
/// range goes straight to the pointer.
static HELD: AtomicU64 = AtomicU64::new(0);
/// The lists' lock: a block is taken or given back in a few instructions,
/// and an allocator cannot wait on anything that allocates.
static LISTS: AtomicBool = AtomicBool::new(false);

/// The lists' lock, held until the guard drops.
struct ListsGuard;

impl ListsGuard {
    fn lock() -> Self {
        let mut tries = 0u32;
        while LISTS
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            tries += 1;
            if tries.is_multiple_of(64) {
                // Its holder may be waiting for this CPU (a run pinned
                // to one core): let it finish.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        ListsGuard
    }
}

impl Drop for ListsGuard {
    fn drop(&mut self) {
        LISTS.store(false, Ordering::Release);
    }
}

/// The class whose blocks fit `size` bytes (1 ..= [`MAX_CLASSED`]).
// Inlined: one call in every `alloc` and `realloc`, ≈ 15 instructions.
#[inline(always)]
fn class_for(size: usize) -> usize {
    match size {
        0..=16 => 0,
        17..=24 => 1,
        25..=32 => 2,
        _ => {
            // The top bit of `size - 1` gives the doubling, the two bits
            // below it the quarter.
            let n = size - 1;
            let top = (usize::BITS - 1 - n.leading_zeros()) as usize;
            3 + (top - 5) * 4 + ((n >> (top - 2)) & 3)
        }
    }
}

/// The capacity of class `class`'s blocks.
fn class_size(class: usize) -> usize {
    match class {
        0 => 16,
        1 => 24,
        2 => 32,
        _ => {
            let (doubling, quarter) = ((class - 3) / 4 + 5, (class - 3) % 4);
            (5 + quarter) << (doubling - 2)
        }
    }
}

/// What the word before a block holds: its class (below [`CLASSES`]), or
/// the capacity of a block larger than [`MAX_CLASSED`].
#[derive(Clone, Copy)]
struct Header(usize);

impl Header {
    /// The header of a new block for `size` bytes.
    #[inline(always)]
    fn for_size(size: usize) -> Self {
        if size > MAX_CLASSED {
            Header(size)
        } else {
            Header(class_for(size))
        }
    }

    fn class(self) -> Option<usize> {
        (self.0 < CLASSES).then_some(self.0)
    }

    fn capacity(self) -> usize {
        match self.class() {
            Some(class) => class_size(class),
            None => self.0,
        }
    }

    /// # Safety
    /// `block` was handed out by the arena.
    unsafe fn of(block: *mut u8) -> Self {
        // SAFETY: every block has its header in the word before it.
        Header(unsafe { block.sub(HEADER).cast::<usize>().read() })
    }

    /// # Safety
    /// `block` is an arena block being handed out or resized.
    unsafe fn write(self, block: *mut u8) {
        // SAFETY: the word before the block is its own.
        unsafe { block.sub(HEADER).cast::<usize>().write(self.0) }
    }
}

/// No new block comes from the arena from now on.
pub fn close() {
    OPEN.store(false, Ordering::Relaxed);
}

/// The region's start, reserving it on first use; `None` if the system
/// refused.
fn base() -> Option<usize> {
    match BASE.load(Ordering::Acquire) {
        0 => {}
        UNAVAILABLE => return None,
        base => return Some(base),
    }
    // SAFETY: a fresh anonymous private mapping; no existing memory is
    // touched.
    let mapped = unsafe {
        nix::libc::mmap(
            std::ptr::null_mut(),
            RESERVED,
            nix::libc::PROT_READ | nix::libc::PROT_WRITE,
            nix::libc::MAP_PRIVATE | nix::libc::MAP_ANONYMOUS | nix::libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    let mine = if mapped == nix::libc::MAP_FAILED {
        UNAVAILABLE
    } else {
        mapped as usize
    };
    match BASE.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => (mine != UNAVAILABLE).then_some(mine),
        Err(theirs) => {
            // Another thread reserved it first: ours goes back.
            if mine != UNAVAILABLE {
                // SAFETY: `mapped` is our own mapping, never handed out.
                unsafe { nix::libc::munmap(mapped, RESERVED) };
            }
            (theirs != UNAVAILABLE).then_some(theirs)
        }
    }
}

/// Whether `ptr` was handed out by the arena.
pub fn owns(ptr: *mut u8) -> bool {
    let base = BASE.load(Ordering::Acquire);
    base > UNAVAILABLE && (ptr as usize).wrapping_sub(base) < RESERVED
}

/// `at` rounded up to a multiple of `align`, a power of two (as every
/// `Layout`'s). Not `next_multiple_of`: its division could panic as far as
/// the compiler knows, and an allocator that may unwind costs a landing pad
/// at each of the program's thousands of allocation sites (≈ 170 KB).
fn round_up(at: usize, align: usize) -> usize {
    at.wrapping_add(align - 1) & !(align - 1)
}

/// Asks for the pages up to offset `end`, rounded up to [`STEP`].
fn populate(base: usize, end: usize) {
    let from = POPULATED.load(Ordering::Relaxed);
    if end <= from {
        return;
    }
    let to = round_up(end, STEP).min(RESERVED);
    // Two threads may ask for the same pages: harmless, the advice only
    // faults them in.
    // SAFETY: inside our own mapping; the advice changes no contents.
    unsafe {
        nix::libc::madvise(
            (base + from) as *mut nix::libc::c_void,
            to - from,
            MADV_POPULATE_WRITE,
        )
    };
    POPULATED.fetch_max(to, Ordering::Relaxed);
}

/// A block for `layout` from the arena, or `None` when it is closed or
/// full (then the caller asks the system).
pub fn alloc(layout: Layout) -> Option<*mut u8> {
    if !OPEN.load(Ordering::Relaxed) {
        return None;
    }
    let base = base()?;
    let header = Header::for_size(layout.size());
    // Freed blocks start at a multiple of `HEADER`, and only that.
    if let Some(class) = header.class()
        && layout.align() <= HEADER
        && let Some(block) = take_freed(class)
    {
        return Some(block);
    }
    bump(base, header, layout.align())
}

/// A freed block of class `class` or up to [`LARGER_TAKEN`] classes larger.
fn take_freed(class: usize) -> Option<*mut u8> {
    let classes = ((1u64 << (LARGER_TAKEN + 1)) - 1) << class;
    if HELD.load(Ordering::Relaxed) & classes == 0 {
        return None;
    }
    let _lock = ListsGuard::lock();
    let held = HELD.load(Ordering::Relaxed);
    let taken = (held & classes).trailing_zeros() as usize;
    let block = FREED.get(taken)?.load(Ordering::Relaxed);
    // SAFETY: a class's bit is set while its list holds a block, whose
    // first word holds the next one's address (`give_to_list`, under
    // this lock).
    let next = unsafe { (block as *const usize).read() };
    FREED[taken].store(next, Ordering::Relaxed);
    if next == 0 {
        HELD.store(held & !(1 << taken), Ordering::Relaxed);
    }
    Some(block as *mut u8)
}

/// A new block at the pointer, of the capacity `header` gives, aligned to
/// `align`.
fn bump(base: usize, header: Header, align: usize) -> Option<*mut u8> {
    let capacity = header.capacity();
    let align = align.max(HEADER);
    let mut now = STATE.load(Ordering::Relaxed);
    loop {
        let start = round_up(base + top_of(now) + HEADER, align) - base;
        let end = start.checked_add(capacity)?;
        if end > RESERVED {
            return None;
        }
        let next = state(end, start as u64);
        match STATE.compare_exchange_weak(now, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                populate(base, end);
                let block = (base + start) as *mut u8;
                // SAFETY: the header's word lies in the room just taken.
                unsafe { header.write(block) };
                return Some(block);
            }
            Err(seen) => now = seen,
        }
    }
}

/// Gives back an arena block: the last one handed out gives its room back
/// to the pointer; any other goes on its class's list (one larger than
/// [`MAX_CLASSED`] stays unused until the exit).
pub fn free(ptr: *mut u8) {
    let start = (ptr as usize).wrapping_sub(BASE.load(Ordering::Acquire));
    let now = STATE.load(Ordering::Relaxed);
    // Fails only if a block was handed out meanwhile: then this one is no
    // longer the last.
    if last_of(now) == start as u64
        && STATE
            .compare_exchange(
                now,
                state(start - HEADER, NO_LAST),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    {
        return;
    }
    // SAFETY: `ptr` is an arena block (the caller's `owns`).
    if let Some(class) = unsafe { Header::of(ptr) }.class() {
        give_to_list(ptr, class);
    }
}

fn give_to_list(block: *mut u8, class: usize) {
    let _lock = ListsGuard::lock();
    let Some(list) = FREED.get(class) else {
        return;
    };
    // SAFETY: the block is ours again, at least 16 bytes and aligned to
    // `HEADER`: its first word holds the list's next block.
    unsafe { block.cast::<usize>().write(list.load(Ordering::Relaxed)) };
    list.store(block as usize, Ordering::Relaxed);
    HELD.store(HELD.load(Ordering::Relaxed) | 1 << class, Ordering::Relaxed);
}

/// Resizes an arena block: in place when it fits its capacity or is the
/// last one handed out, else a new block — from the arena while it is
/// open and has room, from `system` otherwise — with the contents copied,
/// and the old one given back.
///
/// # Safety
/// As [`GlobalAlloc::realloc`], with `ptr` a block of the arena.
pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize, system: &System) -> *mut u8 {
    // SAFETY: `ptr` is an arena block (the caller's guarantee).
    let capacity = unsafe { Header::of(ptr) }.capacity();
    if new_size <= capacity {
        return ptr;
    }
    let base = BASE.load(Ordering::Acquire);
    let start = ptr as usize - base;
    let new_header = Header::for_size(new_size);
    let new_capacity = new_header.capacity();
    let grown = start
        .checked_add(new_capacity)
        .filter(|end| *end <= RESERVED)
        .is_some_and(|end| {
            let now = STATE.load(Ordering::Relaxed);
            top_of(now) == start + capacity
                && STATE
                    .compare_exchange(
                        now,
                        state(end, start as u64),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
        });
    if grown {
        populate(base, start + new_capacity);
        // SAFETY: the block's own header.
        unsafe { new_header.write(ptr) };
        return ptr;
    }
    // SAFETY: the caller's guarantees: `new_size` with `layout`'s alignment
    // is a valid layout.
    let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
    let moved = match alloc(new_layout) {
        Some(moved) => moved,
        // SAFETY: a valid, non-zero layout (the caller's).
        None => unsafe { system.alloc(new_layout) },
    };
    if !moved.is_null() {
        // SAFETY: both blocks are valid for `layout.size()` bytes (the new
        // one is larger) and distinct.
        unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size()) };
        free(ptr);
    }
    moved
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    /// Every size falls in the smallest class that holds it.
    #[test]
    fn size_classes_are_tight_and_ordered() {
        assert_eq!(class_size(CLASSES - 1), MAX_CLASSED);
        for class in 1..CLASSES {
            assert!(class_size(class) > class_size(class - 1));
            assert_eq!(class_size(class) % HEADER, 0);
        }
        for size in 1..=MAX_CLASSED {
            let class = class_for(size);
            assert!(class_size(class) >= size, "{size}");
            assert!(class == 0 || class_size(class - 1) < size, "{size}");
            // At most a quarter more than asked, past the smallest classes.
            assert!(size <= 32 || class_size(class) * 4 <= size * 5, "{size}");
        }
    }

    /// One test: the arena is process-wide. This test binary's allocator
    /// does not use it (only the musl builds' does), so its blocks are the
    /// test's alone.
    #[test]
    fn blocks_are_aligned_apart_grow_in_place_while_last_and_stop_when_full_or_closed() {
        let first = alloc(layout(24, 8)).unwrap();
        let aligned = alloc(layout(100, 64)).unwrap();
        assert_eq!(aligned as usize % 64, 0);
        assert!(aligned as usize >= first as usize + 24, "blocks overlap");
        assert!(owns(first) && owns(aligned));
        assert!(!owns(Box::into_raw(Box::new(0u8))), "a system block");

        // SAFETY: each pointer is a live block of at least the sizes used.
        unsafe {
            // Fresh pages are zero, and writable.
            assert!((0..100).all(|i| *aligned.add(i) == 0));
            aligned.write_bytes(7, 100);
            // The last block grows where it is...
            let grown = realloc(aligned, layout(100, 64), 5000, &System);
            assert_eq!(grown, aligned);
            assert_eq!(*grown.add(99), 7);
            grown.add(4999).write(9);
            // ...and shrinks where it is.
            assert_eq!(realloc(grown, layout(5000, 64), 10, &System), grown);
            // An earlier block moves, its contents with it.
            first.write_bytes(3, 24);
            let moved = realloc(first, layout(24, 8), 48, &System);
            assert_ne!(moved, first);
            assert!(owns(moved));
            assert!((0..24).all(|i| *moved.add(i) == 3));
        }

        // The last block given back is handed out again, at once; an
        // earlier one goes on its class's list, and a block of its class
        // takes it, but not one more than two classes smaller.
        let last = alloc(layout(64, 8)).unwrap();
        free(last);
        assert_eq!(alloc(layout(64, 8)).unwrap(), last);
        let after = alloc(layout(64, 8)).unwrap();
        assert!(after > last);
        free(last);
        assert_ne!(alloc(layout(8, 8)).unwrap(), last, "six classes smaller");
        assert_eq!(alloc(layout(41, 8)).unwrap(), last, "two classes smaller");
        let spare = alloc(layout(8, 8)).unwrap();
        free(spare);
        assert_eq!(alloc(layout(8, 8)).unwrap(), spare);
        assert!(alloc(layout(8, 8)).unwrap() > spare, "handed out twice");
        // A block grown within its class stays where it is; one that
        // moved is given back, and its room taken by a block of its class.
        let small = alloc(layout(33, 8)).unwrap();
        let _pin = alloc(layout(8, 8)).unwrap();
        // SAFETY: live blocks of the sizes given.
        unsafe {
            assert_eq!(realloc(small, layout(33, 8), 40, &System), small);
            let bigger = realloc(small, layout(40, 8), 41, &System);
            assert_ne!(bigger, small);
        }
        assert_eq!(alloc(layout(40, 8)).unwrap(), small);
        // A block aligned beyond a header's word never takes a freed one.
        let plain = alloc(layout(200, 8)).unwrap();
        let _pin = alloc(layout(8, 8)).unwrap();
        free(plain);
        let wide = alloc(layout(200, 64)).unwrap();
        assert_eq!(wide as usize % 64, 0);
        assert_ne!(wide, plain);

        // Threads handing out, growing and giving back at once never get
        // overlapping blocks: each fills its blocks with its own bytes,
        // gives most back at once (the last-block rule at work under
        // contention) and finds the ones it kept unchanged at the end.
        let threads: Vec<_> = (1..=4u8)
            .map(|id| {
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0..2_000usize {
                        let size = 8 + (i * 37 + usize::from(id) * 11) % 120;
                        let block = alloc(layout(size, 8)).unwrap();
                        // SAFETY: a live block of `size` bytes, ours alone.
                        unsafe { block.write_bytes(id, size) };
                        if i % 7 == 0 {
                            // SAFETY: as above; grown to twice its size.
                            let grown =
                                unsafe { realloc(block, layout(size, 8), 2 * size, &System) };
                            // SAFETY: the grown block, `2 * size` bytes.
                            unsafe { grown.write_bytes(id, 2 * size) };
                            kept.push((grown as usize, 2 * size));
                        } else if i % 5 == 0 {
                            kept.push((block as usize, size));
                        } else {
                            free(block);
                        }
                    }
                    kept
                })
            })
            .collect();
        for (id, thread) in (1..=4u8).zip(threads) {
            for (block, size) in thread.join().unwrap() {
                // SAFETY: a block the thread kept, never given back.
                let bytes = unsafe { std::slice::from_raw_parts(block as *const u8, size) };
                assert!(
                    bytes.iter().all(|b| *b == id),
                    "a block of thread {id} was overwritten"
                );
            }
        }

        // Full: no block, not even a part of one; a small one still fits.
        assert!(alloc(layout(RESERVED, 8)).is_none());
        assert!(alloc(layout(16, 8)).is_some());
        close();
        assert!(
            alloc(layout(16, 8)).is_none(),
            "a closed arena hands out nothing"
        );
    }
}
