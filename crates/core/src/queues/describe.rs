//! Describing a subscription: its backlog, exact when two reads agree; a push
//! subscription's deliveries, flow state, and its suspension (shown as its `state` unless paused).

use super::*;

impl Backlog {
    /// Adds a partition's counts (not its oldest age) to the whole's.
    fn add(&mut self, b: &Backlog) {
        self.visible += b.visible;
        self.in_flight += b.in_flight;
        self.delayed += b.delayed;
        self.scheduled += b.scheduled;
        self.dead += b.dead;
        self.expired += b.expired;
        self.filtered += b.filtered;
        self.unscanned += b.unscanned;
    }
}

/// New messages one describe reads past a partition's cursor at most, counting those
/// scheduled for later: past it the counts are not exact.
const SCHEDULE_SCAN: usize = 10_000;

/// Counts a partition's leases at `now` into `b` (those out of deliveries are dead; due
/// messages below `log_start` are expired): answers since when the oldest due one is visible.
fn count_leases(state: &QueueState, max_receive_count: u32, log_start: u64, now: i64, b: &mut Backlog) -> Option<i64> {
    let mut visible_since: Option<i64> = None;
    for lease in &state.leases {
        let n = lease.record.msgs.len() as u64;
        if super::take::is_dead(lease, state.cursor.next, now, max_receive_count) {
            b.dead += n;
        } else if lease.due <= now {
            // …and due messages below it.
            let gone = lease.record.msgs.iter().filter(|m| m.offset < log_start).count() as u64;
            b.expired += gone;
            if n > gone {
                b.visible += n - gone;
                visible_since = min_time(visible_since, lease.due);
            }
        } else if lease.record.held_until.is_some_and(|h| h > now) {
            b.in_flight += n;
        } else if lease.record.scheduled {
            b.scheduled += n;
        } else {
            b.delayed += n;
        }
    }
    visible_since
}

impl Queues {
    /// The subscription with exact counts: every partition's leases are read (they are
    /// what is in flight or waiting, not the backlog), new messages are counted from the
    /// cursor (or the log start, if retention moved it past the cursor) to the head; with a
    /// filter, those are `unscanned` (no receive has matched them yet), not `visible`.
    /// `expired` is what retention took from the queue: counted when a receive passed
    /// over it, plus what a receive would pass over now (see [`Backlog::expired`]), so
    /// it is exact whether or not a receive came since the log start moved.
    pub async fn describe(&self, topic: &str, name: &str) -> Result<SubscriptionDescription, Error> {
        let sub = self.sub(topic, name).await?;
        let heads = topics::heads(self.store(), &sub.topic).await?;
        let spec = &sub.record.spec;
        let now = self.now();
        let mut total = Backlog::default();
        let mut partitions = Vec::with_capacity(heads.len());
        let mut oldest: Option<i64> = None;
        let mut exact = true;
        for (p, (head, _)) in heads.iter().enumerate() {
            let p = p as u32;
            let (state, settled) = self.snapshot(&sub, p).await?;
            exact &= settled;
            let mut b = Backlog {
                dead: state.cursor.dead,
                expired: state.cursor.expired,
                filtered: state.cursor.filtered,
                ..Backlog::default()
            };
            // What a receive would pass over now: new messages below the log start.
            b.expired += head.start.saturating_sub(state.cursor.next);
            let mut visible_since = count_leases(&state, spec.max_receive_count, head.start, now, &mut b);
            let cursor = state.cursor.next.clamp(head.start, head.next.max(head.start));
            if spec.filter.is_some() {
                // Whether they match is known once a receive looks at them: not visible yet.
                b.unscanned = head.next.saturating_sub(cursor);
            } else if cursor < head.next {
                // New messages are visible up to the first one still within `delay_ms`.
                let boundary = if spec.delay_ms > 0 {
                    let since = now - spec.delay_ms as i64 + 1;
                    self.log.offset_of(&sub.topic, p, OffsetQuery::Timestamp(since)).await?.clamp(cursor, head.next)
                } else {
                    head.next
                };
                b.visible += boundary - cursor;
                b.delayed += head.next - boundary;
                let (early, late, whole) = self.scheduled_new(&sub, p, cursor, boundary, *head, now).await?;
                (b.visible, b.delayed, b.scheduled) = (b.visible - early, b.delayed - late, early + late);
                exact &= whole;
                if boundary > cursor {
                    let first = self.events_at(&sub.topic, p, &[cursor], *head).await?;
                    if let Some(e) = first.get(&cursor) {
                        visible_since =
                            min_time(visible_since, e.record.timestamp_ms.saturating_add(spec.delay_ms as i64));
                    }
                }
            }
            b.oldest_visible_age_ms = visible_since.map(|t| now.saturating_sub(t).max(0) as u64);
            if let Some(t) = visible_since {
                oldest = min_time(oldest, t);
            }
            total.add(&b);
            let filter_since = state.marks.filter_since_of(sub.record.filter_config);
            partitions.push(PartitionBacklog {
                partition: p,
                cursor,
                high_watermark: head.next,
                backlog: b,
                filter_since,
            });
        }
        total.oldest_visible_age_ms = oldest.map(|t| now.saturating_sub(t).max(0) as u64);
        let ((subscription, deliveries), throttled_ms) = (self.shown(&sub).await?, self.throttled(&sub).await?);
        Ok(SubscriptionDescription { subscription, backlog: total, partitions, exact, deliveries, throttled_ms })
    }

    /// Of the new messages `from..head.next` of a partition, those scheduled for after `now`:
    /// how many below `boundary` (counted visible otherwise) and how many from it (counted
    /// delayed otherwise), and whether all were read (at most [`SCHEDULE_SCAN`]).
    async fn scheduled_new(
        &self,
        sub: &Sub,
        partition: u32,
        mut from: u64,
        boundary: u64,
        head: HeadRecord,
        now: i64,
    ) -> Result<(u64, u64, bool), Error> {
        let limits = *self.log.limits();
        let (mut early, mut late, mut scanned) = (0, 0, 0);
        while from < head.next {
            if scanned >= SCHEDULE_SCAN {
                return Ok((early, late, false));
            }
            let max = (limits.max_read_events, limits.max_read_bytes);
            let events = self.read_from(&sub.topic, partition, &mut from, max, head).await?;
            let Some(last) = events.last().map(|e| e.offset) else { break };
            scanned += events.len();
            for e in events.iter().filter(|e| crate::schedule::deliver_at(&e.record.headers) > Some(now)) {
                *(if e.offset < boundary { &mut early } else { &mut late }) += 1;
            }
            from = last + 1;
        }
        Ok((early, late, true))
    }

    /// The subscription as describe shows it, with its delivery counts if it pushes: its
    /// `state` is `suspended` while its endpoint is (a pause wins).
    async fn shown(&self, sub: &Sub) -> Result<(Subscription, Option<PushStatsRecord>), Error> {
        let deliveries = self.push_stats(sub).await?;
        let mut subscription = sub.describe();
        let flow = deliveries.as_ref().and_then(|d| d.flow.as_ref());
        if flow.is_some_and(|f| f.suspended_since_ms.is_some()) && subscription.state.is_active() {
            subscription.state = SubscriptionState::Suspended;
        }
        Ok((subscription, deliveries))
    }

    /// A partition's queue items as they were at one moment, for exact counts: a query is not
    /// a snapshot (DynamoDB's can be torn by a transaction; SQLite pages by [`PAGE`]), so
    /// the items are read until two reads in a row agree on every item and its version
    /// (versions only grow, so two equal reads bracket a moment with no write in between).
    /// Under writes that never pause, the last read is answered after [`SNAPSHOT_READS`].
    pub(super) async fn snapshot(&self, sub: &Sub, partition: u32) -> Result<(QueueState, bool), Error> {
        let fingerprint = |s: &QueueState| -> Vec<(String, u64)> {
            s.leases
                .iter()
                .map(|l| (l.key.sk.clone(), l.version))
                .chain(s.cursor_version.map(|v| (String::new(), v)))
                .collect()
        };
        let mut last = self.load(sub, partition, None).await?;
        for _ in 1..SNAPSHOT_READS {
            let again = self.load(sub, partition, None).await?;
            if fingerprint(&again) == fingerprint(&last) {
                return Ok((again, true));
            }
            last = again;
        }
        Ok((last, false))
    }
}
