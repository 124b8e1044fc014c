//! Reservations: how one person's turns running at once — on one gateway
//! or on N gateways sharing a PostgreSQL — cannot together pass a cap by
//! more than one model call's worth (issue 44).
//!
//! Reading the accounts before a call is not enough: two turns reading
//! "one call below the cap" at once would both call. So before every model
//! call, a [`Wallet`] adds an estimate of the call — the largest call this
//! gateway has seen for the identity — to each capped account with
//! [`KvWrite::AddBelow`], in one transaction: the test "below the cap" and
//! the add are one step under the account row's lock, so once a
//! reservation brings the account to its cap no other turn's gets through.
//! The estimate is settled in the transaction that stores the call
//! ([`Wallet::settle`]: the actual cost replaces it); what a call that
//! stored nothing held goes back when the turn ends ([`Wallet::release`]).
//!
//! Bound: a call is admitted only while the account (spent plus held) is
//! below the cap, and holds at least its estimate until settled, so the
//! account ends below `cap + estimate` as long as no call costs more than
//! the estimate — over by less than one (the largest) call's worth. A
//! gateway that dies mid-call leaves its hold counted until the period
//! ends (spending that may have happened is not given back).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Charge, SpendingLimits, account_key};
use crate::store::{KvWrite, Store, StoreError};

/// The largest model call seen per identity (tokens, micro-dollars): the
/// estimate a reservation holds. One per gateway; a fresh gateway starts
/// at 0 (a reservation of nothing still tests the cap atomically).
#[derive(Debug, Default)]
pub struct CallSizes(Mutex<HashMap<String, (u64, u64)>>);

impl CallSizes {
    fn get(&self, identity: &str) -> (u64, u64) {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(identity).copied().unwrap_or((0, 0))
    }

    fn note(&self, identity: &str, tokens: u64, micro_usd: u64) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let e = map.entry(identity.to_owned()).or_insert((0, 0));
        e.0 = e.0.max(tokens);
        e.1 = e.1.max(micro_usd);
    }
}

/// One turn's reservations for `identity`: what it holds in each capped
/// account, not yet settled.
#[derive(Debug)]
pub struct Wallet {
    limits: SpendingLimits,
    identity: String,
    sizes: Arc<CallSizes>,
    held: Mutex<BTreeMap<String, i64>>,
}

impl Wallet {
    /// A wallet of `identity` under `limits`, estimating from `sizes`.
    pub fn new(limits: SpendingLimits, identity: String, sizes: Arc<CallSizes>) -> Self {
        Wallet {
            limits,
            identity,
            sizes,
            held: Mutex::new(BTreeMap::new()),
        }
    }

    /// The capped accounts of the identity and the bot at `now_ms`, with
    /// what a call is estimated to add to each and the bound it must be
    /// below (tokens, or micro-dollars).
    fn capped(&self, now_ms: u64) -> Vec<(String, i64, i64)> {
        let l = &self.limits;
        let p = l.periods(now_ms);
        let (day, month) = (p.day_key(), p.month_key());
        let (tok, usd) = self.sizes.get(&self.identity);
        let exempt = l.owner_exempt && l.owner.as_deref() == Some(self.identity.as_str());
        let me = (!exempt).then_some(self.identity.as_str());
        let micro = |c: f64| (c * 1e6).round() as i64;
        let whole = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let caps = [
            (me, "tok", &day, l.user_day_tokens.map(whole), tok),
            (me, "tok", &month, l.user_month_tokens.map(whole), tok),
            (me, "usd", &day, l.user_day_usd.map(micro), usd),
            (me, "usd", &month, l.user_month_usd.map(micro), usd),
            (
                Some(super::BOT_ACCOUNT),
                "usd",
                &day,
                l.bot_day_usd.map(micro),
                usd,
            ),
            (
                Some(super::BOT_ACCOUNT),
                "usd",
                &month,
                l.bot_month_usd.map(micro),
                usd,
            ),
        ];
        caps.into_iter()
            .filter_map(|(account, kind, period, cap, estimate)| {
                Some((account_key(kind, period, account?), whole(estimate), cap?))
            })
            .collect()
    }

    /// Reserves one call's estimate in every capped account, all or none:
    /// `Ok(false)` when one of them is at its cap (no call may be made).
    pub fn reserve(&self, store: &mut Store, now_ms: u64) -> Result<bool, StoreError> {
        let capped = self.capped(now_ms);
        if capped.is_empty() {
            return Ok(true);
        }
        let writes: Vec<KvWrite<'_>> = capped
            .iter()
            .map(|(key, amount, below)| KvWrite::AddBelow {
                key,
                amount: *amount,
                below: *below,
            })
            .collect();
        if !store.kv_commit(&writes)? {
            return Ok(false);
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, amount, _) in capped {
            *held.entry(key).or_insert(0) += amount;
        }
        Ok(true)
    }

    /// Turns `charges` (the actual cost of the calls about to be stored,
    /// the largest of them `largest`) into the writes that also settle
    /// every hold: the calls they were made for are stored with them.
    pub fn settle(&self, charges: &mut Vec<Charge>, largest: (u64, u64)) {
        self.sizes.note(&self.identity, largest.0, largest.1);
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        for (key, amount) in held {
            match charges.iter_mut().find(|c| c.key == key) {
                Some(c) => c.amount = c.amount.saturating_sub(amount),
                None => charges.push(Charge {
                    key,
                    amount: -amount,
                }),
            }
        }
    }

    /// Gives back what calls that stored nothing (a failed call, a turn
    /// stopped mid-way) still hold.
    pub fn release(&self, store: &mut Store) -> Result<(), StoreError> {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        let back: Vec<Charge> = held
            .into_iter()
            .filter(|(_, amount)| *amount != 0)
            .map(|(key, amount)| Charge {
                key,
                amount: -amount,
            })
            .collect();
        if back.is_empty() {
            return Ok(());
        }
        let writes: Vec<KvWrite<'_>> = back.iter().map(Charge::write).collect();
        store.kv_commit(&writes).map(|_| ())
    }
}
