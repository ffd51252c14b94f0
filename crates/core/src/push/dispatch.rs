//! The dispatcher: per push subscription, up to `max_in_flight` workers that each receive
//! a batch, deliver it and settle it by the answer. Delivery counts are kept in memory and
//! added to the subscription's in the store by [`Dispatcher::flush_stats`]. A drain (a
//! dispatcher function's run) drives a subscription only under its run lease
//! ([`super::lease`]), so runs in many instances share the subscriptions out, each driven
//! by one run at a time.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::flow::Flows;
use super::lease::{self, Claim, Release, Renewal, RunLease};
use super::{judge, webhook, DEFAULT_BACKOFF, GONE};
use crate::mutation::Mutation;
use crate::ports::deliver::{Deliver, Delivery, Destination, Wakes};
use crate::queues::{secret_key, Message, PushStatsRecord, PushSubscription, PushTarget, Queues, ReceiveRequest};
use crate::trace::TraceContext;
use crate::Error;

mod drain;
mod stay;

pub use stay::{Wake, WAKE_STAYS_MS};

/// A receive holds its batch this long past the attempt's timeout: settling takes a moment.
const SETTLE_MARGIN_MS: u64 = 5_000;
/// How long an embedded worker's receive waits for a message (woken at once by a commit).
const IDLE_WAIT_MS: u64 = 5_000;
/// How often the embedded dispatcher looks for new push subscriptions and adds counts.
const SCAN_MS: u64 = 1_000;
/// How long a drain's subscription that found nothing waits before it looks again while
/// others still deliver (the stream's mapping polls its shard every 250 ms).
const REDRIVE_MS: u64 = 250;
/// A worker's pause after an error of the store.
const ERROR_PAUSE_MS: u64 = 1_000;

/// What [`Dispatcher::drain`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    pub deliveries: u64,
    pub messages: u64,
    pub failed_messages: u64,
}

/// Which topics a dispatcher run looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topics {
    /// Every topic: a sweep for redeliveries come due while nothing was published.
    All,
    /// These, by name.
    Named(Vec<String>),
    /// These, by id: the topics whose partition heads moved (a wake from the table's stream).
    Ids(BTreeSet<u64>),
}

impl Topics {
    /// The topics of the partition heads among the partition keys of changed items; other
    /// keys are ignored.
    pub fn of_changed<'a>(pks: impl IntoIterator<Item = &'a str>) -> Self {
        Self::Ids(pks.into_iter().filter_map(crate::keys::topic_of_heads_pk).collect())
    }
}

impl Drained {
    fn add(&mut self, other: Drained) {
        self.deliveries += other.deliveries;
        self.messages += other.messages;
        self.failed_messages += other.failed_messages;
    }
}

/// Whether `e` says the subscription (or its topic) was deleted: its work ends there, and
/// a run that met it still succeeds.
fn gone(e: &Error) -> bool {
    matches!(e, Error::SubscriptionNotFound { .. } | Error::TopicNotFound { .. })
}

/// Waits for every task of `work`: what they delivered, and the first error among them.
async fn join(mut work: JoinSet<(Drained, Option<Error>)>) -> (Drained, Option<Error>) {
    let (mut total, mut first_error) = (Drained::default(), None);
    while let Some(done) = work.join_next().await {
        match done {
            Ok((d, error)) => {
                total.add(d);
                first_error = first_error.or(error);
            }
            Err(e) => tracing::error!(error = %e, "push worker failed"),
        }
    }
    (total, first_error)
}

/// An attempt's timeout: the subscription's, cut to what is left of the batch's window
/// (ending at `window_end`); None once it has ended.
fn attempt_timeout_ms(timeout_ms: u64, window_end: i64, now: i64) -> Option<u64> {
    let left = u64::try_from(window_end.saturating_sub(now)).ok().filter(|left| *left > 0)?;
    Some(timeout_ms.min(left))
}

/// How long one attempt holds its batch: the target's timeout and settling.
fn attempt_ms(sub: &PushSubscription) -> u64 {
    sub.push.timeout_ms + SETTLE_MARGIN_MS
}

/// Delivers push subscriptions' messages through a [`Deliver`] port. Clones share state.
#[derive(Clone)]
pub struct Dispatcher {
    queues: Queues,
    deliver: Arc<dyn Deliver>,
    /// Counts not yet added to the store, by subscription id.
    stats: Arc<Mutex<BTreeMap<u64, (PushSubscription, PushStatsRecord)>>>,
    /// Each subscription's in-flight limit, `Retry-After` and health.
    flows: Flows,
    /// Where a stream run hands over due times it cannot stay for (`stay.rs`), if anywhere.
    wakes: Option<Arc<dyn Wakes>>,
    /// The wakes this process asked for, by topic: the time each was asked for.
    woken: Arc<Mutex<HashMap<String, i64>>>,
}

impl Dispatcher {
    pub fn new(queues: Queues, deliver: Arc<dyn Deliver>) -> Self {
        let (stats, flows, woken) = (Arc::default(), Flows::default(), Arc::default());
        Self { queues, deliver, stats, flows, wakes: None, woken }
    }

    /// This dispatcher, its stream runs handing over through `wakes` the due times they
    /// cannot stay for (on AWS: a run of the dispatcher function invoked for that time).
    pub fn with_wakes(mut self, wakes: Arc<dyn Wakes>) -> Self {
        self.wakes = Some(wakes);
        self
    }

    /// The time on the dispatcher's clock.
    pub fn now_ms(&self) -> i64 {
        self.queues.log().clock().now_ms()
    }

    /// Receives up to a batch for `sub`, waiting up to `wait_ms`, held for the attempt.
    pub async fn receive(&self, sub: &PushSubscription, wait_ms: u64) -> Result<Vec<Message>, Error> {
        self.receive_until(sub, wait_ms, None).await
    }

    /// As [`Self::receive`], its wait ended (with nothing) once `stop` turns true.
    async fn receive_until(
        &self,
        sub: &PushSubscription,
        wait_ms: u64,
        stop: Option<&watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        self.queues.receive_for_push(sub, &self.receive_request(sub, wait_ms), stop).await
    }

    /// A receive of up to a batch, held for the attempt.
    fn receive_request(&self, sub: &PushSubscription, wait_ms: u64) -> ReceiveRequest {
        let visibility = sub.spec.visibility_timeout_ms.max(attempt_ms(sub));
        ReceiveRequest { max_messages: sub.push.max_batch as usize, wait_ms, visibility_timeout_ms: Some(visibility) }
    }

    /// Sends a received batch and settles it: acks what the target took; releases the
    /// rest, visible again after their backoff (at once for those out of deliveries,
    /// which the next receive moves to the DLQ). Answers how many failed.
    pub async fn deliver(&self, sub: &PushSubscription, messages: Vec<Message>) -> Result<usize, Error> {
        let (failed, acks) = self.deliver_settling(sub, messages).await?;
        // A stale receipt here means the window ended first: the message is due again anyway.
        if !acks.is_empty() {
            self.queues.ack(&sub.topic, &sub.name, &acks).await?;
        }
        Ok(failed)
    }

    /// As [`Self::deliver`], but answers the receipts to ack instead of acking them: a
    /// drain's next receive carries them (one write for both).
    async fn deliver_settling(
        &self,
        sub: &PushSubscription,
        messages: Vec<Message>,
    ) -> Result<(usize, Vec<String>), Error> {
        if messages.is_empty() {
            return Ok((0, Vec::new()));
        }
        // The attempt ends by the end of the batch's window: a batch answered late in it (a
        // slow receive, a process paused between receive and delivery) would otherwise be
        // pushed again by another dispatcher, its key's next batch too, while this attempt
        // is still under way. A window already over: the batch is due again, not ours.
        let window_end = messages.iter().map(|m| m.held_until_ms).min().unwrap_or_default();
        let Some(timeout_ms) = attempt_timeout_ms(sub.push.timeout_ms, window_end, self.now_ms()) else {
            tracing::warn!(topic = %sub.topic, subscription = %sub.name, "push batch's window ended before its attempt");
            return Ok((0, Vec::new()));
        };
        let body = webhook::body(&sub.topic, &sub.name, &messages);
        let id = webhook::delivery_id(sub.id, &messages);
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        let secrets = sub.push.signing_secrets(self.now_ms());
        if !secrets.is_empty() {
            let keys = secrets.into_iter().map(secret_key).collect::<Result<Vec<_>, _>>();
            let keys = keys.map_err(|e| Error::Corrupt(format!("stored push secret: {e}")))?;
            let timestamp = self.now_ms().div_euclid(1000);
            headers.push(("webhook-id".into(), id.clone()));
            headers.push(("webhook-timestamp".into(), timestamp.to_string()));
            headers.push(("webhook-signature".into(), webhook::sign_with_each(&keys, &id, timestamp, &body)));
        }
        headers.extend(TraceContext::of_batch(&messages).map(|c| c.headers()).unwrap_or_default());
        let destination = match &sub.push.target {
            PushTarget::Url { url, .. } => Destination::Url(url.clone()),
            PushTarget::Lambda { function } => Destination::Lambda(function.clone()),
        };
        let delivery = Delivery { destination, headers, body, timeout_ms };
        if crate::mutation::skipped(Mutation::PushHoldDuringAttempt) {
            let all: Vec<String> = messages.iter().map(|m| m.receipt.clone()).collect();
            self.queues.ack(&sub.topic, &sub.name, &all).await?;
        }
        let answer = self.deliver.deliver(&delivery).await;
        let ids: Vec<String> =
            messages.iter().map(|m| webhook::message_id(&sub.topic, m.event.partition, m.event.offset)).collect();
        self.flows.settle_answer(sub, &answer, self.now_ms());
        let verdict = judge(&answer, &ids);
        if let Some(error) = &verdict.error {
            tracing::warn!(topic = %sub.topic, subscription = %sub.name, delivery = %id, error, "push delivery failed");
        }
        self.count(sub, &verdict.failed, messages.len(), verdict.error.clone());
        if verdict.gone {
            let receipts: Vec<String> = messages.into_iter().map(|m| m.receipt).collect();
            for chunk in receipts.chunks(crate::queues::MAX_BURIED_PER_CALL) {
                self.queues.dead_letter(&sub.topic, &sub.name, chunk, GONE).await?;
            }
            return Ok((verdict.failed.len(), Vec::new()));
        }
        let mut acks = Vec::new();
        let mut releases: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (m, id) in messages.into_iter().zip(&ids) {
            if !verdict.failed.contains(id) {
                acks.push(m.receipt);
                continue;
            }
            let delay = if m.receive_count >= sub.spec.max_receive_count {
                0
            } else {
                let backoff = sub.spec.redelivery_backoff.as_ref().unwrap_or(&DEFAULT_BACKOFF);
                verdict.retry_after_ms.unwrap_or_else(|| backoff.delay_ms(m.receive_count))
            };
            releases.entry(delay.min(crate::queues::MAX_RELEASE_DELAY_MS)).or_default().push(m.receipt);
        }
        if crate::mutation::skipped(Mutation::PushAck) {
            acks.clear();
        }
        for (delay, receipts) in releases {
            self.queues.nack(&sub.topic, &sub.name, &receipts, delay).await?;
        }
        Ok((verdict.failed.len(), acks))
    }

    fn count(&self, sub: &PushSubscription, failed: &HashSet<String>, sent: usize, error: Option<String>) {
        let now = self.now_ms();
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let (_, s) = stats.entry(sub.id).or_insert_with(|| (sub.clone(), PushStatsRecord::default()));
        s.attempted += 1;
        if failed.len() == sent {
            s.failed += 1;
        } else {
            s.succeeded += 1;
        }
        if error.is_some() {
            s.last_error = error;
            s.last_error_ms = Some(now);
        }
        s.flow = Some(self.flows.record(sub.id));
    }

    /// Adds the counts kept since the last flush to the store.
    pub async fn flush_stats(&self) {
        let pending: Vec<(PushSubscription, PushStatsRecord)> =
            std::mem::take(&mut *self.stats.lock().unwrap_or_else(|p| p.into_inner())).into_values().collect();
        for (sub, add) in pending {
            match self.queues.add_push_stats(&sub, &add).await {
                Err(e) if !gone(&e) => tracing::warn!(subscription = %sub.name, error = %e, "push counts not saved"),
                _ => {}
            }
        }
    }

    /// The push subscriptions of `topics`: one query per topic, and one for the list of
    /// topics unless they are named.
    pub async fn subscriptions(&self, topics: &Topics) -> Result<Vec<PushSubscription>, Error> {
        let names: Vec<String> = match topics {
            Topics::Named(names) => names.clone(),
            Topics::Ids(ids) if ids.is_empty() => Vec::new(),
            Topics::Ids(ids) => {
                let listed = self.queues.log().list_topics().await?.into_iter();
                listed.filter(|t| ids.contains(&t.id)).map(|t| t.name).collect()
            }
            Topics::All => self.queues.log().list_topics().await?.into_iter().map(|t| t.name).collect(),
        };
        let mut subs = Vec::new();
        for topic in names {
            match self.queues.push_subscriptions(&topic).await {
                Ok(found) => subs.extend(found),
                Err(Error::TopicNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(subs)
    }

    /// Runs until `stop` turns true: the embedded dispatcher. Looks for push subscriptions
    /// every second and gives each its workers; a worker stops when its subscription is
    /// deleted. On stop, receives end their wait at once, and what they took and deliveries
    /// under way are delivered and settled.
    pub async fn run(&self, stop: watch::Receiver<bool>) {
        self.run_on(&Topics::All, stop).await;
    }

    /// As [`Self::run`], for the push subscriptions of `topics` only.
    pub async fn run_on(&self, topics: &Topics, mut stop: watch::Receiver<bool>) {
        let mut workers: HashMap<u64, JoinSet<()>> = HashMap::new();
        loop {
            match self.subscriptions(topics).await {
                Ok(subs) => {
                    workers.retain(|_, set| {
                        while set.try_join_next().is_some() {}
                        !set.is_empty()
                    });
                    for sub in subs {
                        if !workers.contains_key(&sub.id) {
                            self.adopt_flow(&sub).await;
                        }
                        workers.entry(sub.id).or_insert_with(|| {
                            let mut set = JoinSet::new();
                            for _ in 0..sub.push.max_in_flight {
                                let (this, sub, stop) = (self.clone(), sub.clone(), stop.clone());
                                set.spawn(async move { this.work(sub, stop).await });
                            }
                            set
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "push dispatcher could not list subscriptions"),
            }
            self.flush_stats().await;
            let pause = self.queues.log().clock().sleep(SCAN_MS);
            tokio::select! {
                _ = pause => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        for (_, mut set) in workers {
            while set.join_next().await.is_some() {}
        }
        self.flush_stats().await;
    }

    /// One worker of the embedded dispatcher. On stop, a receive under way ends its wait but
    /// not its take: what it took is delivered and settled, not dropped with its receive
    /// counts spent (it would have been held, undelivered, until its window ended). A
    /// batch's acks ride on the worker's next receive (one write for both, as a drain's and
    /// a pull worker's `ack` field), which writes them before it waits; they are written on
    /// their own instead when the worker would wait for a slot, and when it ends.
    async fn work(&self, sub: PushSubscription, mut stop: watch::Receiver<bool>) {
        let mut acks: Vec<String> = Vec::new();
        loop {
            let outcome = self.cycle(&sub, &mut acks, &mut stop).await;
            match outcome {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if gone(&e) => return,
                Err(e) if *stop.borrow() => {
                    tracing::warn!(topic = %sub.topic, subscription = %sub.name, error = %e, "push worker stopped");
                }
                Err(e) => {
                    tracing::warn!(topic = %sub.topic, subscription = %sub.name, error = %e, "push worker paused");
                    self.queues.log().clock().sleep(ERROR_PAUSE_MS).await;
                }
            }
            if *stop.borrow() {
                break;
            }
        }
        if let Err(e) = self.ack_alone(&sub, &mut acks).await {
            tracing::warn!(topic = %sub.topic, subscription = %sub.name, error = %e, "push acks not written");
        }
    }

    /// One cycle of a worker: a slot, a receive carrying `acks` (the last batch's), the
    /// delivery, whose acks are left in `acks` for the next. `false`: the worker ends
    /// (stopped, or its subscription paused). Acks a failed receive carried are kept for
    /// the next: written twice, an ack finds its lease gone and is passed over.
    async fn cycle(
        &self,
        sub: &PushSubscription,
        acks: &mut Vec<String>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, Error> {
        let clock = self.queues.log().clock().clone();
        // Received only once it can be sent: waiting spends no receive count, and holds no
        // acks (a `Retry-After` or a suspension's probe may be minutes away).
        let _slot = match self.flows.try_start(sub.id, clock.now_ms(), sub.push.max_in_flight) {
            Ok(slot) => slot,
            Err(_) => {
                self.ack_alone(sub, acks).await?;
                match self.flows.start(sub.id, sub.push.max_in_flight, clock.as_ref(), stop).await {
                    Some(slot) => slot,
                    None => return Ok(false),
                }
            }
        };
        let req = self.receive_request(sub, IDLE_WAIT_MS);
        let messages = self.queues.ack_and_receive_for_push(sub, acks, &req, Some(stop)).await?;
        acks.clear();
        // Paused since listed: the worker ends (its takes grant nothing); a resume lists it again.
        if messages.is_empty() && self.queues.is_paused(sub).await {
            return Ok(false);
        }
        let (_, settled) = self.deliver_settling(sub, messages).await?;
        *acks = settled;
        Ok(true)
    }

    /// Writes `acks` on their own, if any (a stale one, whose window ended, is passed over).
    async fn ack_alone(&self, sub: &PushSubscription, acks: &mut Vec<String>) -> Result<(), Error> {
        if !acks.is_empty() {
            self.queues.ack(&sub.topic, &sub.name, acks).await?;
            acks.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::attempt_timeout_ms;

    #[test]
    fn an_attempt_never_outlasts_its_batchs_window() {
        let cases = [
            // (timeout, window end, now) -> timeout of the attempt
            ((3_000, 20_000, 10_000), Some(3_000)),
            ((3_000, 12_000, 10_000), Some(2_000)),
            ((3_000, 10_001, 10_000), Some(1)),
            ((3_000, 10_000, 10_000), None),
            ((3_000, 9_000, 10_000), None),
        ];
        for ((timeout, end, now), want) in cases {
            assert_eq!(attempt_timeout_ms(timeout, end, now), want, "timeout {timeout}, window end {end}, now {now}");
        }
    }
}
