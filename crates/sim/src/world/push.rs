//! The push subscriptions of a run and what the checker knows of them: their settings (drawn
//! from a generator of their own), the receiver they deliver to, and what was delivered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sluice_core::queues::{Backoff, Ordering as KeyOrdering, PushSpec, PushSubscription, StartAt, SubscriptionSpec};
use sluice_testkit::{MemStore, SimClock};

use super::receiver::Receiver;
use crate::model::SimFilter;
use crate::rng::Rng;
use crate::trace::Trace;

/// The push subscriptions on TOPIC_A: one filtered, one ordered by key.
pub(crate) const SUB_P: &str = "p";
pub(crate) const SUB_PK: &str = "pk";
pub(crate) const PUSH_SUBS: [&str; 2] = [SUB_P, SUB_PK];

pub(crate) struct PushModel {
    pub(crate) receiver: Arc<Receiver>,
    /// Each push subscription's spec as created.
    pub(crate) specs: BTreeMap<&'static str, SubscriptionSpec>,
    /// SUB_P's content filter (SUB_PK has none).
    pub(crate) filter: SimFilter,
    /// The subscriptions as their dispatchers read them, once created.
    pub(crate) subs: BTreeMap<&'static str, PushSubscription>,
    /// The receiver's attempts the checker has looked at.
    pub(crate) seen: usize,
    /// Messages the receiver got, by (subscription, partition, offset).
    pub(crate) delivered: BTreeSet<(&'static str, u32, u64)>,
    /// SUB_P's next offset per partition as last read, and the offsets the cursor passed while
    /// they were surely still in the log (a filtered event among them was surely counted so).
    pub(crate) cursors: BTreeMap<u32, u64>,
    pub(crate) passed_in_log: BTreeSet<(u32, u64)>,
}

impl PushModel {
    pub(crate) fn new(seed: u64, clock: Arc<SimClock>, mem: MemStore, trace: Trace) -> Self {
        let mut rng = Rng::new(seed.rotate_left(11) ^ 0x9b5_4e11_d1ce);
        let filter = if rng.chance(0.5) { SimFilter::Keys } else { SimFilter::KeyOrLongPad };
        let p = SubscriptionSpec {
            filter: filter.pattern(),
            ordering: KeyOrdering::None,
            redelivery_backoff: rng.chance(0.5).then(|| Backoff::Steps(vec![300, 1000])),
            ..draw_spec(&mut rng, 1)
        };
        let pk = SubscriptionSpec { ordering: KeyOrdering::Key, ..draw_spec(&mut rng, 2) };
        Self {
            receiver: Arc::new(Receiver::new(clock, mem, trace, seed)),
            specs: [(SUB_P, p), (SUB_PK, pk)].into_iter().collect(),
            filter,
            subs: BTreeMap::new(),
            seen: 0,
            delivered: BTreeSet::new(),
            cursors: BTreeMap::new(),
            passed_in_log: BTreeSet::new(),
        }
    }

    /// The content filter of `sub`.
    pub(crate) fn filter_of(&self, sub: &str) -> SimFilter {
        if sub == SUB_P {
            self.filter
        } else {
            SimFilter::None
        }
    }
}

/// A push subscription's spec: a small `max_receive_count` (from `min_receives`), short
/// timeouts, small batches, one to three workers.
fn draw_spec(rng: &mut Rng, min_receives: i64) -> SubscriptionSpec {
    let mut push = PushSpec::url("http://receiver.sim/hook", None);
    push.max_batch = rng.range(1, 8) as u32;
    push.timeout_ms = rng.range(1000, 4000) as u64;
    push.max_in_flight = rng.range(1, 3) as u32;
    SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: rng.range(1000, 6000) as u64,
        max_receive_count: rng.range(min_receives, 3) as u32,
        ordering: KeyOrdering::None,
        delay_ms: 0,
        redelivery_backoff: None,
        filter: None,
        push: Some(push),
        rate: None,
    }
}
