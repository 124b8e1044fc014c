//! Spending caps in the gateway (issue 44; the accounts and caps are
//! [`hermes_runtime::spending`]'s).
//!
//! A turn serves one identity, `PLATFORM:USER_ID` — the one that scopes
//! memory and `session_search`. Before the model is called, the store's
//! accounts of that identity and of the bot are read: a cap reached means
//! one polite line saying when it resets, and no model call. During the
//! run, before every further model call, they are read again (another
//! gateway on the same PostgreSQL may have spent meanwhile): a cap reached
//! halts the run's wallet, so the call under way is the last one. Every
//! stored model call is charged to the accounts in the transaction that
//! stores it ([`hermes_runtime::persist::TurnWriter::charging`]).

use hermes_runtime::persist::ChargeFn;
use hermes_runtime::pricing::{PriceBook as _, PriceList};
use hermes_runtime::spending;

use super::Inner;
use crate::event::SessionSource;

/// The identity a chat turn serves.
pub(crate) fn identity(source: &SessionSource) -> String {
    format!("{}:{}", source.platform, source.user_id)
}

impl Inner {
    /// The line refusing a turn of `identity` when a cap is reached now,
    /// `None` when it may run. A store that cannot be read lets it run
    /// (logged): the turn itself fails soon enough if the store is gone.
    pub(super) fn cap_refusal(&self, identity: &str) -> Option<String> {
        let limits = &self.config.limits;
        if !limits.any() {
            return None;
        }
        let now = self.now();
        let spent = match limits.spent(&self.store(), identity, now) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(identity, error = %e, "could not read the spending accounts");
                return None;
            }
        };
        let reached = limits.reached(identity, &spent)?;
        tracing::info!(identity, cap = ?reached.cap, "a spending cap was reached");
        Some(limits.refusal(&reached, now))
    }

    /// What the turn's stored model calls cost `identity`, charged with
    /// them.
    pub(super) fn charger(&self, identity: String, prices: PriceList) -> ChargeFn {
        Box::new(spending::charger(
            self.config.limits.clone(),
            identity,
            move |model| prices.price(model).map(|(p, _)| p),
            self.clock.clone(),
        ))
    }

    /// `/usage`'s lines about the sender's own accounts.
    pub(super) fn own_usage(&self, identity: &str) -> String {
        let limits = &self.config.limits;
        match limits.spent(&self.store(), identity, self.now()) {
            Ok(spent) => format!("Your usage:\n{}", spending::report(limits, &spent)),
            Err(e) => format!("Your usage: unavailable ({e})"),
        }
    }
}

/// Watches a run for a cap reached mid-way: before each model call after
/// the first, the accounts are read again; a cap reached halts the wallet
/// (the core then makes no further call) and keeps the line to send.
pub(super) struct SpendWatch<'a> {
    pub(super) inner: &'a Inner,
    pub(super) identity: String,
    pub(super) budget: hermes_core::IterationBudget,
    /// The refusal line, once the run was halted.
    pub(super) halted: Option<String>,
}

impl SpendWatch<'_> {
    /// Called on every `ModelCall` event.
    pub(super) fn before_call(&mut self, iteration: u32) {
        if iteration <= 1 || self.halted.is_some() {
            return;
        }
        if let Some(line) = self.inner.cap_refusal(&self.identity) {
            self.budget.halt();
            self.halted = Some(line);
        }
    }
}
