//! The iteration budget: a shared wallet of model calls (SPEC L3).
//!
//! Cloning an [`IterationBudget`] gives another handle to the *same* remaining
//! count. A sub-agent started by a tool receives a clone of its parent's
//! handle, so whatever the child spends is gone for the parent too: a parent
//! with 80 left whose child spends 15 continues with 65.
//!
//! **Exact under concurrency.** Several sub-agents may draw from one wallet
//! on different threads at once. Every unit leaves the wallet through one
//! compare-and-swap that refuses to go below zero ([`IterationBudget::try_consume`]),
//! or through a [`Reserved`] unit that is either spent once or given back
//! once when dropped. So whatever the interleaving, the wallet never goes
//! below zero, never counts a call twice, and the calls made are exactly
//! `total − remaining` once every run has ended.
//!
//! **The answer is inside the ceiling.** A run holds one reserved unit for
//! its last call (the one made without tools, so the user gets an answer)
//! from its start ([`crate::Agent::run`]). Its children cannot take that
//! unit, so a parent whose children spent the rest still answers — and the
//! parent and all its children together make at most `total` calls.
//!
//! **A halt.** Whoever holds a handle may [`halt`](IterationBudget::halt)
//! the wallet (the gateway does when a spending cap is reached mid-turn):
//! the model call under way finishes, its tool calls are answered, and the
//! run then ends before its next call ([`crate::StopReason::Halted`]),
//! without using its reserved answer — a halt is about money, so no further
//! call is made at all. Sub-agents share the wallet, so they stop too.
//!
//! Only a 32-bit compare-and-swap is needed, which every target this crate
//! builds for has (thumbv7em and riscv32imac included).

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The default number of model calls one run may make.
pub const DEFAULT_MAX_ITERATIONS: u32 = 90;

/// A thread-safe, shared count of the model calls still allowed.
#[derive(Clone, Debug)]
pub struct IterationBudget {
    remaining: Arc<AtomicU32>,
    halted: Arc<AtomicBool>,
    /// Tokens (prompt, completion) of sub-agents' calls not yet recorded
    /// in the parent's ledger ([`IterationBudget::add_child_usage`]).
    child_tokens: Arc<[AtomicU32; 2]>,
    total: u32,
}

impl IterationBudget {
    /// A new wallet holding `total` model calls.
    pub fn new(total: u32) -> Self {
        IterationBudget {
            remaining: Arc::new(AtomicU32::new(total)),
            halted: Arc::new(AtomicBool::new(false)),
            child_tokens: Arc::new([AtomicU32::new(0), AtomicU32::new(0)]),
            total,
        }
    }

    /// A handle for a sub-agent: the same wallet and halt, but its own
    /// record of sub-agents' usage, so the child's tool results never take
    /// what belongs to the parent's.
    pub fn for_child(&self) -> Self {
        IterationBudget {
            child_tokens: Arc::new([AtomicU32::new(0), AtomicU32::new(0)]),
            ..self.clone()
        }
    }

    /// Records a sub-agent's model calls on its parent's handle, so the
    /// parent's ledger carries it: the parent's next tool result takes it
    /// ([`IterationBudget::take_child_usage`]) and a host that charges the
    /// ledger's usage (spending caps) charges the child's calls to the
    /// parent's account. Saturates at `u32::MAX` tokens per side.
    pub fn add_child_usage(&self, usage: &crate::Usage) {
        for (slot, n) in self
            .child_tokens
            .iter()
            .zip([usage.prompt_tokens, usage.completion_tokens])
        {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            let _ = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_add(n))
            });
        }
    }

    /// Takes what [`IterationBudget::add_child_usage`] recorded (`None` when
    /// nothing): each call's tokens are taken exactly once.
    pub fn take_child_usage(&self) -> Option<crate::Usage> {
        let prompt = u64::from(self.child_tokens[0].swap(0, Ordering::AcqRel));
        let completion = u64::from(self.child_tokens[1].swap(0, Ordering::AcqRel));
        (prompt + completion > 0).then(|| crate::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            ..crate::Usage::default()
        })
    }

    /// Stops every run drawing from this wallet before its next model call
    /// (see the module docs). Cannot be undone.
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// Whether [`halt`](Self::halt) was called on any handle.
    pub fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// Takes one unit for one model call. Returns `false` (and takes nothing)
    /// when the wallet is empty. Never underflows, also under contention.
    pub fn try_consume(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Takes one unit out of the wallet and holds it: nobody else can spend
    /// it, and it goes back to the wallet when the [`Reserved`] is dropped
    /// unspent. `None` (nothing taken) when the wallet is empty.
    pub fn reserve(&self) -> Option<Reserved> {
        self.try_consume().then(|| Reserved {
            wallet: self.remaining.clone(),
            spent: false,
        })
    }

    /// Model calls still allowed, across every handle to this wallet (units
    /// held by a [`Reserved`] are not counted).
    pub fn remaining(&self) -> u32 {
        self.remaining.load(Ordering::Acquire)
    }

    /// The size the wallet was created with.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Model calls already made from this wallet, by any handle (units
    /// held by a [`Reserved`] count as made until they are given back).
    pub fn used(&self) -> u32 {
        self.total.saturating_sub(self.remaining())
    }

    /// Whether the wallet is empty.
    pub fn is_exhausted(&self) -> bool {
        self.remaining() == 0
    }

    /// Whether two handles draw from the same wallet.
    pub fn shares_wallet_with(&self, other: &IterationBudget) -> bool {
        Arc::ptr_eq(&self.remaining, &other.remaining)
    }
}

impl Default for IterationBudget {
    fn default() -> Self {
        IterationBudget::new(DEFAULT_MAX_ITERATIONS)
    }
}

/// One unit taken out of a wallet by [`IterationBudget::reserve`]: spent by
/// [`Reserved::spend`], or given back exactly once when dropped unspent.
#[derive(Debug)]
pub struct Reserved {
    wallet: Arc<AtomicU32>,
    spent: bool,
}

impl Reserved {
    /// Spends the unit on a model call; it never returns to the wallet.
    pub fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.spent {
            // The unit left the wallet in `reserve`, so the count it returns
            // to is at most `total − 1`: no overflow, no unit made up.
            self.wallet.fetch_add(1, Ordering::AcqRel);
        }
    }
}
