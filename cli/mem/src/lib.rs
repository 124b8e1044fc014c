//! `memcmp` and `bcmp` for the static builds (issue 39, item 5), and on
//! x86_64 `memcpy` and `memmove` ([`copy`]).
//!
//! musl's `memcmp` is a loop over single bytes (`src/string/memcmp.c`), and
//! its `bcmp` calls it: ≈ 6 instructions a byte. In a 20-tool-turn one-shot
//! that was 16 % of all instructions (callgrind, 1.53 M of 9.71 M), a
//! quarter of a tool turn's: the request encoder's comparison of the system
//! prompt, the tool definitions and the history with what it kept (Rust's
//! `==` on byte slices is a `bcmp` call), and SQLite comparing a row it
//! rewrites with the one on the page (`btreeOverwriteContent`) and its
//! text keys. These compare eight bytes at a time. glibc's own are already
//! vectorised, so only the musl builds export them; the static link then
//! takes these and never pulls musl's `memcmp.o` or `bcmp.o` from `libc.a`
//! (a second definition would be a link error, not a silent choice).
//!
//! `#![no_builtins]`: the compiler must not turn the loops of a function
//! named `memcmp` into a call to `memcmp` (nor `memcpy`'s into `memcpy`).
#![no_std]
#![no_builtins]

#[cfg(target_arch = "x86_64")]
pub mod copy;

use core::ffi::c_int;
#[cfg(target_env = "musl")]
use core::ffi::c_void;

/// Compares `n` bytes at `a` and `b` as unsigned bytes, as C's `memcmp`:
/// negative, zero or positive as the first differing byte of `a` is below,
/// equal to or above `b`'s.
///
/// # Safety
/// `a` and `b` are readable for `n` bytes.
#[inline]
pub unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> c_int {
    if n < 8 {
        for i in 0..n {
            // SAFETY: i < n, readable by the contract.
            let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
            if x != y {
                return c_int::from(x) - c_int::from(y);
            }
        }
        return 0;
    }
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        let (x, y) = unsafe { (word(a, i), word(b, i)) };
        if x != y {
            return order(x, y);
        }
        i += 8;
    }
    if i < n {
        // The last eight bytes, overlapping the words already found equal.
        // SAFETY: n >= 8.
        let (x, y) = unsafe { (word(a, n - 8), word(b, n - 8)) };
        if x != y {
            return order(x, y);
        }
    }
    0
}

/// Whether `n` bytes at `a` and `b` differ, as C's `bcmp` (zero when
/// equal, else non-zero).
///
/// # Safety
/// `a` and `b` are readable for `n` bytes.
#[inline]
pub unsafe fn differ(a: *const u8, b: *const u8, n: usize) -> c_int {
    if n < 8 {
        for i in 0..n {
            // SAFETY: i < n.
            if unsafe { *a.add(i) != *b.add(i) } {
                return 1;
            }
        }
        return 0;
    }
    let mut i = 0;
    // Four words a step, their differences folded into one test: most
    // calls compare long equal runs (a kept system prompt, tool schemas).
    while i + 32 <= n {
        // SAFETY: i + 32 <= n.
        let folded = unsafe {
            (wide(a, i) ^ wide(b, i))
                | (wide(a, i + 8) ^ wide(b, i + 8))
                | (wide(a, i + 16) ^ wide(b, i + 16))
                | (wide(a, i + 24) ^ wide(b, i + 24))
        };
        if folded != 0 {
            return 1;
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        if unsafe { word(a, i) != word(b, i) } {
            return 1;
        }
        i += 8;
    }
    // SAFETY: n >= 8; the overlap was found equal.
    c_int::from(i < n && unsafe { word(a, n - 8) != word(b, n - 8) })
}

/// The eight bytes at `p + i`, in memory order (any alignment).
///
/// # Safety
/// `p + i .. p + i + 8` is readable.
#[inline(always)]
unsafe fn word(p: *const u8, i: usize) -> [u8; 8] {
    // SAFETY: by the contract; read_unaligned takes any alignment.
    unsafe { p.add(i).cast::<[u8; 8]>().read_unaligned() }
}

/// The eight bytes at `p + i` as a number (any alignment; only compared
/// for equality, so the byte order does not matter).
///
/// # Safety
/// `p + i .. p + i + 8` is readable.
#[inline(always)]
unsafe fn wide(p: *const u8, i: usize) -> u64 {
    // SAFETY: by the contract.
    u64::from_ne_bytes(unsafe { word(p, i) })
}

/// The order of two different words by their first differing byte: read
/// big-endian, the first byte is the most significant.
#[inline(always)]
fn order(x: [u8; 8], y: [u8; 8]) -> c_int {
    if u64::from_be_bytes(x) < u64::from_be_bytes(y) {
        -1
    } else {
        1
    }
}

/// C's `memcmp`, in place of musl's.
///
/// # Safety
/// As C's: `a` and `b` are readable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const c_void, b: *const c_void, n: usize) -> c_int {
    // SAFETY: the caller's contract is compare's.
    unsafe { compare(a.cast(), b.cast(), n) }
}

/// C's `bcmp` (what Rust's `==` on byte slices calls), in place of musl's.
///
/// # Safety
/// As C's: `a` and `b` are readable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const c_void, b: *const c_void, n: usize) -> c_int {
    // SAFETY: the caller's contract is differ's.
    unsafe { differ(a.cast(), b.cast(), n) }
}

#[cfg(test)]
mod tests {
    use super::{compare, differ};

    fn reference(a: &[u8], b: &[u8]) -> i32 {
        let first = a.iter().zip(b).find(|(x, y)| x != y);
        first.map_or(0, |(x, y)| i32::from(*x) - i32::from(*y))
    }

    fn check(a: &[u8], b: &[u8]) {
        let n = a.len();
        let want = reference(a, b);
        // SAFETY: both slices hold n bytes.
        let (got, neq) = unsafe {
            (
                compare(a.as_ptr(), b.as_ptr(), n),
                differ(a.as_ptr(), b.as_ptr(), n),
            )
        };
        assert_eq!(got.signum(), want.signum(), "{a:x?} vs {b:x?}");
        assert_eq!(neq != 0, want != 0, "{a:x?} vs {b:x?}");
    }

    /// Every length up to 40 at eight alignments of either side (and up to
    /// 100 at three: `bcmp`'s four-word steps and what is left after them),
    /// with one differing byte at every place, both ways round, in byte
    /// values that differ in the top bit (unsigned: 0x80 is above 0x7f);
    /// and with a second difference the other way at the end, which must
    /// not decide.
    #[test]
    fn agrees_with_a_byte_by_byte_comparison() {
        let pairs = [(0x7f, 0x80), (0x80, 0x7f), (0, 1), (0xff, 0)];
        for n in 0..=100 {
            let offsets: &[usize] = if n <= 40 {
                &[0, 1, 2, 3, 4, 5, 6, 7]
            } else {
                &[0, 3, 7]
            };
            for &off_a in offsets {
                for &off_b in offsets {
                    let mut a = [0u8; 108];
                    let mut b = [0u8; 108];
                    for i in 0..n {
                        let v = (i as u8).wrapping_mul(37).wrapping_add(11);
                        a[off_a + i] = v;
                        b[off_b + i] = v;
                    }
                    let (ra, rb) = (off_a..off_a + n, off_b..off_b + n);
                    check(&a[ra.clone()], &b[rb.clone()]);
                    for at in 0..n {
                        let (keep_a, keep_b) = (a[off_a + at], b[off_b + at]);
                        for (x, y) in pairs {
                            a[off_a + at] = x;
                            b[off_b + at] = y;
                            check(&a[ra.clone()], &b[rb.clone()]);
                            if at + 1 < n {
                                let last = n - 1;
                                let (la, lb) = (a[off_a + last], b[off_b + last]);
                                (a[off_a + last], b[off_b + last]) = (y, x);
                                check(&a[ra.clone()], &b[rb.clone()]);
                                (a[off_a + last], b[off_b + last]) = (la, lb);
                            }
                        }
                        (a[off_a + at], b[off_b + at]) = (keep_a, keep_b);
                    }
                }
            }
        }
    }
}
