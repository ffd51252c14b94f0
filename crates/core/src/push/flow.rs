//! Push flow control and endpoint health: how many batches of a subscription may be out at
//! once, when the next may start, and whether its endpoint is suspended.
//!
//! - **Adaptive concurrency** (AIMD, as TCP's and Pub/Sub's push): `push.max_in_flight` is a
//!   ceiling; a `429`, a `503` or a timeout halves the limit in use (never below 1), each
//!   2xx adds one back. A `Retry-After` (seconds or an HTTP date, capped at
//!   [`MAX_RETRY_AFTER_MS`]) holds back the whole subscription, not only the batch that
//!   carried it.
//! - **Suspension**: after `push.suspend_after.failures` failed attempts in a row spanning at
//!   least `spanning_ms` (20 and 5 minutes by default), deliveries stop except one probe batch every
//!   [`PROBE_EVERY_MS`]; the first 2xx resumes.
//!
//! The gate is asked *before* a receive ([`Flows::try_start`], [`Flows::start`]): a message
//! waiting for the limit, a `Retry-After` or the next probe is not received, so it spends
//! no receive count while it waits.
//!
//! Where it lives: the decisions are pure ([`FlowRecord`]); [`Flows`] keeps each
//! subscription's record in a dispatcher's memory, and the record is stored with the
//! subscription's delivery counts ([`crate::queues::PushStatsRecord::flow`], written when
//! counts are flushed). On AWS a subscription is driven by one dispatcher run at a time (its
//! run lease, [`super::lease`]): the run adopts the stored record when it claims the lease
//! and stores its own when it ends, so the limit, a `Retry-After` and a suspension hold
//! across function instances for the price of one read per run (the counts' write carries
//! it). Alternatives considered: the run lease's item (deleted when a run ends, so a
//! suspension would not outlive the run) and an item of its own (a second write per flush).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};

use crate::ports::deliver::Answer;
pub use crate::queues::DEFAULT_SUSPEND_AFTER;
use crate::queues::{FlowRecord, PushSubscription, SuspendAfter};
use crate::Clock;

/// The longest `Retry-After` honoured: a receiver asking for more is retried after this.
pub const MAX_RETRY_AFTER_MS: u64 = 15 * 60_000;
/// A suspended subscription's probes: one batch at most this often.
pub const PROBE_EVERY_MS: i64 = 60_000;
/// How an attempt ended, as flow control sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx (partial batch failures included: the endpoint took the attempt).
    Delivered,
    /// A 429, a 503 or a timeout: the endpoint is overloaded. Halves the limit.
    Slowed { retry_after_ms: Option<u64> },
    /// Any other failure (another status, no connection).
    Failed,
}

impl Outcome {
    /// The outcome of `answer`.
    pub fn of(answer: &Answer) -> Self {
        match answer {
            Answer::Status { status, .. } if (200..300).contains(status) => Self::Delivered,
            Answer::Status { status: 429 | 503, retry_after_ms, .. } => {
                Self::Slowed { retry_after_ms: *retry_after_ms }
            }
            Answer::Status { .. } => Self::Failed,
            Answer::TimedOut => Self::Slowed { retry_after_ms: None },
            Answer::Failed(_) => Self::Failed,
        }
    }
}

/// A change of the endpoint's health, to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Suspended,
    Resumed,
}

/// What the gate says before a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Receive and send a batch.
    Go,
    /// Nothing before this time (a `Retry-After`, or the next probe).
    Wait { until_ms: i64 },
    /// As many batches are out as the limit allows.
    Full,
}

impl FlowRecord {
    /// The limit in use under `ceiling` (`push.max_in_flight`): 1 while suspended.
    pub fn limit(&self, ceiling: u32) -> u32 {
        let ceiling = ceiling.max(1);
        if self.suspended_since_ms.is_some() {
            return 1;
        }
        if self.limit == 0 {
            ceiling
        } else {
            self.limit.clamp(1, ceiling)
        }
    }

    /// Whether a batch may start at `now` with `in_flight` out.
    pub fn gate(&self, now: i64, in_flight: u32, ceiling: u32) -> Gate {
        if let Some(until_ms) = self.not_before_ms.filter(|t| *t > now) {
            return Gate::Wait { until_ms };
        }
        if in_flight >= self.limit(ceiling) {
            return Gate::Full;
        }
        match (self.suspended_since_ms, self.last_probe_ms) {
            (Some(_), Some(probe)) if probe + PROBE_EVERY_MS > now => Gate::Wait { until_ms: probe + PROBE_EVERY_MS },
            _ => Gate::Go,
        }
    }

    /// Takes an attempt's outcome at `now`: what changed in the endpoint's health, if anything.
    pub fn settle(&mut self, outcome: Outcome, now: i64, ceiling: u32, suspend: SuspendAfter) -> Option<Health> {
        let limit = self.limit(ceiling);
        if self.suspended_since_ms.is_some() {
            self.last_probe_ms = Some(now);
        }
        let retry_after = match outcome {
            Outcome::Delivered => {
                self.limit = (limit + 1).min(ceiling.max(1));
                self.failures = 0;
                self.failing_since_ms = None;
                self.last_probe_ms = None;
                return self.suspended_since_ms.take().map(|_| Health::Resumed);
            }
            Outcome::Slowed { retry_after_ms } => {
                self.limit = (limit / 2).max(1);
                retry_after_ms
            }
            Outcome::Failed => None,
        };
        if let Some(ms) = retry_after {
            let until = now.saturating_add(ms.min(MAX_RETRY_AFTER_MS) as i64);
            self.not_before_ms = Some(self.not_before_ms.map_or(until, |t| t.max(until)));
        }
        self.failures = self.failures.saturating_add(1);
        let since = *self.failing_since_ms.get_or_insert(now);
        let dead = self.failures >= suspend.failures && now.saturating_sub(since) >= suspend.spanning_ms as i64;
        if dead && self.suspended_since_ms.is_none() {
            self.suspended_since_ms = Some(now);
            self.last_probe_ms = Some(now);
            return Some(Health::Suspended);
        }
        None
    }
}

/// One subscription's record in a dispatcher's memory.
#[derive(Debug, Default)]
struct Entry {
    record: FlowRecord,
    in_flight: u32,
}

/// Every subscription's flow state in one dispatcher, with the batches it has out. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Flows {
    entries: Arc<Mutex<HashMap<u64, Entry>>>,
    /// Told when a batch ends or a record changes: waiting workers look again.
    changed: Arc<Notify>,
}

/// A slot of a subscription's in-flight limit, held from the receive to the settle of a batch.
#[derive(Debug)]
pub struct Permit {
    flows: Flows,
    sub_id: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(e) = self.flows.lock().get_mut(&self.sub_id) {
            e.in_flight = e.in_flight.saturating_sub(1);
        }
        self.flows.changed.notify_waiters();
    }
}

impl Flows {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adopts the stored record of subscription `sub_id` (a run that just claimed it), unless
    /// batches of it are out here (then this dispatcher's own is newer).
    pub fn adopt(&self, sub_id: u64, stored: Option<FlowRecord>) {
        let mut entries = self.lock();
        let entry = entries.entry(sub_id).or_default();
        if entry.in_flight == 0 {
            entry.record = stored.unwrap_or_default();
        }
    }

    /// The record of subscription `sub_id` as this dispatcher knows it.
    pub fn record(&self, sub_id: u64) -> FlowRecord {
        self.lock().get(&sub_id).map(|e| e.record.clone()).unwrap_or_default()
    }

    /// The in-flight limit in use for subscription `sub_id` under `ceiling`.
    pub fn limit(&self, sub_id: u64, ceiling: u32) -> u32 {
        self.lock().get(&sub_id).map_or(ceiling.max(1), |e| e.record.limit(ceiling))
    }

    /// A slot if a batch may start at `now`, else what it waits for.
    pub fn try_start(&self, sub_id: u64, now: i64, ceiling: u32) -> Result<Permit, Gate> {
        let mut entries = self.lock();
        let entry = entries.entry(sub_id).or_default();
        match entry.record.gate(now, entry.in_flight, ceiling) {
            Gate::Go => {
                entry.in_flight += 1;
                Ok(Permit { flows: self.clone(), sub_id })
            }
            wait => Err(wait),
        }
    }

    /// Waits for a slot on `clock` (`None` once `stop` turns true).
    pub async fn start(
        &self,
        sub_id: u64,
        ceiling: u32,
        clock: &dyn Clock,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Permit> {
        loop {
            let changed = self.changed.notified();
            let gate = match self.try_start(sub_id, clock.now_ms(), ceiling) {
                Ok(permit) => return Some(permit),
                Err(gate) => gate,
            };
            if *stop.borrow() {
                return None;
            }
            let wait = async {
                match gate {
                    Gate::Wait { until_ms } => clock.sleep_until(until_ms).await,
                    _ => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait => {}
                () = changed => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    }

    /// Takes an attempt's outcome for subscription `sub_id`: what changed in its health.
    pub fn settle(
        &self,
        sub_id: u64,
        outcome: Outcome,
        now: i64,
        ceiling: u32,
        suspend: SuspendAfter,
    ) -> Option<Health> {
        let health = self.lock().entry(sub_id).or_default().record.settle(outcome, now, ceiling, suspend);
        self.changed.notify_waiters();
        health
    }

    /// Takes the answer of an attempt of `sub` at `now`; logs and counts a change of its
    /// endpoint's health.
    pub fn settle_answer(&self, sub: &PushSubscription, answer: &Answer, now: i64) {
        let outcome = Outcome::of(answer);
        let health = self.settle(sub.id, outcome, now, sub.push.max_in_flight, sub.push.suspend_after());
        let labels = [("topic", sub.topic.clone()), ("subscription", sub.name.clone())];
        match health {
            Some(Health::Suspended) => {
                let failures = self.record(sub.id).failures;
                tracing::warn!(topic = %sub.topic, subscription = %sub.name, failures, "push subscription suspended: its endpoint keeps failing; probing once a minute");
                metrics::counter!(crate::metrics::PUSH_SUSPENSIONS, &labels).increment(1);
            }
            Some(Health::Resumed) => {
                tracing::info!(topic = %sub.topic, subscription = %sub.name, "push subscription resumed: a probe was delivered");
                metrics::counter!(crate::metrics::PUSH_RESUMPTIONS, &labels).increment(1);
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests;
