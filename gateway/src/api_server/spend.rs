//! Spending caps for the API server (issue 44): a request has no chat user,
//! so its model calls count against `[limits] unattended_account` — the
//! holder of the server's key, the owner by default — as cron jobs and
//! webhooks do. A request when that account (or the bot) reached a cap is
//! refused with `429` and the line saying when it resets, no model call;
//! before every model call one call's worth is reserved
//! ([`hermes_runtime::spending::Wallet`]), and a reservation refused ends
//! the run after the call under way, with that line as its notice.

use std::sync::Arc;

use hermes_core::{Clock, IterationBudget};
use hermes_runtime::persist::ChargeFn;
use hermes_runtime::pricing::PriceBook as _;
use hermes_runtime::spending::{self, Wallet};
use hermes_runtime::store::SystemClock;
use hermes_runtime::sync::lock;

use super::run::Services;
use super::wire::ApiError;

/// One request's account, reservations and halt.
pub(super) struct Spend<'a> {
    services: &'a Services,
    account: String,
    budget: IterationBudget,
    wallet: Arc<Wallet>,
    /// The line to end with, once a cap halted the run.
    pub halted: Option<String>,
}

impl<'a> Spend<'a> {
    /// The request's spending, or the `429` when a cap is reached already.
    pub fn new(services: &'a Services, budget: IterationBudget) -> Result<Self, ApiError> {
        let limits = &services.limits;
        let account = limits.unattended_account.clone();
        if let Some(line) = refusal(services, &account) {
            return Err(ApiError::other(
                429,
                line,
                "insufficient_quota",
                "usage_limit_reached",
            ));
        }
        let wallet = Arc::new(Wallet::new(
            limits.clone(),
            account.clone(),
            services.call_sizes.clone(),
        ));
        Ok(Spend {
            services,
            account,
            budget,
            wallet,
            halted: None,
        })
    }

    /// What the run's stored calls cost the account, charged with them.
    pub fn charger(&self, services: &Services) -> ChargeFn {
        let prices = services
            .factory
            .prices(&services.store, SystemClock.now_ms());
        Box::new(spending::reserving_charger(
            services.limits.clone(),
            self.account.clone(),
            move |model| prices.price(model).map(|(p, _)| p),
            Arc::new(SystemClock),
            Some(self.wallet.clone()),
        ))
    }

    /// On every model call: reserve its worth, or halt the run.
    pub fn before_call(&mut self) {
        if self.halted.is_some() || !self.services.limits.any() {
            return;
        }
        let now = SystemClock.now_ms();
        let reserved = self.wallet.reserve(&mut lock(&self.services.store), now);
        match reserved {
            Ok(true) => {}
            Ok(false) => {
                self.budget.halt();
                self.halted = Some(refusal(self.services, &self.account).unwrap_or_else(|| {
                    "The usage limit is taken up by other requests right now; try again in a moment."
                        .to_owned()
                }));
            }
            Err(e) => tracing::error!(error = %e, "api_server: could not reserve spending"),
        }
    }
}

impl Drop for Spend<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.wallet.release(&mut lock(&self.services.store)) {
            tracing::error!(error = %e, "api_server: could not give back a spending reservation");
        }
    }
}

/// The line refusing `account` now, if a cap is reached.
fn refusal(services: &Services, account: &str) -> Option<String> {
    let limits = &services.limits;
    if !limits.any() {
        return None;
    }
    let now = SystemClock.now_ms();
    let spent = limits.spent(&lock(&services.store), account, now);
    match spent {
        Ok(spent) => limits
            .reached(account, &spent)
            .map(|r| limits.refusal(&r, now)),
        Err(e) => {
            tracing::error!(error = %e, "api_server: could not read the spending accounts");
            None
        }
    }
}
