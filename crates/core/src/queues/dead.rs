//! Dead letters: listing, deleting one, redriving and purging.

use super::*;
use crate::Code;

/// Dead letters per page, at most (and at least one).
const MAX_DEAD_LETTERS_PER_PAGE: usize = 1000;

/// A dead letter id, `<partition>-<offset>`, of a partition `topic` has: one it does not
/// have is `partition_not_found`, as on every route that names a partition.
fn parse_dead_id(id: &str, topic: &TopicConfig) -> Result<(u32, u64), Error> {
    let (partition, offset) = id
        .split_once('-')
        .and_then(|(p, o)| Some((p.parse::<u32>().ok()?, o.parse::<u64>().ok()?)))
        .ok_or_else(|| {
            Error::invalid(Code::InvalidDeadLetterId, format!("'{id}' is not a dead letter id (<partition>-<offset>)"))
        })?;
    if partition >= topic.spec.partitions {
        return Err(Error::PartitionNotFound { topic: topic.name.clone(), partition });
    }
    Ok((partition, offset))
}

impl Queues {
    /// A page of dead letters in (partition, offset) order, after the id `after`.
    pub async fn dead_letters(
        &self,
        topic: &str,
        name: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, Error> {
        if !(1..=MAX_DEAD_LETTERS_PER_PAGE).contains(&limit) {
            let message = format!("limit must be between 1 and {MAX_DEAD_LETTERS_PER_PAGE}");
            return Err(Error::invalid(Code::InvalidLimit, message));
        }
        let sub = self.sub(topic, name).await?;
        let after = after.map(|id| parse_dead_id(id, &sub.topic)).transpose()?;
        let heads = topics::heads(self.store(), &sub.topic).await?;
        let mut entries = Vec::new();
        for p in after.map_or(0, |(p, _)| p)..sub.topic.spec.partitions {
            self.bury_all(&sub, p).await?;
            let mut query = Query::all(dlq_pk(sub.record.id, p), limit - entries.len());
            if let Some((_, offset)) = after.filter(|(after_p, _)| *after_p == p) {
                query.after = Some(keys::offset_sk(offset));
            }
            let page = self.store().query(&query).await?;
            let mut found = Vec::with_capacity(page.items.len());
            for item in &page.items {
                let record: DeadRecord = layout::decode("dead letter", &item.value)?;
                found.push((keys::offset_of(&item.key.sk)?, record));
            }
            let head = heads.get(p as usize).map(|(h, _)| *h).unwrap_or_default();
            let offsets: Vec<u64> = found.iter().map(|(o, _)| *o).collect();
            let mut events = self.events_at(&sub.topic, p, &offsets, head).await?;
            for (offset, record) in found {
                entries.push(DeadLetter {
                    id: format!("{p}-{offset}"),
                    reason: record.reason,
                    receive_count: record.receives,
                    first_receive_ms: record.first_ms,
                    last_receive_ms: record.last_ms,
                    dead_ms: record.dead_ms,
                    event: events.remove(&offset),
                    partition: p,
                    offset,
                });
            }
            if entries.len() >= limit {
                let next = entries.last().map(|e| e.id.clone());
                return Ok(DeadLetterPage { entries, next });
            }
        }
        Ok(DeadLetterPage { entries, next: None })
    }

    /// Deletes one dead letter for good.
    pub async fn delete_dead_letter(&self, topic: &str, name: &str, id: &str) -> Result<(), Error> {
        let sub = self.sub(topic, name).await?;
        let (partition, offset) = parse_dead_id(id, &sub.topic)?;
        let key = dead_key(sub.record.id, partition, offset);
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let Some(item) = self.store().get(&key).await? else {
                return Err(Error::NotFound {
                    code: Code::DeadLetterNotFound,
                    message: format!("subscription '{name}' has no dead letter '{id}'"),
                });
            };
            let state = self.load(&sub, partition, Some(1)).await?;
            let cursor = CursorRecord { dead: state.cursor.dead.saturating_sub(1), ..state.cursor };
            let mut ops = vec![
                WriteOp::Delete { key: key.clone(), expect: Expect::Version(item.version) },
                removed_mark(&sub, partition, offset, self.now()),
            ];
            ops.push(state.cursor_write(sub.record.id, partition, cursor, &ops));
            match self.store().write(ops).await {
                Ok(()) => return Ok(()),
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }

    /// Moves up to `max` dead letters (all if `None`) back into the queue, visible now,
    /// their receive counts reset.
    pub async fn redrive(&self, topic: &str, name: &str, max: Option<u64>) -> Result<u64, Error> {
        let redriven = self.drain_dead(topic, name, max, true).await?;
        if redriven > 0 {
            let labels = [("topic", topic.to_owned()), ("subscription", name.to_owned())];
            metrics::counter!(crate::metrics::REDRIVEN, &labels).increment(redriven);
        }
        Ok(redriven)
    }

    /// Deletes every dead letter; answers how many.
    pub async fn purge_dead_letters(&self, topic: &str, name: &str) -> Result<u64, Error> {
        self.drain_dead(topic, name, None, false).await
    }

    async fn drain_dead(&self, topic: &str, name: &str, max: Option<u64>, requeue: bool) -> Result<u64, Error> {
        let sub = self.sub(topic, name).await?;
        let mut left = max.unwrap_or(u64::MAX);
        let mut done = 0;
        for p in 0..sub.topic.spec.partitions {
            // Due dead leases first: describe counts them as dead already, so a purge (or a
            // redrive) of the dead-letter queue takes them too.
            self.bury_all(&sub, p).await?;
            let mut attempts = 0;
            while left > 0 {
                let now = self.now();
                // A purge leaves a mark for each (two ops a dead letter).
                let per_write = if requeue { DEAD_PER_WRITE } else { DEAD_PER_WRITE / 2 };
                let want = left.min(per_write as u64) as usize;
                let page = self.store().query(&Query::all(dlq_pk(sub.record.id, p), want)).await?;
                if page.items.is_empty() {
                    break;
                }
                let state = self.load(&sub, p, Some(1)).await?;
                let n = page.items.len() as u64;
                let mut msgs = Vec::with_capacity(page.items.len());
                let mut ops = Vec::with_capacity(page.items.len() + 2);
                for item in page.items {
                    let record: DeadRecord = layout::decode("dead letter", &item.value)?;
                    let offset = keys::offset_of(&item.key.sk)?;
                    msgs.push(LeaseMsg { offset, first_ms: 0, key: record.key });
                    ops.push(WriteOp::Delete { key: item.key, expect: Expect::Version(item.version) });
                    if !requeue {
                        ops.push(removed_mark(&sub, p, offset, now));
                    }
                }
                if requeue {
                    let nonce = self.nonce();
                    let lease = LeaseRecord {
                        nonce,
                        receives: 0,
                        held_until: None,
                        delivered_ms: now,
                        msgs,
                        redriven: true,
                        scheduled: false,
                    };
                    ops.push(WriteOp::create(lease_key(sub.record.id, p, now, nonce), layout::encode(&lease)));
                }
                let cursor = CursorRecord { dead: state.cursor.dead.saturating_sub(n), ..state.cursor };
                ops.push(state.cursor_write(sub.record.id, p, cursor, &ops));
                match self.store().write(ops).await {
                    Ok(()) => {
                        done += n;
                        left -= n;
                        // Contention is counted per write: a long redrive is not cut short by
                        // the races its earlier writes lost.
                        attempts = 0;
                    }
                    Err(e) => {
                        self.lost_race(e, &mut attempts).await?;
                        if attempts >= MAX_ATTEMPTS {
                            return Err(contended(name));
                        }
                    }
                }
            }
        }
        if done > 0 {
            let what = if requeue { "redriven" } else { "purged" };
            tracing::info!(topic = %sub.topic.name, subscription = name, messages = done, "dead letters {what}");
        }
        Ok(done)
    }
}

/// The mark of the dead letter at `offset`, removed at `now` without being redriven: an
/// ack of its receipts then answers stale (a redriven message needs none: it is in a lease
/// until a later delivery settles it).
fn removed_mark(sub: &Sub, partition: u32, offset: u64, now: i64) -> WriteOp {
    WriteOp::Put {
        key: removed_dead_key(sub.record.id, partition, offset),
        value: layout::encode(&RemovedDeadRecord { removed_ms: now }),
        expires_at_ms: Some(now.saturating_add(REMOVED_DEAD_TTL_MS)),
        expect: Expect::Any,
    }
}
