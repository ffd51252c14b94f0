//! A sweep that stays ([`Dispatcher::sweep`]). What comes due while nothing is published
//! (a scheduled message, a redelivery after its backoff, a rate's next tokens) makes no
//! write, so nothing wakes a run through the table's stream at its time. A sweep is started
//! by a schedule and nothing waits behind it (a stream run holds its shard's next wakes
//! back while it lasts), so it is the run that stays: it learns each push subscription's
//! next due time from the look it makes anyway, waits for it on the clock, and delivers
//! it then, until the next sweep takes over. Alternatives weighed (docs/AWS.md, "Push at a
//! due time"): a one-time wake per due time from EventBridge Scheduler (it invokes within
//! the minute, no finer than the sweep) or an SQS delay queue (a service and a mapping
//! more); a stream run staying (its shard's other topics would wait for it).

use super::*;
use crate::push::flow::Gate;

/// How long a subscription that was due but gave nothing (its messages held back behind a
/// key, its rate, its endpoint's `Retry-After`, or another run holding it) is left before
/// the staying sweep looks at it again: at most one look and one claim a second.
const STAY_STEP_MS: i64 = 1_000;

impl Dispatcher {
    /// A sweep of the push subscriptions of `topics` that stays: each one is looked at (reads
    /// only) and driven under its run lease when something is due, then looked at again and
    /// waited for while its next due time is by `stay_until_ms` and an attempt starting then
    /// would end by `deadline_ms`. Each subscription waits on its own, so one's long delivery
    /// never holds back another's due time. Counts are flushed at the end.
    pub async fn sweep(&self, topics: &Topics, deadline_ms: i64, stay_until_ms: i64) -> Result<Drained, Error> {
        let mut work = JoinSet::new();
        for sub in self.subscriptions(topics).await? {
            let this = self.clone();
            work.spawn(async move { this.stay_with(&sub, deadline_ms, stay_until_ms).await });
        }
        let (total, first_error) = join(work).await;
        self.flush_stats().await;
        first_error.map_or(Ok(total), Err)
    }

    /// One subscription's part of a staying sweep.
    async fn stay_with(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        stay_until_ms: i64,
    ) -> (Drained, Option<Error>) {
        let mut total = Drained::default();
        loop {
            let next = match self.queues.push_next_due(sub).await {
                Ok(next) => next,
                Err(e) if gone(&e) => return (total, None),
                Err(e) => return (total, Some(e)),
            };
            let now = self.now_ms();
            let at = match next {
                None => return (total, None),
                Some(at) if at > now => at,
                Some(_) => {
                    let (drained, error) =
                        self.drive(sub, deadline_ms, false).await.unwrap_or_else(|e| (Drained::default(), Some(e)));
                    total.add(drained);
                    if error.is_some() {
                        return (total, error);
                    }
                    if drained.deliveries > 0 {
                        // Look again: what comes due next, or what came meanwhile.
                        continue;
                    }
                    self.step_after_nothing(sub)
                }
            };
            if at > stay_until_ms || at + attempt_ms(sub) as i64 > deadline_ms {
                return (total, None);
            }
            self.queues.log().clock().sleep_until(at).await;
        }
    }

    /// When to look again at `sub` after it was due and a drive gave nothing: not before
    /// its endpoint may be sent to again, and never sooner than [`STAY_STEP_MS`] (no spin).
    fn step_after_nothing(&self, sub: &PushSubscription) -> i64 {
        let now = self.now_ms();
        let step = now + STAY_STEP_MS;
        match self.flows.record(sub.id).gate(now, 0, sub.push.max_in_flight) {
            Gate::Wait { until_ms } => until_ms.max(step),
            Gate::Go | Gate::Full => step,
        }
    }
}
