//! Dead-lettering: leases that ran out of deliveries move their messages to the
//! subscription's dead-letter queue, exactly once each.

use super::*;

impl Queues {
    /// Moves the messages of leases that ran out of deliveries (up to a write's worth) to
    /// the dead-letter queue: exactly once, as each lease's version is checked. A message
    /// whose dead letter is there already (a seek back delivered it again: `seek.rs`) keeps
    /// that one, and counts once.
    pub(super) async fn bury(
        &self,
        sub: &Sub,
        partition: u32,
        state: &QueueState,
        dead: &[usize],
        now: i64,
    ) -> Result<Result<(), StorageError>, Error> {
        let mut ops = Vec::new();
        let mut buried = 0;
        for &i in dead {
            let lease = &state.leases[i];
            // Each lease costs its own op besides one per message.
            let room = DEAD_PER_WRITE.saturating_sub(ops.len() + 1);
            if room == 0 {
                break;
            }
            let msgs: Vec<LeaseMsg> = lease.record.msgs.iter().take(room).copied().collect();
            let offsets: HashSet<u64> = msgs.iter().map(|m| m.offset).collect();
            ops.push(shrink(lease, &offsets));
            for m in &msgs {
                if self.store().get(&dead_key(sub.record.id, partition, m.offset)).await?.is_some() {
                    continue;
                }
                buried += 1;
                let dead = DeadRecord {
                    reason: DEAD_REASON.into(),
                    receives: lease.record.receives,
                    first_ms: m.first_ms,
                    last_ms: lease.record.delivered_ms,
                    dead_ms: now,
                    key: m.key,
                };
                ops.push(WriteOp::create(dead_key(sub.record.id, partition, m.offset), layout::encode(&dead)));
            }
        }
        let cursor = CursorRecord { dead: state.cursor.dead + buried, ..state.cursor };
        let ops = super::inline::fold(state, sub.record.id, partition, Some(cursor), ops, Vec::new());
        if let Err(e) = self.write_on(sub, ops).await? {
            return Ok(Err(e));
        }
        tracing::info!(topic = %sub.topic.name, subscription = %sub.name, partition, messages = buried, "dead-lettered");
        sub.count(crate::metrics::DEAD_LETTERED, buried);
        Ok(Ok(()))
    }

    /// Buries every dead lease of a partition (before the DLQ is listed or redriven).
    pub(super) async fn bury_all(&self, sub: &Sub, partition: u32) -> Result<(), Error> {
        let _turn = self.local.turns.wait(sub.record.id, partition).await;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let now = self.now();
            let state = self.load(sub, partition, None).await?;
            let dead = super::take::dead_leases(&state, now, sub.record.spec.max_receive_count);
            if dead.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.bury(sub, partition, &state, &dead, now).await? {
                self.lost_race(e, &mut attempt).await?;
            }
        }
        Err(contended(&sub.name))
    }
}
