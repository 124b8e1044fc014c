//! Links `hermes-core` into a program that has no std at all.
//!
//! If anything in the core's dependency graph pulls in std, this fails to
//! build with `E0152 duplicate lang item 'panic_impl'`, naming the crate.
//! It also calls real core functions, so the core is loaded and linked, not
//! just declared.

#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::alloc::{GlobalAlloc, Layout};

use hermes_core::codec::sse::SseDecoder;
use hermes_core::{IterationBudget, LedgerEntry, Message, NullSink};

// `no_std` binaries link with -nodefaultlibs: name the C library explicitly.
#[link(name = "c")]
unsafe extern "C" {
    fn malloc(size: usize) -> *mut u8;
    fn free(ptr: *mut u8);
    fn posix_memalign(out: *mut *mut u8, align: usize, size: usize) -> i32;
}

/// The C library's allocator: the host has one, and the core needs `alloc`.
struct LibcAlloc;

unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= 16 {
            // SAFETY: malloc returns memory aligned for any fundamental type (16 on x86_64/aarch64).
            unsafe { malloc(layout.size().max(1)) }
        } else {
            let mut out = core::ptr::null_mut();
            // SAFETY: align is a power of two and a multiple of the pointer size here.
            if unsafe { posix_memalign(&mut out, layout.align(), layout.size().max(1)) } != 0 {
                return core::ptr::null_mut();
            }
            out
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: ptr came from malloc/posix_memalign above.
        unsafe { free(ptr) }
    }
}

#[global_allocator]
static ALLOC: LibcAlloc = LibcAlloc;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// The host's liballoc references this symbol even with `panic = "abort"`.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}

#[unsafe(no_mangle)]
extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    let budget = IterationBudget::new(2);
    let child = budget.clone();
    let _ = child.try_consume();
    let mut ledger: Vec<LedgerEntry> = Vec::new();
    ledger.push(LedgerEntry::new(Message::user("hello")));
    let mut decoder = SseDecoder::new();
    let fed = decoder.feed(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        &mut NullSink,
    );
    // The context policy links too: estimating, planning, recognising an
    // overflow error.
    let estimate = hermes_core::context::estimate::request_tokens(0, &ledger, 0);
    let overflow = hermes_core::context::overflow::classify(
        "This model's maximum context length is 512 tokens. However, you requested 600 tokens.",
    );
    let ok = fed.is_ok()
        && budget.remaining() == 1
        && ledger.len() == 1
        && estimate.tokens > 0
        && overflow.is_some_and(|o| o.window == Some(512));
    if ok { 0 } else { 1 }
}

/// Referenced by the host's precompiled liballoc (built with unwinding);
/// never called with `panic = "abort"`.
#[unsafe(no_mangle)]
extern "C" fn _Unwind_Resume() -> ! {
    loop {}
}
