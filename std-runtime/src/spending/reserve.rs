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
/// estimate a reservation holds. One per gateway, and kept in the store
/// too (`spend:largest:<identity>`, written with the next reservation
/// after it grew): a gateway that starts, or another gateway on the same
/// database, estimates from what any gateway saw instead of from 0 — two
/// fresh gateways' first calls for a person near a cap would otherwise
/// both pass it. Only a person no gateway has seen call yet starts at 0
/// (a reservation of nothing still tests the cap atomically), and such a
/// person has spent nothing.
#[derive(Debug, Default)]
pub struct CallSizes(Mutex<HashMap<String, Size>>);

/// One identity's largest call, and whether the store has it.
#[derive(Clone, Copy, Debug, Default)]
struct Size {
    tokens: u64,
    micro_usd: u64,
    stored: bool,
}

impl CallSizes {
    fn get(&self, identity: &str) -> Option<Size> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(identity).copied()
    }

    /// A call of this size was made: the estimate grows to it (and must be
    /// stored again) if it is larger.
    fn note(&self, identity: &str, tokens: u64, micro_usd: u64) {
        self.merge(identity, tokens, micro_usd, false);
    }

    /// The size the store holds for `identity`.
    fn load(&self, identity: &str, tokens: u64, micro_usd: u64) {
        self.merge(identity, tokens, micro_usd, true);
    }

    fn merge(&self, identity: &str, tokens: u64, micro_usd: u64, from_store: bool) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let e = map.entry(identity.to_owned()).or_insert(Size {
            stored: from_store,
            ..Size::default()
        });
        if tokens > e.tokens || micro_usd > e.micro_usd {
            e.tokens = e.tokens.max(tokens);
            e.micro_usd = e.micro_usd.max(micro_usd);
            e.stored = from_store && e.tokens == tokens && e.micro_usd == micro_usd;
        }
    }

    fn mark_stored(&self, identity: &str, size: Size) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = map.get_mut(identity)
            && e.tokens == size.tokens
            && e.micro_usd == size.micro_usd
        {
            e.stored = true;
        }
    }
}

/// Where the store keeps `identity`'s largest call (`"<tokens> <micro-usd>"`).
fn size_key(identity: &str) -> String {
    format!("spend:largest:{identity}")
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
        let size = self.sizes.get(&self.identity).unwrap_or_default();
        let (tok, usd) = (size.tokens, size.micro_usd);
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
        if !self.limits.any() {
            return Ok(true);
        }
        let size_key = size_key(&self.identity);
        if self.sizes.get(&self.identity).is_none() {
            let stored = store.kv_get(&size_key)?;
            let mut parts = stored.as_deref().unwrap_or("").split(' ');
            let mut number = || parts.next().and_then(|n| n.trim().parse::<u64>().ok());
            let (tokens, micro_usd) = (number().unwrap_or(0), number().unwrap_or(0));
            self.sizes.load(&self.identity, tokens, micro_usd);
        }
        let capped = self.capped(now_ms);
        if capped.is_empty() {
            return Ok(true);
        }
        let size = self.sizes.get(&self.identity).unwrap_or_default();
        let size_value = format!("{} {}", size.tokens, size.micro_usd);
        let mut writes: Vec<KvWrite<'_>> = capped
            .iter()
            .map(|(key, amount, below)| KvWrite::AddBelow {
                key,
                amount: *amount,
                below: *below,
            })
            .collect();
        if !size.stored {
            writes.push(KvWrite::Set {
                key: &size_key,
                value: &size_value,
            });
        }
        if !store.kv_commit(&writes)? {
            return Ok(false);
        }
        if !size.stored {
            self.sizes.mark_stored(&self.identity, size);
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
