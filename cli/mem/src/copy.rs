//! `memcpy` and `memmove` for the x86_64 static build (issue 39, item 5).
//!
//! musl's x86_64 `memcpy` (`src/string/x86_64/memcpy.s`) moves whatever
//! is not eight-byte aligned a byte at a time and the rest with `rep
//! movsq`, whose start-up costs tens of cycles. Most of a program's copies
//! are short (Rust moves a struct over sixteen bytes with a `memcpy`
//! call): a 20-tool-turn one-shot makes ≈ 540 calls a turn, 40 % of them
//! 128–255 bytes, and `perf` found 14 % of a tool turn's CPU in that
//! function. Here a copy of up to 64 bytes is two to four loads and as
//! many stores of overlapping pieces, a longer one a loop of 32-byte
//! pieces, and only a long one (from [`LONG`] bytes) `rep movsb`, which
//! processors with fast string moves (ERMS) run at their full width.
//!
//! `memmove` comes with it: musl's jumps into its `memcpy` through a
//! second symbol of that file (`__memcpy_fwd`), which would pull musl's
//! `memcpy` in beside this one. It copies front to back whenever the
//! destination does not start inside the source (most calls), else back to
//! front; each piece is read before it, or anything it could overlap, is
//! written (the first or last 32 bytes before the loop starts), and the
//! tests check both directions. aarch64's and armhf's musl have optimised
//! assembly of their own and keep it.

use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};

/// From this length on, `rep movsb`. glibc starts at 2 KiB; here the loop
/// goes on to 32 KiB, where it costs at most a few hundred cycles more a
/// call than a fast string move (a tool turn copies ≈ 8 blocks of 4–16
/// KiB: < 1 µs), and callgrind — which counts each byte a `rep movsb`
/// moves as an instruction — keeps reporting a turn's work, not its copies.
const LONG: usize = 32 << 10;

/// Copies `n` bytes from `src` to `dst`, front to back in 32-byte pieces.
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes; they do not overlap,
/// or `dst` starts before `src`.
#[inline]
pub unsafe fn copy_forward(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY (all blocks below): every offset read or written is below
    // `n`, by the length tests that guard it.
    unsafe {
        if n <= 16 {
            return copy_short(dst, src, n);
        }
        if n <= 32 {
            let (a, b) = (piece(src, 0), piece(src, n - 16));
            put(dst, 0, a);
            put(dst, n - 16, b);
            return;
        }
        if n <= 64 {
            let (a, b) = (piece(src, 0), piece(src, 16));
            let (c, d) = (piece(src, n - 32), piece(src, n - 16));
            put(dst, 0, a);
            put(dst, 16, b);
            put(dst, n - 32, c);
            put(dst, n - 16, d);
            return;
        }
        if n >= LONG {
            // Front to back (the direction flag is clear at every call, by
            // the ABI), so an overlapping source after `dst` is read before
            // it is overwritten.
            core::arch::asm!(
                "rep movsb",
                inout("rcx") n => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags),
            );
            return;
        }
        // The last 32 bytes now: with a source overlapping after `dst`,
        // the loop's writes may reach them.
        let (last_a, last_b) = (piece(src, n - 32), piece(src, n - 16));
        let mut at = 0;
        while at + 32 < n {
            let (a, b) = (piece(src, at), piece(src, at + 16));
            put(dst, at, a);
            put(dst, at + 16, b);
            at += 32;
        }
        put(dst, n - 32, last_a);
        put(dst, n - 16, last_b);
    }
}

/// Copies `n` bytes from `src` to `dst`, back to front in 32-byte pieces.
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes; they do not overlap,
/// or `dst` starts after `src`.
#[inline]
pub unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY (all blocks below): every offset read or written is below
    // `n`; up to 64 bytes everything is read before anything is written,
    // so either direction's copy is right.
    unsafe {
        if n <= 64 {
            return copy_forward(dst, src, n);
        }
        // The first 32 bytes now: with a source overlapping before `dst`,
        // the loop's writes may reach them.
        let (first_a, first_b) = (piece(src, 0), piece(src, 16));
        let mut end = n;
        while end > 32 {
            let (a, b) = (piece(src, end - 32), piece(src, end - 16));
            put(dst, end - 32, a);
            put(dst, end - 16, b);
            end -= 32;
        }
        put(dst, 0, first_a);
        put(dst, 16, first_b);
    }
}

/// Copies `n` bytes from `src` to `dst` as C's `memmove`: right however
/// the two overlap.
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes.
#[inline]
pub unsafe fn move_bytes(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the direction is the one each copy allows: front to back
    // unless `dst` starts inside the source.
    unsafe {
        if (dst as usize).wrapping_sub(src as usize) >= n {
            copy_forward(dst, src, n)
        } else {
            copy_backward(dst, src, n)
        }
    }
}

/// Up to 16 bytes: two overlapping loads of the widest size that fits,
/// both read before either is written.
///
/// # Safety
/// As [`copy_forward`], with `n <= 16`.
#[inline(always)]
unsafe fn copy_short(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: each branch reads and writes below `n`.
    unsafe {
        if n >= 8 {
            let (a, b) = (read::<u64>(src, 0), read::<u64>(src, n - 8));
            write(dst, 0, a);
            write(dst, n - 8, b);
        } else if n >= 4 {
            let (a, b) = (read::<u32>(src, 0), read::<u32>(src, n - 4));
            write(dst, 0, a);
            write(dst, n - 4, b);
        } else if n >= 2 {
            let (a, b) = (read::<u16>(src, 0), read::<u16>(src, n - 2));
            write(dst, 0, a);
            write(dst, n - 2, b);
        } else if n == 1 {
            *dst = *src;
        }
    }
}

/// The 16 bytes at `p + at` (any alignment; SSE2, in every x86_64).
///
/// # Safety
/// `p + at .. p + at + 16` is readable.
#[inline(always)]
unsafe fn piece(p: *const u8, at: usize) -> __m128i {
    // SAFETY: by the contract; `loadu` takes any alignment.
    unsafe { _mm_loadu_si128(p.add(at).cast()) }
}

/// Writes 16 bytes at `p + at` (any alignment).
///
/// # Safety
/// `p + at .. p + at + 16` is writable.
#[inline(always)]
unsafe fn put(p: *mut u8, at: usize, v: __m128i) {
    // SAFETY: by the contract; `storeu` takes any alignment.
    unsafe { _mm_storeu_si128(p.add(at).cast(), v) }
}

/// A `T` read from `p + at`, any alignment.
///
/// # Safety
/// `p + at .. p + at + size_of::<T>()` is readable.
#[inline(always)]
unsafe fn read<T: Copy>(p: *const u8, at: usize) -> T {
    // SAFETY: by the contract.
    unsafe { p.add(at).cast::<T>().read_unaligned() }
}

/// Writes `v` at `p + at`, any alignment.
///
/// # Safety
/// `p + at .. p + at + size_of::<T>()` is writable.
#[inline(always)]
unsafe fn write<T>(p: *mut u8, at: usize, v: T) {
    // SAFETY: by the contract.
    unsafe { p.add(at).cast::<T>().write_unaligned(v) }
}

/// C's `memcpy`, in place of musl's.
///
/// # Safety
/// As C's: `src` readable and `dst` writable for `n` bytes, not
/// overlapping.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(
    dst: *mut core::ffi::c_void,
    src: *const core::ffi::c_void,
    n: usize,
) -> *mut core::ffi::c_void {
    // SAFETY: the caller's contract is copy_forward's.
    unsafe { copy_forward(dst.cast(), src.cast(), n) };
    dst
}

/// C's `memmove`, in place of musl's.
///
/// # Safety
/// As C's: `src` readable and `dst` writable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(
    dst: *mut core::ffi::c_void,
    src: *const core::ffi::c_void,
    n: usize,
) -> *mut core::ffi::c_void {
    // SAFETY: the caller's contract is move_bytes'.
    unsafe { move_bytes(dst.cast(), src.cast(), n) };
    dst
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::{vec, vec::Vec};

    use super::{LONG, copy_forward, move_bytes};

    /// Room for the longest copy, its offsets and a guard after it.
    const ROOM: usize = LONG + 256;

    fn pattern(len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; ROOM];
        for (i, b) in buf.iter_mut().enumerate().take(len) {
            *b = (i as u8).wrapping_mul(31).wrapping_add(7) ^ (i >> 8) as u8;
        }
        buf
    }

    fn lengths() -> impl Iterator<Item = usize> {
        (0..=200).chain([255, 256, 257, 1000, 4000]).chain([
            LONG - 33,
            LONG - 1,
            LONG,
            LONG + 1,
            LONG + 31,
        ])
    }

    /// Every short length and the edges of each method, at eight source and
    /// eight destination alignments: the bytes copied are the source's and
    /// not one byte around them changes.
    #[test]
    fn copies_exactly_the_bytes_asked_for() {
        for n in lengths() {
            let src = pattern(n + 8);
            for off_s in 0..8 {
                for off_d in 0..8 {
                    let mut dst = vec![0xa5u8; ROOM];
                    // SAFETY: both arrays hold off + n + guard bytes.
                    unsafe {
                        copy_forward(dst.as_mut_ptr().add(off_d), src.as_ptr().add(off_s), n)
                    };
                    assert_eq!(&dst[off_d..off_d + n], &src[off_s..off_s + n], "n={n}");
                    assert!(dst[..off_d].iter().all(|&b| b == 0xa5), "before, n={n}");
                    assert!(dst[off_d + n..].iter().all(|&b| b == 0xa5), "after, n={n}");
                }
            }
        }
    }

    /// `memmove` over its own source, either way, at every distance: the
    /// destination ends up holding what the source held before, and the
    /// bytes of the source outside the destination are untouched.
    #[test]
    fn moves_over_its_own_source_either_way() {
        for n in lengths() {
            for shift in [0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 100] {
                let original = pattern(n + shift);
                // Down: the destination starts `shift` bytes before.
                let mut buf = original.clone();
                // SAFETY: both ranges lie inside `buf`.
                unsafe {
                    let base = buf.as_mut_ptr();
                    move_bytes(base, base.add(shift), n)
                };
                assert_eq!(
                    &buf[..n],
                    &original[shift..shift + n],
                    "down n={n} by {shift}"
                );
                assert_eq!(&buf[n..], &original[n..], "down n={n} by {shift}");
                // Up: the destination starts `shift` bytes after.
                let mut buf = original.clone();
                // SAFETY: both ranges lie inside `buf`.
                unsafe {
                    let base = buf.as_mut_ptr();
                    move_bytes(base.add(shift), base, n)
                };
                assert_eq!(
                    &buf[shift..shift + n],
                    &original[..n],
                    "up n={n} by {shift}"
                );
                assert_eq!(&buf[..shift], &original[..shift], "up n={n} by {shift}");
            }
        }
    }
}
