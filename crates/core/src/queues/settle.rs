//! Settling receipts: ack, nack (with backoff) and visibility changes, per partition in
//! one write, each receipt checked against the lease that holds it.

use super::*;

/// The lease holding a receipt's message under the receipt's delivery (same nonce and
/// receive count), by sort key, with the message.
fn holder(leases: &BTreeMap<String, Lease>, r: &Receipt) -> Option<(String, LeaseMsg)> {
    // The lease the receipt names first: it is where the message is unless it moved.
    let hinted = leases.get(&lease_sk(r.due, r.nonce));
    hinted.into_iter().chain(leases.values()).find_map(|l| {
        let same_delivery = l.record.nonce == r.nonce && l.record.receives == r.receives;
        let msg = l.record.msgs.iter().find(|m| m.offset == r.offset);
        msg.filter(|_| same_delivery).map(|m| (l.key.sk.clone(), *m))
    })
}

impl Queues {
    /// Acks: each message is removed for good, unless its receipt is stale.
    pub async fn ack(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        let results = self.settle(topic, name, receipts, Settle::Ack).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Releases held messages: visible again after `delay_ms`, their receive counts kept.
    pub async fn nack(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        delay_ms: u64,
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        if delay_ms > MAX_RELEASE_DELAY_MS {
            return Err(Error::invalid(
                "invalid_delay",
                format!("delay_ms must be at most {MAX_RELEASE_DELAY_MS} (12 h)"),
            ));
        }
        let at = self.now() + delay_ms as i64;
        let results = self.settle(topic, name, receipts, Settle::Release { at }).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Moves the end of held messages' visibility window to now + `visibility_timeout_ms`
    /// (0: visible now, as a release). Answers the receipt to use from now on (the old one
    /// keeps working, at the cost of a lookup), none after a release.
    pub async fn change_visibility(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        visibility_timeout_ms: u64,
    ) -> Result<Vec<VisibilityResult>, Error> {
        if visibility_timeout_ms > MAX_VISIBILITY_TIMEOUT_MS {
            return Err(Error::invalid(
                "invalid_visibility_timeout",
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        let now = self.now();
        let settle = if visibility_timeout_ms == 0 {
            Settle::Release { at: now }
        } else {
            Settle::Hold { until: now + visibility_timeout_ms as i64 }
        };
        self.settle(topic, name, receipts, settle).await
    }

    /// Applies `action` to each receipt's message; answers per receipt (with the new
    /// receipt of a held message).
    async fn settle(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        action: Settle,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        let sub = self.sub(topic, name).await?;
        self.settle_on(&sub, receipts, action).await
    }

    pub(super) async fn settle_on(
        &self,
        sub: &Sub,
        receipts: &[String],
        action: Settle,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        if receipts.len() > MAX_RECEIPTS {
            return Err(Error::invalid("too_many_receipts", format!("at most {MAX_RECEIPTS} receipts per request")));
        }
        let receipt_key = self.receipt_key().await?;
        let mut results: Vec<Result<Option<String>, ReceiptError>> = vec![Err(ReceiptError::Invalid); receipts.len()];
        let mut by_partition: BTreeMap<u32, Vec<(usize, Receipt)>> = BTreeMap::new();
        for (i, text) in receipts.iter().enumerate() {
            match Receipt::decode(text, &receipt_key) {
                Some(r) if r.sub_id == sub.record.id && r.partition < sub.topic.spec.partitions => {
                    by_partition.entry(r.partition).or_default().push((i, r));
                }
                _ => {}
            }
        }
        for (partition, receipts) in by_partition {
            self.settle_partition(sub, partition, &receipts, action, &receipt_key, &mut results).await?;
        }
        Ok(results)
    }

    /// Settles one partition's receipts, a write's worth of leases at a time.
    async fn settle_partition(
        &self,
        sub: &Sub,
        partition: u32,
        receipts: &[(usize, Receipt)],
        action: Settle,
        receipt_key: &[u8; 32],
        results: &mut [Result<Option<String>, ReceiptError>],
    ) -> Result<(), Error> {
        let pk = queue_pk(sub.record.id, partition);
        // Keyed, a lease moved to an earlier time could hide from a receiver reading the
        // leases meanwhile: such moves also bump the cursor, which keyed receives check.
        let bump_cursor = sub.record.spec.ordering == Ordering::Key && !matches!(action, Settle::Ack);
        let mut pending: Vec<(usize, Receipt)> = receipts.to_vec();
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt >= MAX_ATTEMPTS {
                return Err(contended(&sub.name));
            }
            // The leases the receipts name, by key; the whole partition if one is not
            // where its receipt says (a visibility change moved it) or after a lost race.
            let mut leases: BTreeMap<String, Lease> = BTreeMap::new();
            let mut state = None;
            let mut everything = attempt > 0;
            if !everything {
                let mut hinted: Vec<(i64, u64)> = pending.iter().map(|(_, r)| (r.due, r.nonce)).collect();
                hinted.sort_unstable();
                hinted.dedup();
                for (due, nonce) in hinted {
                    let key = Key::new(pk.clone(), lease_sk(due, nonce));
                    if let Some(item) = self.store().get(&key).await? {
                        let record: LeaseRecord = layout::decode("lease", &item.value)?;
                        leases.insert(key.sk.clone(), Lease { key, due, version: item.version, record });
                    }
                }
                everything = pending.iter().any(|(_, r)| holder(&leases, r).is_none());
            }
            if everything {
                // A receipt whose lease is not where it says: the whole partition, as of one
                // moment, so a lease a concurrent write was moving cannot hide from a torn read
                // and make a valid receipt answer stale.
                let (loaded, settled) = self.snapshot(sub, partition).await?;
                if !settled {
                    attempt += 1;
                    continue;
                }
                leases = loaded.leases.iter().map(|l| (l.key.sk.clone(), l.clone())).collect();
                state = Some(loaded);
            } else if bump_cursor {
                state = Some(self.load(sub, partition, Some(1)).await?);
            }
            // This round: receipts in order until their messages' leases fill a write.
            let mut round: Vec<Option<(String, LeaseMsg)>> = Vec::new();
            let mut removed: BTreeMap<String, HashSet<u64>> = BTreeMap::new();
            for (_, r) in &pending {
                let found = holder(&leases, r);
                if let Some((sk, _)) = &found {
                    if !removed.contains_key(sk) && removed.len() >= LEASES_PER_WRITE {
                        break;
                    }
                    removed.entry(sk.clone()).or_default().insert(r.offset);
                }
                round.push(found);
            }
            let mut ops: Vec<WriteOp> = removed.iter().map(|(sk, offsets)| shrink(&leases[sk], offsets)).collect();
            // Where the removed messages go: nowhere (ack), a released lease, or a held one.
            let mut new_receipts: HashMap<u64, String> = HashMap::new();
            let mut moved: BTreeMap<String, LeaseRecord> = BTreeMap::new();
            for (sk, offsets) in &removed {
                let from = &leases[sk];
                let msgs: Vec<LeaseMsg> =
                    from.record.msgs.iter().filter(|m| offsets.contains(&m.offset)).copied().collect();
                let receives = from.record.receives;
                let (due, nonce, held_until) = match action {
                    Settle::Ack => continue,
                    Settle::Release { at } => (at, self.nonce(), None),
                    Settle::Hold { until } => {
                        (until.saturating_add(sub.record.spec.backoff_ms(receives)), from.record.nonce, Some(until))
                    }
                };
                if held_until.is_some() {
                    for m in &msgs {
                        let receipt =
                            Receipt { sub_id: sub.record.id, partition, offset: m.offset, nonce, due, receives };
                        new_receipts.insert(m.offset, receipt.encode(receipt_key));
                    }
                }
                let lease = moved.entry(lease_sk(due, nonce)).or_insert_with(|| LeaseRecord {
                    nonce,
                    receives,
                    held_until,
                    delivered_ms: from.record.delivered_ms,
                    msgs: Vec::new(),
                    redriven: false,
                });
                lease.msgs.extend(msgs);
            }
            for (sk, mut lease) in moved {
                let key = Key::new(pk.clone(), sk.clone());
                // Moving within one lease (same time) or into a lease already read: merged
                // with what stays there. Into one not read, the create fails and we re-read.
                let (stays, version) = match leases.get(&sk) {
                    Some(existing) => {
                        let gone = removed.get(&sk);
                        let stays: Vec<LeaseMsg> = existing
                            .record
                            .msgs
                            .iter()
                            .filter(|m| gone.is_none_or(|g| !g.contains(&m.offset)))
                            .copied()
                            .collect();
                        (stays, Some(existing.version))
                    }
                    None => (Vec::new(), None),
                };
                lease.msgs.extend(stays);
                lease.msgs.sort_by_key(|m| m.offset);
                ops.retain(|op| op.key() != &key);
                ops.push(WriteOp::replace(key, layout::encode(&lease), version));
            }
            if let (true, false, Some(state)) = (bump_cursor, ops.is_empty(), &state) {
                ops.push(state.cursor_write(sub.record.id, partition, state.cursor));
            }
            if !ops.is_empty() {
                if let Err(e) = self.store().write(ops).await {
                    self.lost_race(e, &mut attempt).await?;
                    continue;
                }
            }
            for ((i, r), found) in pending.iter().zip(&round) {
                results[*i] = match found {
                    Some(_) => Ok(new_receipts.get(&r.offset).cloned()),
                    None => Err(ReceiptError::Stale),
                };
            }
            pending.drain(..round.len());
            attempt = 0;
        }
        Ok(())
    }
}
