//! Subscriptions: create (the start fixed at creation), list, delete (a tombstone whose
//! version only grows), and their settings' checks.

use super::*;
use crate::filter::Filter;
use crate::Code;

impl Backoff {
    /// The wait before redelivery after the `n`-th delivery expired.
    pub fn delay_ms(&self, n: u32) -> u64 {
        match self {
            Self::Steps(steps) => steps.get(n.saturating_sub(1) as usize).or(steps.last()).copied().unwrap_or(0),
            Self::Exponential { initial_ms, max_ms, multiplier } => {
                let mut delay = *initial_ms;
                for _ in 1..n {
                    if delay >= *max_ms {
                        break;
                    }
                    delay = delay.saturating_mul(u64::from(*multiplier));
                }
                delay.min(*max_ms)
            }
        }
    }
}

impl SubscriptionSpec {
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.visibility_timeout_ms > MAX_VISIBILITY_TIMEOUT_MS {
            return Err(Error::invalid(
                Code::InvalidVisibilityTimeout,
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        if !(1..=MAX_RECEIVE_COUNT).contains(&self.max_receive_count) {
            return Err(Error::invalid(
                Code::InvalidMaxReceiveCount,
                format!("max_receive_count must be between 1 and {MAX_RECEIVE_COUNT}"),
            ));
        }
        if self.delay_ms > MAX_DELAY_MS {
            return Err(Error::invalid(
                Code::InvalidDelay,
                format!("delay_ms must be at most {MAX_DELAY_MS} (15 min)"),
            ));
        }
        let backoff_ok = match &self.redelivery_backoff {
            None => true,
            Some(Backoff::Steps(steps)) => {
                !steps.is_empty() && steps.len() <= 100 && steps.iter().all(|s| *s <= MAX_RELEASE_DELAY_MS)
            }
            Some(Backoff::Exponential { initial_ms, max_ms, multiplier }) => {
                *initial_ms >= 1
                    && initial_ms <= max_ms
                    && *max_ms <= MAX_RELEASE_DELAY_MS
                    && (1..=100).contains(multiplier)
            }
        };
        if !backoff_ok {
            return Err(Error::invalid(
                Code::InvalidBackoff,
                format!(
                    "redelivery_backoff_ms is a list of 1 to 100 delays or {{initial_ms, max_ms, multiplier}}, \
                     each delay at most {MAX_RELEASE_DELAY_MS} ms and multiplier 1 to 100"
                ),
            ));
        }
        if let StartAt::Timestamp(ts) = self.start {
            if ts < 0 {
                return Err(Error::invalid(Code::InvalidStart, "start timestamp_ms must not be negative"));
            }
        }
        if let Some(pattern) = &self.filter {
            Filter::parse(pattern).map_err(|e| Error::invalid(Code::InvalidFilter, format!("filter: {e}")))?;
        }
        if let Some(push) = &self.push {
            push.validate()?;
        }
        if let Some(rate) = &self.rate {
            rate.validate()?;
        }
        Ok(())
    }

    /// The same settings as `requested`, where a push target requested without a secret
    /// accepts the one generated for it.
    fn satisfies(&self, requested: &SubscriptionSpec) -> bool {
        match (&self.push, &requested.push) {
            (Some(stored), Some(asked)) => {
                stored.satisfies(asked)
                    && Self { push: None, ..self.clone() } == Self { push: None, ..requested.clone() }
            }
            _ => self == requested,
        }
    }

    pub(super) fn backoff_ms(&self, receives: u32) -> i64 {
        self.redelivery_backoff.as_ref().map_or(0, |b| b.delay_ms(receives) as i64)
    }
}

impl Queues {
    /// Creates a subscription, or answers the existing one if its settings are the same
    /// (`false`: it already existed). The start is fixed now: `latest` means the heads
    /// as they are at creation, whenever the first receive comes.
    /// A push target's secret, when not given, is generated here: the create answer is
    /// the only one that shows it.
    pub async fn create(&self, topic: &str, name: &str, spec: SubscriptionSpec) -> Result<(Subscription, bool), Error> {
        names::validate("topic", topic)?;
        names::validate("subscription", name)?;
        spec.validate()?;
        let (mut attempt, mut checked) = (0, false);
        while attempt < MAX_ATTEMPTS {
            match self.sub(topic, name).await {
                Ok(existing) if existing.record.spec.satisfies(&spec) => return Ok((existing.describe(), false)),
                Ok(_) => {
                    return Err(Error::Conflict {
                        code: Code::SubscriptionExists,
                        message: format!("subscription '{name}' of topic '{topic}' exists with other settings"),
                    })
                }
                Err(Error::SubscriptionNotFound { .. }) if !checked => {
                    if let Some(push) = &spec.push {
                        super::push::check_target(push, self.targets.as_deref()).await?;
                    }
                    checked = true;
                }
                Err(Error::SubscriptionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            let topic = topics::live(self.store(), topic).await?;
            let tombstone = self.sub_item(&topic, name).await?.filter(|s| s.record.deleted).map(|s| s.version);
            let starts = self.start_offsets(&topic, &spec.start).await?;
            let mut spec = spec.clone();
            if let Some(push) = spec.push.as_mut().filter(|p| p.wants_secret()) {
                push.generate_secret(|| self.nonce());
            }
            let record = SubscriptionRecord {
                id: self.nonce(),
                spec,
                starts,
                created_ms: self.now(),
                deleted: false,
                state: SubscriptionState::Active,
                config: 0,
                filter_config: 0,
            };
            let mut ops = vec![
                WriteOp::replace(crate::keys::subscription_key(topic.id, name), layout::encode(&record), tombstone),
                // Not on a topic deleted meanwhile: its subscriptions would never be purged.
                WriteOp::Check { key: keys::topic_key(&topic.name), expect: Expect::Version(topic.version) },
            ];
            // The partitions' cursors, so that no receive creates one (creating one checks
            // the record: every first receive would name it); as many as the write holds.
            let starts = (0..topic.spec.partitions).map(|p| CursorRecord {
                next: record.starts.get(p as usize).copied().unwrap_or(0),
                ..Default::default()
            });
            let cursors = starts
                .enumerate()
                .map(|(p, c)| cursor_put(record.id, p as u32, CursorItem::new(c, Vec::new(), Vec::new())));
            ops.extend(cursors.take(MAX_WRITE_OPS - ops.len()));
            match self.store().write(ops).await {
                Ok(()) => {
                    self.forget_sub(&topic.name, name);
                    tracing::info!(topic = %topic.name, subscription = name, "subscription created");
                    let sub = Sub {
                        topic,
                        name: name.to_owned(),
                        record,
                        version: tombstone.map_or(1, |v| v + 1),
                        guarded: false,
                    };
                    return Ok((sub.describe(), true));
                }
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }

    async fn start_offsets(&self, topic: &TopicConfig, start: &StartAt) -> Result<Vec<u64>, Error> {
        let heads = topics::heads(self.store(), topic).await?;
        if let StartAt::Offsets(offsets) = start {
            if let Some(p) = offsets.keys().find(|p| **p >= topic.spec.partitions) {
                return Err(Error::invalid(Code::InvalidStart, format!("topic '{}' has no partition {p}", topic.name)));
            }
        }
        let mut starts = Vec::with_capacity(heads.len());
        for (p, (head, _)) in heads.iter().enumerate() {
            let offset = match start {
                StartAt::Latest => head.next,
                StartAt::Earliest => head.start,
                StartAt::Timestamp(ts) => self.log.offset_of(topic, p as u32, OffsetQuery::Timestamp(*ts)).await?,
                StartAt::Offsets(offsets) => match offsets.get(&(p as u32)) {
                    None => head.next,
                    Some(o) if (head.start..=head.next).contains(o) => *o,
                    Some(o) => {
                        return Err(Error::invalid(
                            Code::InvalidStart,
                            format!(
                                "offset {o} of partition {p} is outside its readable range {}..={}",
                                head.start, head.next
                            ),
                        ))
                    }
                },
            };
            starts.push(offset);
        }
        Ok(starts)
    }

    /// The topic's subscriptions, by name.
    pub async fn list(&self, topic: &str) -> Result<Vec<Subscription>, Error> {
        Ok(self.live_subs(topic).await?.iter().map(Sub::describe).collect())
    }

    /// The topic's subscriptions as stored (not the tombstones), by name.
    pub(super) async fn live_subs(&self, topic: &str) -> Result<Vec<Sub>, Error> {
        names::validate("topic", topic)?;
        let topic = topics::live(self.store(), topic).await?;
        let mut subs = Vec::new();
        let mut query = Query::all(subs_pk(topic.id), PAGE);
        loop {
            let page = self.store().query(&query).await?;
            for item in page.items {
                let record: SubscriptionRecord = layout::decode("subscription", &item.value)?;
                if !record.deleted {
                    subs.push(Sub {
                        topic: topic.clone(),
                        name: item.key.sk,
                        record,
                        version: item.version,
                        guarded: false,
                    });
                }
            }
            match page.next {
                Some(after) => query.after = Some(after),
                None => return Ok(subs),
            }
        }
    }

    /// Deletes a subscription at once: its tombstone, its purge order, and a tombstone
    /// cursor on every partition, in one write when they fit ([`MAX_WRITE_OPS`]; a larger
    /// topic's other fences follow before the delete answers); the janitor removes its
    /// queue items. The cursors are the fence, not the record: every take names its
    /// partition's cursor, so one over a cursor read before the delete fails, reads again
    /// and answers not found, whatever is cached; one that landed first came before the
    /// delete. Were every take to check the record instead, every receive of the
    /// subscription would name one item, and on DynamoDB two transactions naming one item
    /// cancel one another.
    pub async fn delete(&self, topic: &str, name: &str) -> Result<(), Error> {
        let sub = self.sub(topic, name).await?;
        let order = SubPurgeRecord { partitions: sub.topic.spec.partitions, done_partitions: 0 };
        let tombstone = SubscriptionRecord { deleted: true, ..sub.record.clone() };
        let mut ops = vec![
            WriteOp::replace(
                crate::keys::subscription_key(sub.topic.id, name),
                layout::encode(&tombstone),
                Some(sub.version),
            ),
            WriteOp::Put {
                key: sub_purge_key(sub.record.id),
                value: layout::encode(&order),
                expires_at_ms: None,
                expect: Expect::Any,
            },
        ];
        let mut fences = (0..sub.topic.spec.partitions).map(|p| cursor_put(sub.record.id, p, CursorItem::tombstone()));
        ops.extend(fences.by_ref().take(MAX_WRITE_OPS - ops.len()));
        match self.store().write(ops).await {
            Ok(()) => {
                let rest: Vec<WriteOp> = fences.collect();
                for chunk in rest.chunks(MAX_WRITE_OPS) {
                    self.store().write(chunk.to_vec()).await?;
                }
                self.forget_sub(topic, name);
                tracing::info!(topic = %sub.topic.name, subscription = name, "subscription deleted");
                Ok(())
            }
            // Deleted meanwhile by someone else (and perhaps re-created since): the
            // subscription this request meant is deleted.
            Err(StorageError::ConditionFailed { .. }) => match self.sub(topic, name).await {
                Err(Error::SubscriptionNotFound { .. }) => Ok(()),
                Ok(now) if now.record.id != sub.record.id => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Err(contended(name)),
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// The write of partition `partition`'s cursor item of subscription `id` as `item`, whatever
/// is there: at a create, nothing (the id is new); at a delete, anything (its version moves
/// on, which fences every write conditioned on it).
fn cursor_put(id: u64, partition: u32, item: CursorItem) -> WriteOp {
    WriteOp::Put { key: cursor_key(id, partition), value: item.encode(), expires_at_ms: None, expect: Expect::Any }
}
