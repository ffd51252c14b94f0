//! What a push dispatcher needs of the queues: the push subscriptions of a topic, receives
//! that clients may not make (a push subscription answers them `409 push_subscription`),
//! and the delivery counts kept beside the queue.

use super::*;
use crate::Code;

/// A push subscription, as a dispatcher reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSubscription {
    pub topic: String,
    pub name: String,
    /// Changes when the subscription is re-created: a dispatcher's work on the old one stops.
    pub id: u64,
    pub spec: SubscriptionSpec,
    pub push: PushSpec,
}

impl Sub {
    /// Refuses a client's receive from a push subscription.
    pub(super) fn check_pull(&self) -> Result<(), Error> {
        if self.record.spec.push.is_some() {
            return Err(Error::Conflict {
                code: Code::PushSubscription,
                message: format!(
                    "subscription '{}' of topic '{}' is a push subscription: its dispatcher delivers its messages",
                    self.name, self.topic.name
                ),
            });
        }
        Ok(())
    }
}

impl Queues {
    /// The push subscriptions of a topic that deliver: a paused one is left out, so its
    /// dispatcher skips it (its takes would grant nothing anyway, `pause.rs`).
    pub async fn push_subscriptions(&self, topic: &str) -> Result<Vec<PushSubscription>, Error> {
        let subs = self.live_subs(topic).await?.into_iter().filter(|s| s.record.state.is_active());
        Ok(subs
            .filter_map(|s| {
                let push = s.record.spec.push.clone()?;
                Some(PushSubscription { topic: s.topic.name, name: s.name, id: s.record.id, spec: s.record.spec, push })
            })
            .collect())
    }

    /// Whether `sub` is paused now (`pause.rs`), so that a dispatcher's worker on it ends; a
    /// subscription that cannot be read is not (the worker's next receive finds out why).
    pub async fn is_paused(&self, sub: &PushSubscription) -> bool {
        self.sub(&sub.topic, &sub.name).await.is_ok_and(|s| s.record.id == sub.id && !s.record.state.is_active())
    }

    /// The subscription a dispatcher's `sub` names, as it is now: `SubscriptionNotFound`
    /// once it was deleted or re-created, or its settings changed since the dispatcher read
    /// them (`patch.rs`: its work on the old settings ends, and its next look at the
    /// subscriptions starts it on the new ones, so no delivery that starts after a change
    /// answered uses the old target or limits). `acks` of the old batch are written first.
    async fn current_for_push(&self, sub: &PushSubscription, acks: &[String]) -> Result<Sub, Error> {
        let current = self.sub(&sub.topic, &sub.name).await?;
        if current.record.id != sub.id {
            return Err(current.not_found());
        }
        if current.record.spec != sub.spec {
            if !acks.is_empty() {
                self.settle_on(&current, acks, Settle::Ack, Some(crate::metrics::ACKED)).await?;
            }
            return Err(current.not_found());
        }
        Ok(current)
    }

    /// A receive on behalf of the push dispatcher of `sub` (and only while it is the same
    /// subscription with the same settings: `SubscriptionNotFound` once it was deleted,
    /// re-created or changed since the dispatcher listed it). Its wait
    /// ends early, with nothing, once `stop` turns true (a dispatcher shutting down): what
    /// a take already wrote is answered, never dropped.
    pub async fn receive_for_push(
        &self,
        sub: &PushSubscription,
        req: &ReceiveRequest,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        Self::check_receive(req)?;
        let current = self.current_for_push(sub, &[]).await?;
        self.receive_until(&current, req, stop).await
    }

    /// [`Self::receive_for_push`] carrying the acks of the dispatcher's previous batch
    /// (`receipts`), as a pull worker's `ack_and_receive`: acks of one partition whose
    /// leases are inline ride on the take's write there, others are written before the
    /// receive; either way before it waits. Stale receipts (a window that ended, or acks
    /// already written) are passed over, as a separate ack's would be, so a retry may
    /// carry them again. A receive that fails may leave the acks unwritten. Its wait
    /// ends early, with nothing, once `stop` turns true.
    pub async fn ack_and_receive_for_push(
        &self,
        sub: &PushSubscription,
        receipts: &[String],
        req: &ReceiveRequest,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        if receipts.is_empty() {
            return self.receive_for_push(sub, req, stop).await;
        }
        Self::check_receive(req)?;
        let current = self.current_for_push(sub, receipts).await?;
        let receipt_key = self.receipt_key().await?;
        let acked = |results: &[Result<Option<String>, ReceiptError>]| results.iter().filter(|r| r.is_ok()).count();
        match Riding::new(&current, receipts, receipt_key) {
            Some(mut riding) => {
                let received = self.receive_riding(&current, req, &mut riding, stop).await;
                if let Some(results) = &riding.results {
                    current.count(crate::metrics::ACKED, acked(results) as u64);
                }
                received
            }
            None => {
                self.settle_on(&current, receipts, Settle::Ack, Some(crate::metrics::ACKED)).await?;
                self.receive_until(&current, req, stop).await
            }
        }
    }

    /// When a receive for `sub` may next find something to take (at or before now: now), or
    /// `None` when nothing would come due without a publish: the earliest of a partition
    /// whose cursor is behind its head and each partition's earliest lease (a redelivery, a
    /// scheduled message), and with a `rate` not before its bucket holds a batch. Read only
    /// (the subscription, the heads, each partition's cursor and earliest lease, the
    /// bucket), so a sweep finding nothing due writes nothing and a run staying for the
    /// time learns it. It may answer a time at which a filter, a delay or a key then passes
    /// the messages over, never a later time than a receive would take something at.
    pub async fn push_next_due(&self, sub: &PushSubscription) -> Result<Option<i64>, Error> {
        let current = self.sub(&sub.topic, &sub.name).await?;
        if current.record.id != sub.id {
            return Err(current.not_found());
        }
        // Paused: its takes grant nothing until a resume, which lists it again.
        if !current.record.state.is_active() {
            return Ok(None);
        }
        let now = self.now();
        let heads = topics::heads(self.store(), &current.topic).await?;
        let mut next: Option<i64> = None;
        for (p, (head, _)) in heads.iter().enumerate() {
            let state = self.load(&current, p as u32, Some(2)).await?;
            if state.cursor.next.max(head.start) < head.next {
                next = Some(now);
                break;
            }
            if let Some(due) = state.leases.iter().map(|l| l.due).min() {
                next = min_time(next, due.max(now));
                if due <= now {
                    break;
                }
            }
        }
        match next {
            Some(at) => Ok(Some(at.max(self.rate_ready_at(&current, sub.push.max_batch as usize).await?))),
            None => Ok(None),
        }
    }

    /// When something this process's receives for `sub` saw comes due, as their hints
    /// recorded it (no read): a hint, possibly stale (taken meanwhile by another process).
    pub fn push_next_due_seen(&self, sub: &PushSubscription) -> Option<i64> {
        self.local.turns.next_due(sub.id)
    }

    /// Adds a dispatcher's counts to the subscription's (one conditional write; not if the
    /// subscription was deleted meanwhile, whose purge would miss the item).
    pub async fn add_push_stats(&self, sub: &PushSubscription, add: &PushStatsRecord) -> Result<(), Error> {
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let current = self.sub(&sub.topic, &sub.name).await?;
            if current.record.id != sub.id {
                return Err(current.not_found());
            }
            let key = push_stats_key(sub.id);
            let item = self.store().get(&key).await?;
            let mut stats: PushStatsRecord = match &item {
                Some(item) => layout::decode("push stats", &item.value)?,
                None => PushStatsRecord::default(),
            };
            stats.attempted += add.attempted;
            stats.succeeded += add.succeeded;
            stats.failed += add.failed;
            if add.last_error.is_some() {
                stats.last_error.clone_from(&add.last_error);
                stats.last_error_ms = add.last_error_ms;
            }
            if add.flow.is_some() {
                stats.flow.clone_from(&add.flow);
            }
            let ops = vec![
                WriteOp::Check {
                    key: crate::keys::subscription_key(current.topic.id, &current.name),
                    expect: Expect::Version(current.version),
                },
                WriteOp::replace(key, layout::encode(&stats), item.map(|i| i.version)),
            ];
            match self.store().write(ops).await {
                Ok(()) => return Ok(()),
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(&sub.name))
    }

    /// The flow state last stored for `sub` (`crate::push::flow`), if any: one read.
    pub async fn push_flow(&self, sub: &PushSubscription) -> Result<Option<FlowRecord>, Error> {
        let Some(item) = self.store().get(&push_stats_key(sub.id)).await? else { return Ok(None) };
        Ok(layout::decode::<PushStatsRecord>("push stats", &item.value)?.flow)
    }

    /// The subscription's delivery counts, if it is a push subscription.
    pub(super) async fn push_stats(&self, sub: &Sub) -> Result<Option<PushStatsRecord>, Error> {
        if sub.record.spec.push.is_none() {
            return Ok(None);
        }
        let item = self.store().get(&push_stats_key(sub.record.id)).await?;
        Ok(Some(match item {
            Some(item) => layout::decode("push stats", &item.value)?,
            None => PushStatsRecord::default(),
        }))
    }
}
