//! Planning a compaction copies nothing: on a 10 000-message ledger it
//! allocates not a single byte (counted by a wrapping global allocator, per
//! thread: the test harness's own threads allocate while the test runs).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hermes_core::context::estimate::{fresh_from, request_tokens};
use hermes_core::context::plan::{Budgets, plan};
use hermes_core::{LedgerEntry, Message, ToolCall};

struct Counting;

thread_local! {
    // A `const` Cell: no lazy initialisation, no destructor, so reading it
    // inside the allocator never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn planning_and_estimating_allocate_nothing() {
    let mut view = Vec::new();
    for i in 0..2_500 {
        view.push(LedgerEntry::new(Message::user(format!("question {i}"))));
        view.push(LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new(format!("c{i}"), "t", "{}")],
        }));
        view.push(LedgerEntry::new(Message::tool(
            format!("c{i}"),
            "result ".repeat(40),
        )));
        view.push(LedgerEntry::new(Message::assistant(format!("answer {i}"))));
    }
    let budgets = Budgets {
        head: 1_000,
        tail: 5_000,
        tail_max: 5_000,
    };
    let probe = allocations();
    drop(std::hint::black_box(Box::new(1u8)));
    assert!(
        allocations() > probe,
        "the counter sees this thread's allocations"
    );
    let before = allocations();
    let p = plan(&view, budgets).unwrap();
    let fresh = fresh_from(&view);
    let estimate = request_tokens(500, &view, fresh);
    let after = allocations();
    assert_eq!(after - before, 0, "planning allocated");
    assert!(p.tail_start > p.head_end && estimate.tokens > 0);
}
