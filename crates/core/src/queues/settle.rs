//! Settling receipts: ack, nack (with backoff) and visibility changes, per partition in
//! one write, each receipt checked against the lease that holds it.

use super::*;
use crate::Code;

impl Queues {
    /// Acks: each message is removed for good, unless its receipt is stale.
    pub async fn ack(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        let results = self.settle(topic, name, receipts, Settle::Ack, Some(crate::metrics::ACKED)).await?;
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
                Code::InvalidDelay,
                format!("delay_ms must be at most {MAX_RELEASE_DELAY_MS} (12 h)"),
            ));
        }
        let at = self.now() + delay_ms as i64;
        let results = self.settle(topic, name, receipts, Settle::Release { at }, Some(crate::metrics::NACKED)).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Moves held messages to the dead-letter queue at once, for `reason` (a push target
    /// answered `410 Gone`: it will never take them), at most [`MAX_BURIED_PER_CALL`] at a
    /// time (each is an item of its own, in the write that takes it from its lease).
    pub async fn dead_letter(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        reason: &'static str,
    ) -> Result<Vec<Result<(), ReceiptError>>, Error> {
        if receipts.len() > MAX_BURIED_PER_CALL {
            return Err(Error::invalid(
                Code::TooManyReceipts,
                format!("at most {MAX_BURIED_PER_CALL} receipts per dead-lettering"),
            ));
        }
        let bury = Settle::Bury { at: self.now(), reason };
        let results = self.settle(topic, name, receipts, bury, Some(crate::metrics::DEAD_LETTERED)).await?;
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
                Code::InvalidVisibilityTimeout,
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        let now = self.now();
        let settle = if visibility_timeout_ms == 0 {
            Settle::Release { at: now }
        } else {
            Settle::Hold { until: now + visibility_timeout_ms as i64 }
        };
        self.settle(topic, name, receipts, settle, None).await
    }

    /// Applies `action` to each receipt's message; answers per receipt (with the new
    /// receipt of a held message). Messages settled are added to `counter`, if any.
    async fn settle(
        &self,
        topic: &str,
        name: &str,
        receipts: &[String],
        action: Settle,
        counter: Option<&'static str>,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        let mut sub = self.hot_sub(topic, name).await?;
        on_fresh_sub!(self, sub, self.settle_on(&sub, receipts, action, counter).await)
    }

    pub(super) async fn settle_on(
        &self,
        sub: &Sub,
        receipts: &[String],
        action: Settle,
        counter: Option<&'static str>,
    ) -> Result<Vec<Result<Option<String>, ReceiptError>>, Error> {
        if receipts.len() > MAX_RECEIPTS {
            return Err(Error::invalid(Code::TooManyReceipts, format!("at most {MAX_RECEIPTS} receipts per request")));
        }
        let receipt_key = self.receipt_key().await?;
        let mut results: Vec<Result<Option<String>, ReceiptError>> = vec![Err(ReceiptError::Invalid); receipts.len()];
        let mut by_partition: BTreeMap<u32, Vec<(usize, Receipt)>> = BTreeMap::new();
        for (i, text) in receipts.iter().enumerate() {
            match Receipt::decode(text, receipt_key) {
                Some(r) if r.sub_id == sub.record.id && r.partition < sub.topic.spec.partitions => {
                    by_partition.entry(r.partition).or_default().push((i, r));
                }
                // Perhaps a subscription of that name created since this one was cached.
                Some(_) if sub.guarded => return Err(sub.not_found()),
                _ => {}
            }
        }
        let mut outcome = Ok(());
        for (partition, receipts) in by_partition {
            let turn = self.local.turns.wait(sub.record.id, partition).await;
            outcome = self.settle_partition(sub, &turn, &receipts, action, receipt_key, &mut results).await;
            if outcome.is_err() {
                break;
            }
        }
        // Counted even when a later partition failed: what was written stays settled.
        if let Some(counter) = counter {
            sub.count(counter, results.iter().filter(|r| r.is_ok()).count() as u64);
        }
        outcome.map(|()| results)
    }

    /// Settles the receipts of the partition `turn` is on, a write's worth of leases at a
    /// time: reads the leases the receipts name, decides in [`settle_round`], writes.
    pub(super) async fn settle_partition(
        &self,
        sub: &Sub,
        turn: &Turn,
        receipts: &[(usize, Receipt)],
        action: Settle,
        receipt_key: &ReceiptKey,
        results: &mut [Result<Option<String>, ReceiptError>],
    ) -> Result<(), Error> {
        // Keyed, a lease moved to an earlier time could hide from a receiver reading the
        // leases meanwhile: such moves also bump the cursor, which keyed receives check.
        let bump_cursor = sub.record.spec.ordering == Ordering::Key && !matches!(action, Settle::Ack);
        let (mut pending, partition) = (receipts.to_vec(), turn.partition());
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt >= MAX_ATTEMPTS {
                return Err(contended(&sub.name));
            }
            let Some((leases, state)) = self.holders(sub, partition, &pending, attempt > 0).await? else {
                attempt += 1;
                continue;
            };
            let at = Target { sub, partition, receipt_key };
            let mut round = settle_round(&at, &leases, &pending, action, || self.nonce());
            let cursor = match action {
                // The DLQ's count moves with its letters, in the same write.
                Settle::Bury { .. } => {
                    let kept = self.keep_dead_letters(sub, partition, &mut round.ops).await?;
                    let buried = round.found.iter().filter(|f| f.is_some()).count() - kept;
                    Some(CursorRecord { dead: state.cursor.dead + buried as u64, ..state.cursor })
                }
                _ => Some(state.cursor).filter(|_| bump_cursor),
            };
            if !round.ops.is_empty() {
                // Leases a settle creates stay items: a moved lease keeps its nonce, and its
                // new key may name an item this settle did not read, whose create must fail.
                // A keyed settle rewrites the cursor: a keyed receiver that read the leases
                // before this write then fails its own.
                round.ops = super::inline::fold(&state, sub.record.id, partition, cursor, round.ops, Vec::new());
                // An ack or a release lost to a power cut only delivers its messages again,
                // or later (at least once); a visibility change lost so would end a window
                // its holder was told runs longer, so it is durable before it is answered.
                let written = match action {
                    Settle::Ack | Settle::Release { .. } => self.write_on_deferred(sub, round.ops).await?,
                    Settle::Hold { .. } | Settle::Bury { .. } => self.write_on(sub, round.ops).await?,
                };
                if let Err(e) = written {
                    self.lost_race(e, &mut attempt).await?;
                    continue;
                }
            }
            let unheld: Vec<u64> =
                pending.iter().zip(&round.found).filter(|(_, f)| f.is_none()).map(|(r, _)| r.1.offset).collect();
            let done = self.done_already(sub, partition, action, (&leases, &state), &unheld).await?;
            for ((i, r), found) in pending.iter().zip(&round.found) {
                results[*i] = match found {
                    Some(_) => Ok(round.new_receipts.get(&r.offset).cloned()),
                    None if done.contains(&r.offset) => Ok(None),
                    None => Err(ReceiptError::Stale),
                };
            }
            pending.drain(..round.found.len());
            attempt = 0;
        }
        Ok(())
    }

    /// Of `offsets`, whose receipts no lease holds under their delivery, those whose messages
    /// are already where `action` would put them, as after an earlier attempt of the same
    /// request whose answer was lost: an ack's message acked (in no lease, below the cursor,
    /// not dead-lettered, not removed by retention), a release's in a lease nobody holds.
    /// The others' receipts are stale: their messages were delivered again, released or
    /// dead-lettered since, and this action did not happen. `leases` is the whole partition,
    /// as of one moment, with its `state`.
    async fn done_already(
        &self,
        sub: &Sub,
        partition: u32,
        action: Settle,
        (leases, state): (&BTreeMap<String, Lease>, &QueueState),
        offsets: &[u64],
    ) -> Result<HashSet<u64>, Error> {
        let next = state.cursor.next;
        // Below where the queue was last sought, a message in no lease may have been passed
        // over rather than acked (`seek.rs`): not done.
        let passed = |o: u64| matches!(action, Settle::Ack) && o < state.marks.sought;
        let mut done: HashSet<u64> =
            offsets.iter().copied().filter(|&o| placed_already(action, leases, next, o) && !passed(o)).collect();
        if matches!(action, Settle::Ack) && !done.is_empty() {
            // In no lease are also a message dead-lettered (the DLQ tells), one whose dead
            // letter was deleted or purged (its mark tells), and one retention removed
            // (below the log start: acked or not, it cannot tell, so not done).
            let log_start = self.log.offset_of(&sub.topic, partition, OffsetQuery::Earliest).await?;
            for offset in done.clone() {
                let id = sub.record.id;
                if offset < log_start
                    || self.store().get(&dead_key(id, partition, offset)).await?.is_some()
                    || self.store().get(&removed_dead_key(id, partition, offset)).await?.is_some()
                {
                    done.remove(&offset);
                }
            }
            // A message moves between a lease and the DLQ (buried, redriven) in a write of
            // the cursor item: unchanged since the leases were read, the DLQ read above saw
            // the same moment. Changed, nothing is claimed done (stale is the safe answer).
            if !done.is_empty() && self.load(sub, partition, Some(1)).await?.cursor_version != state.cursor_version {
                done.clear();
            }
        }
        Ok(done)
    }

    /// Drops from a burying write the dead letters already there (a seek back delivered
    /// their messages again: `seek.rs`), so each keeps the letter it has and counts once;
    /// answers how many. A letter made meanwhile fails the write's create, and the next
    /// round sees it.
    async fn keep_dead_letters(&self, sub: &Sub, partition: u32, ops: &mut Vec<WriteOp>) -> Result<usize, Error> {
        let dlq = dead_key(sub.record.id, partition, 0).pk;
        let mut kept = HashSet::new();
        for key in ops.iter().map(WriteOp::key).filter(|k| k.pk == dlq) {
            if self.store().get(key).await?.is_some() {
                kept.insert(key.clone());
            }
        }
        ops.retain(|op| !kept.contains(op.key()));
        Ok(kept.len())
    }

    /// The leases the receipts name, by sort key; the whole partition (as of one moment)
    /// if one is not where its receipt says (a visibility change moved it) or `everything`
    /// (after a lost race). With the partition's state: its cursor item (and the leases
    /// inline in it) first, or the whole partition. `None`: the partition could not be
    /// read as of one moment; try again.
    async fn holders(
        &self,
        sub: &Sub,
        partition: u32,
        pending: &[(usize, Receipt)],
        mut everything: bool,
    ) -> Result<Option<(BTreeMap<String, Lease>, QueueState)>, Error> {
        let mut leases: BTreeMap<String, Lease> = BTreeMap::new();
        let mut state = None;
        if !everything {
            // The cursor item holds the leases kept inline: most receipts' are there.
            let cursor = self.load(sub, partition, Some(1)).await?;
            leases.extend(cursor.leases.iter().map(|l| (l.key.sk.clone(), l.clone())));
            state = Some(cursor);
            let elsewhere = |r: &&(usize, Receipt)| holder(&leases, &r.1).is_none();
            let mut hinted: Vec<(i64, u64)> = pending.iter().filter(elsewhere).map(|(_, r)| (r.due, r.nonce)).collect();
            hinted.sort_unstable();
            hinted.dedup();
            for (due, nonce) in hinted {
                if let Some(item) = self.store().get(&lease_key(sub.record.id, partition, due, nonce)).await? {
                    let lease = Lease::from_item(item)?;
                    leases.insert(lease.key.sk.clone(), lease);
                }
            }
            everything = pending.iter().any(|(_, r)| holder(&leases, r).is_none());
        }
        if everything {
            // A lease a concurrent write was moving cannot hide from a torn read and make a
            // valid receipt answer stale.
            let (loaded, settled) = self.snapshot(sub, partition).await?;
            if !settled {
                return Ok(None);
            }
            let leases = loaded.leases.iter().map(|l| (l.key.sk.clone(), l.clone())).collect();
            return Ok(Some((leases, loaded)));
        }
        Ok(state.map(|state| (leases, state)))
    }
}

/// Whether the message at `offset` is where `action` puts it, as far as the leases tell
/// (`next`: the partition's cursor): an ack's in no lease and received once (below the
/// cursor), a release's in a lease nobody holds that a release made (a redrive's lease is
/// not: its message was dead-lettered, not released). A hold is never done by another.
fn placed_already(action: Settle, leases: &BTreeMap<String, Lease>, next: u64, offset: u64) -> bool {
    let mut holding = leases.values().filter(|l| l.record.msgs.iter().any(|m| m.offset == offset));
    match action {
        Settle::Ack => offset < next && holding.next().is_none(),
        Settle::Release { .. } => holding.next().is_some_and(|l| l.record.held_until.is_none() && !l.record.redriven),
        Settle::Hold { .. } | Settle::Bury { .. } => false,
    }
}

/// The dead letter of `m`, taken from lease `from` at `now` for `reason`.
fn bury(at: &Target<'_>, from: &Lease, m: &LeaseMsg, now: i64, reason: &str) -> WriteOp {
    let dead = DeadRecord {
        reason: reason.to_owned(),
        receives: from.record.receives,
        first_ms: m.first_ms,
        last_ms: from.record.delivered_ms,
        dead_ms: now,
        key: m.key,
    };
    WriteOp::create(dead_key(at.sub.record.id, at.partition, m.offset), layout::encode(&dead))
}

/// One round of a settle: the receipts found, in order, and the write that applies them.
struct Round<'a> {
    /// Per pending receipt of this round, in order: its lease's sort key and message, or
    /// `None` (stale). Receipts past the round wait for the next one.
    found: Vec<Option<(&'a str, LeaseMsg)>>,
    ops: Vec<WriteOp>,
    /// The receipt to use from now on, by offset, for messages still held.
    new_receipts: HashMap<u64, String>,
}

/// Decides one round: receipts in order until their messages' leases fill a write; each
/// message removed from its lease and put nowhere (ack), in a released lease, or in a held
/// one (a new receipt). A move into a lease already read merges with what stays there;
/// into one not read, the create fails and the settle reads again. Release nonces are
/// drawn from `nonce`, in order.
fn settle_round<'a>(
    at: &Target<'_>,
    leases: &'a BTreeMap<String, Lease>,
    pending: &[(usize, Receipt)],
    action: Settle,
    mut nonce: impl FnMut() -> u64,
) -> Round<'a> {
    let (sub, partition) = (at.sub, at.partition);
    let mut found: Vec<Option<(&str, LeaseMsg)>> = Vec::new();
    let mut removed: BTreeMap<&str, HashSet<u64>> = BTreeMap::new();
    for (_, r) in pending {
        let holds = holder(leases, r);
        if let Some((sk, _)) = holds {
            if !removed.contains_key(sk) && removed.len() >= LEASES_PER_WRITE {
                break;
            }
            removed.entry(sk).or_default().insert(r.offset);
        }
        found.push(holds);
    }
    let mut ops: Vec<WriteOp> = removed.iter().map(|(sk, offsets)| shrink(&leases[*sk], offsets)).collect();
    let mut new_receipts: HashMap<u64, String> = HashMap::new();
    let mut moved: BTreeMap<String, LeaseRecord> = BTreeMap::new();
    for (sk, offsets) in &removed {
        let from = &leases[*sk];
        let msgs: Vec<LeaseMsg> = from.record.msgs.iter().filter(|m| offsets.contains(&m.offset)).copied().collect();
        let receives = from.record.receives;
        let (due, nonce, held_until) = match action {
            Settle::Ack => continue,
            Settle::Bury { at: now, reason } => {
                ops.extend(msgs.iter().map(|m| bury(at, from, m, now, reason)));
                continue;
            }
            Settle::Release { at } => (at, nonce(), None),
            Settle::Hold { until } => {
                (until.saturating_add(sub.record.spec.backoff_ms(receives)), from.record.nonce, Some(until))
            }
        };
        if held_until.is_some() {
            for m in &msgs {
                let receipt = Receipt { sub_id: sub.record.id, partition, offset: m.offset, nonce, due, receives };
                new_receipts.insert(m.offset, receipt.encode(at.receipt_key));
            }
        }
        let lease = moved.entry(lease_sk(due, nonce)).or_insert_with(|| LeaseRecord {
            nonce,
            receives,
            held_until,
            delivered_ms: from.record.delivered_ms,
            msgs: Vec::new(),
            redriven: false,
            scheduled: false,
        });
        lease.msgs.extend(msgs);
    }
    let pk = queue_pk(sub.record.id, partition);
    for (sk, mut lease) in moved {
        let key = Key::new(pk.clone(), sk.clone());
        let (stays, version) = match leases.get(&sk) {
            Some(existing) => {
                let gone = removed.get(sk.as_str());
                let stays =
                    existing.record.msgs.iter().filter(|m| gone.is_none_or(|g| !g.contains(&m.offset))).copied();
                (stays.collect(), Some(existing.version))
            }
            None => (Vec::new(), None),
        };
        lease.msgs.extend(stays);
        lease.msgs.sort_by_key(|m| m.offset);
        ops.retain(|op| op.key() != &key);
        ops.push(WriteOp::replace(key, layout::encode(&lease), version));
    }
    Round { found, ops, new_receipts }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held lease due at `due` with nonce `nonce`, delivered once, holding `offsets`.
    fn lease(due: i64, nonce: u64, offsets: &[u64]) -> Lease {
        let record = LeaseRecord {
            nonce,
            receives: 1,
            held_until: Some(due),
            delivered_ms: 0,
            msgs: offsets.iter().map(|&offset| LeaseMsg { offset, first_ms: 0, key: None }).collect(),
            redriven: false,
            scheduled: false,
        };
        Lease { key: lease_key(7, 0, due, nonce), due, version: 4, record, inline: false }
    }

    fn receipt(offset: u64, due: i64, nonce: u64) -> Receipt {
        Receipt { sub_id: 7, partition: 0, offset, nonce, due, receives: 1 }
    }

    fn by_sk(leases: &[Lease]) -> BTreeMap<String, Lease> {
        leases.iter().map(|l| (l.key.sk.clone(), l.clone())).collect()
    }

    fn round<'a>(leases: &'a BTreeMap<String, Lease>, pending: &[Receipt], action: Settle) -> Round<'a> {
        let sub = test_sub(1);
        let key = ReceiptKey::new(&[1u8; 32]);
        let at = Target { sub: &sub, partition: 0, receipt_key: &key };
        let pending: Vec<(usize, Receipt)> = pending.iter().copied().enumerate().collect();
        let mut nonces = 50..;
        settle_round(&at, leases, &pending, action, || nonces.next().unwrap_or(0))
    }

    fn shape(r: &Round) -> Vec<String> {
        r.ops
            .iter()
            .map(|op| match op {
                WriteOp::Delete { key, .. } => format!("delete {}", key.sk),
                WriteOp::Put { key, value, .. } => {
                    let l: LeaseRecord = layout::decode("lease", value).unwrap();
                    let offsets: Vec<u64> = l.msgs.iter().map(|m| m.offset).collect();
                    format!("put {} {offsets:?} held {}", key.sk, l.held_until.is_some())
                }
                WriteOp::Check { key, .. } => format!("check {}", key.sk),
            })
            .collect()
    }

    #[test]
    fn each_action_removes_the_message_and_puts_it_where_it_belongs() {
        let l = lease(100, 9, &[1, 2]);
        let (sk, moved_sk) = (lease_sk(100, 9), |due: i64, nonce: u64| lease_sk(due, nonce));
        let backoff = SubscriptionSpec::default().backoff_ms(1);
        let cases = [
            (Settle::Ack, vec![format!("put {sk} [2] held true")], false),
            (
                Settle::Release { at: 500 },
                vec![format!("put {sk} [2] held true"), format!("put {} [1] held false", moved_sk(500, 50))],
                false,
            ),
            (
                Settle::Hold { until: 900 },
                vec![format!("put {sk} [2] held true"), format!("put {} [1] held true", moved_sk(900 + backoff, 9))],
                true,
            ),
        ];
        for (action, ops, new_receipt) in cases {
            let leases = by_sk(std::slice::from_ref(&l));
            let r = round(&leases, &[receipt(1, 100, 9)], action);
            assert_eq!(shape(&r), ops, "{action:?}");
            assert_eq!(r.found.len(), 1);
            assert!(r.found[0].is_some());
            assert_eq!(r.new_receipts.contains_key(&1), new_receipt, "{action:?}");
        }
    }

    #[test]
    fn a_receipt_of_another_delivery_is_stale_and_writes_nothing() {
        let l = lease(100, 9, &[1]);
        // Same offset, another nonce: the message was received again since.
        let leases = by_sk(&[l]);
        let r = round(&leases, &[receipt(1, 100, 8)], Settle::Ack);
        assert_eq!(r.found, vec![None]);
        assert!(r.ops.is_empty());
    }

    #[test]
    fn a_moved_lease_is_found_by_its_nonce_wherever_it_is() {
        let l = lease(300, 9, &[1]);
        let leases = by_sk(&[l]);
        let r = round(&leases, &[receipt(1, 100, 9)], Settle::Ack);
        assert!(r.found[0].is_some());
        assert_eq!(shape(&r), vec![format!("delete {}", lease_sk(300, 9))]);
    }

    #[test]
    fn a_receipt_no_lease_holds_is_done_already_only_where_the_action_would_have_put_it() {
        let held = lease(100, 9, &[1]);
        let mut released = lease(200, 8, &[2]);
        released.record.held_until = None;
        let mut redriven = lease(300, 7, &[4]);
        (redriven.record.held_until, redriven.record.receives, redriven.record.redriven) = (None, 0, true);
        let leases = by_sk(&[held, released, redriven]);
        let (ack, release) = (Settle::Ack, Settle::Release { at: 0 });
        let cases = [
            (ack, 0, true, "in no lease, below the cursor: acked"),
            (ack, 1, false, "held by a later delivery"),
            (ack, 2, false, "released, waiting for a receiver"),
            (ack, 5, false, "at the cursor: never received"),
            (release, 2, true, "released, held by nobody"),
            (release, 1, false, "held by a later delivery"),
            (release, 0, false, "acked"),
            (release, 4, false, "dead-lettered and redriven, not released"),
            (Settle::Hold { until: 5 }, 2, false, "a hold is only this delivery's"),
        ];
        for (action, offset, done, why) in cases {
            assert_eq!(placed_already(action, &leases, 5, offset), done, "{action:?} of {offset}: {why}");
        }
    }

    #[test]
    fn a_round_stops_at_a_writes_worth_of_leases() {
        let leases: Vec<Lease> = (0..LEASES_PER_WRITE as u64 + 5).map(|i| lease(100 + i as i64, i, &[i])).collect();
        let pending: Vec<Receipt> =
            leases.iter().map(|l| receipt(l.record.msgs[0].offset, l.due, l.record.nonce)).collect();
        let leases = by_sk(&leases);
        let r = round(&leases, &pending, Settle::Ack);
        assert_eq!(r.found.len(), LEASES_PER_WRITE, "the rest wait for the next round");
        assert_eq!(r.ops.len(), LEASES_PER_WRITE);
    }
}
