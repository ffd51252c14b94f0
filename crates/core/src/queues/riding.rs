//! Acks riding on a receive (`ack_and_receive`, JetStream's "ack next"): a worker's whole
//! loop in one request. Acks of one partition whose leases are inline in its cursor item
//! are applied to the state that partition's take reads and carried by its write
//! (`inline::ack`); any others are settled on their own before the receive answers.

use super::*;
use crate::metrics;

impl Queues {
    /// Acks `receipts`, then receives: a worker's whole loop in one request (JetStream's
    /// "ack next"). Everything is checked before anything is written. Acks of one partition
    /// whose leases are inline ride on the receive's write on that partition (one write for
    /// both); others, or if that take writes nothing, are written before the receive
    /// answers or waits. A receive that fails may leave them unwritten: a retry acks them.
    pub async fn ack_and_receive(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        req: &ReceiveRequest,
    ) -> Result<(Vec<Result<(), ReceiptError>>, Vec<Message>), Error> {
        Self::check_receive(req)?;
        let mut sub = self.hot_sub(topic, name).await?;
        let receipt_key = self.receipt_key().await?;
        let (acks, received) = match Riding::new(&sub, receipts, receipt_key) {
            Some(mut riding) => {
                let received: Result<Vec<Message>, Error> =
                    async { on_fresh_sub!(self, sub, pull, self.receive_riding(&sub, req, &mut riding, None).await) }
                        .await;
                // Counted once written, even if the receive (or a retry's check) then failed.
                if let Some(results) = &riding.results {
                    sub.count(metrics::ACKED, results.iter().filter(|r| r.is_ok()).count() as u64);
                }
                (riding.results.unwrap_or_default(), received?)
            }
            None => {
                let acked = Some(metrics::ACKED);
                let acks = on_fresh_sub!(self, sub, pull, self.settle_on(&sub, receipts, Settle::Ack, acked).await)?;
                (acks, on_fresh_sub!(self, sub, pull, self.receive_on(&sub, req).await)?)
            }
        };
        Ok((acks.into_iter().map(|r| r.map(|_| ())).collect(), received))
    }

    /// A receive carrying `riding`'s acks: answered only once they are written, and
    /// written before it waits. Its wait ends early once `stop` turns true (as
    /// `receive_until`'s).
    pub(super) async fn receive_riding(
        &self,
        sub: &Sub,
        req: &ReceiveRequest,
        riding: &mut Riding,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        if riding.results.is_none() && riding.receipts.iter().any(|(_, r)| r.sub_id != sub.record.id) {
            // Checked against a cached subscription since replaced (this is the request
            // going again on the fresh one): the receipts are another subscription's.
            riding.results = Some(vec![Err(ReceiptError::Invalid); riding.receipts.len()]);
        }
        let messages = self.take_messages(sub, req, Some(riding), stop).await?;
        sub.count(metrics::RECEIVED, messages.len() as u64);
        Ok(messages)
    }
}

/// Acks riding on a receive (`ack_and_receive`), all of one partition, and once written
/// their answers.
pub(super) struct Riding {
    pub(super) partition: u32,
    pub(super) receipts: Vec<(usize, Receipt)>,
    pub(super) results: Option<Vec<Result<Option<String>, ReceiptError>>>,
}

impl Riding {
    /// `None` unless every receipt is valid, of `sub`, and all of one partition: any other
    /// acks are settled on their own, before the receive.
    pub(super) fn new(sub: &Sub, receipts: &[String], key: &ReceiptKey) -> Option<Self> {
        if receipts.is_empty() || receipts.len() > MAX_RECEIPTS {
            return None;
        }
        let decoded: Option<Vec<(usize, Receipt)>> = receipts
            .iter()
            .enumerate()
            .map(|(i, text)| Receipt::decode(text, key).filter(|r| r.sub_id == sub.record.id).map(|r| (i, r)))
            .collect();
        let receipts = decoded?;
        let partition = receipts[0].1.partition;
        let one = receipts.iter().all(|(_, r)| r.partition == partition) && partition < sub.topic.spec.partitions;
        one.then_some(Riding { partition, receipts, results: None })
    }

    /// Written with a take's write: every receipt's message was in an inline lease.
    pub(super) fn written(&mut self) {
        self.results = Some(vec![Ok(None); self.receipts.len()]);
    }
}

impl Queues {
    /// Writes `riding`'s acks on their own (the ordinary settle), in `turn` (on their partition).
    pub(super) async fn settle_riding(
        &self,
        sub: &Sub,
        turn: &Turn,
        riding: &mut Riding,
        key: &ReceiptKey,
    ) -> Result<(), Error> {
        let mut results = vec![Err(ReceiptError::Invalid); riding.receipts.len()];
        self.settle_partition(sub, turn, &riding.receipts, Settle::Ack, key, &mut results).await?;
        riding.results = Some(results);
        Ok(())
    }

    /// Writes the acks a take's read carried (applied to its inline leases in `state`)
    /// alone, when the take writes nothing else. `false`: the write lost a race (an attempt
    /// counted); read again.
    pub(super) async fn acks_alone(
        &self,
        sub: &Sub,
        partition: u32,
        state: &QueueState,
        riding: &mut Option<&mut Riding>,
        attempt: &mut usize,
    ) -> Result<bool, Error> {
        let ops = super::inline::fold(state, sub.record.id, partition, None, Vec::new(), Vec::new());
        match self.write_on_deferred(sub, ops).await? {
            Ok(()) => {
                written(riding, true);
                Ok(true)
            }
            Err(e) => {
                self.lost_race(e, attempt).await?;
                Ok(false)
            }
        }
    }
}

/// After a write that `carried` the acks riding: they are written.
pub(super) fn written(riding: &mut Option<&mut Riding>, carried: bool) {
    if let Some(acks) = riding.take_if(|_| carried) {
        acks.written();
    }
}
