//! Spending caps in the gateway (issue 44; the accounts and caps are
//! [`hermes_runtime::spending`]'s).
//!
//! A turn serves one identity, `PLATFORM:USER_ID` — the one that scopes
//! memory and `session_search`. Before the model is called, the store's
//! accounts of that identity and of the bot are read: a cap reached means
//! one polite line saying when it resets, and no model call. During the
//! run, before every model call, one call's worth is reserved in each
//! capped account, atomically below its cap ([`spending::Wallet`]: the
//! person's other turns, here or on another gateway on the same
//! PostgreSQL, see it at once): a reservation refused halts the run's
//! wallet, so the call under way is the last one. Every stored model call
//! is charged to the accounts in the transaction that stores it, settling
//! its reservation ([`hermes_runtime::persist::TurnWriter::charging`]);
//! what a call that stored nothing held goes back when the turn ends.

use std::sync::Arc;

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

    /// A turn's reservations for `identity`.
    pub(super) fn wallet(&self, identity: &str) -> Arc<spending::Wallet> {
        Arc::new(spending::Wallet::new(
            self.config.limits.clone(),
            identity.to_owned(),
            self.agents.call_sizes.clone(),
        ))
    }

    /// What the turn's stored model calls cost `identity`, charged with
    /// them and settling what `wallet` holds for them.
    pub(super) fn charger(
        &self,
        identity: String,
        prices: PriceList,
        wallet: Arc<spending::Wallet>,
    ) -> ChargeFn {
        Box::new(spending::reserving_charger(
            self.config.limits.clone(),
            identity,
            move |model| prices.price(model).map(|(p, _)| p),
            self.clock.clone(),
            Some(wallet),
        ))
    }

    /// Forgets usage rows of periods before last month (at start, and now
    /// and then with the accepted message ids).
    pub(super) fn prune_usage(&self) {
        match self.config.limits.prune(&mut self.store(), self.now()) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(pruned = n, "forgot old usage rows"),
            Err(e) => tracing::warn!(error = %e, "could not prune old usage rows"),
        }
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

/// Watches a run for a cap reached mid-way: before each model call, one
/// call's worth is reserved; a reservation refused halts the wallet (the
/// core then makes no further call) and keeps the line to send.
pub(super) struct SpendWatch<'a> {
    pub(super) inner: &'a Inner,
    pub(super) identity: String,
    pub(super) budget: hermes_core::IterationBudget,
    pub(super) wallet: Arc<spending::Wallet>,
    /// The refusal line, once the run was halted.
    pub(super) halted: Option<String>,
}

impl SpendWatch<'_> {
    /// Called on every `ModelCall` event.
    pub(super) fn before_call(&mut self) {
        if self.halted.is_some() || !self.inner.config.limits.any() {
            return;
        }
        let now = self.inner.now();
        let reserved = self.wallet.reserve(&mut self.inner.store(), now);
        match reserved {
            Ok(true) => {}
            Ok(false) => {
                // The line names the cap the accounts (spent and held)
                // reached; another turn's hold may be what reached it.
                let line = self.inner.cap_refusal(&self.identity).unwrap_or_else(|| {
                    "Sorry — your usage limit is taken up by your other conversations \
                     right now; please try again in a moment."
                        .to_owned()
                });
                tracing::info!(identity = %self.identity, "a spending reservation was refused");
                self.budget.halt();
                self.halted = Some(line);
            }
            // A store that cannot be written lets the call run (logged):
            // the run's own writes fail soon enough if the store is gone.
            Err(e) => tracing::error!(identity = %self.identity, error = %e,
                "could not reserve in the spending accounts"),
        }
    }
}

impl Drop for SpendWatch<'_> {
    /// What calls that stored nothing still hold goes back.
    fn drop(&mut self) {
        let released = self.wallet.release(&mut self.inner.store());
        if let Err(e) = released {
            tracing::error!(identity = %self.identity, error = %e,
                "could not give back a spending reservation");
        }
    }
}
