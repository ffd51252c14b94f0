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

use serde::{Deserialize, Serialize};

use super::*;
use crate::push::flow::Gate;

/// The event a wake sends the dispatcher (`{"sluice_wake": {"topics": […], "at_ms": N}}`):
/// a run for the push subscriptions of `topics` that stays for what comes due from `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub topics: Vec<String>,
    pub at_ms: i64,
}

impl Wake {
    /// The event's field that holds the wake.
    pub const FIELD: &'static str = "sluice_wake";

    /// The event that carries this wake.
    pub fn event(&self) -> String {
        serde_json::json!({ Self::FIELD: self }).to_string()
    }

    /// The wake an event carries, if it is one: `None` for any other event, an error for
    /// a wake that does not parse.
    pub fn of_event(event: &serde_json::Value) -> Option<Result<Self, serde_json::Error>> {
        event.get(Self::FIELD).map(|w| serde_json::from_value(w.clone()))
    }
}

/// How long a subscription that was due but gave nothing (its messages held back behind a
/// key, its rate, its endpoint's `Retry-After`, or another run holding it) is left before
/// the staying sweep looks at it again: at most one look and one claim a second.
const STAY_STEP_MS: i64 = 1_000;
/// How far ahead a run that does not stay hands a due time over: the sweeps' period (a due
/// time after the next sweep's start is that sweep's to stay for), and a margin for the
/// schedule's jitter.
const HAND_OVER_MS: i64 = 65_000;
/// How long a run woken for a time stays past it, for what comes due meanwhile in its
/// topics: due times that close to one already handed over are not handed over again.
pub const WAKE_STAYS_MS: i64 = 30_000;

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

    /// When `sub` next has something to take, as a drain that just ended on it sees it:
    /// from this process's hints (no read), or with a rate from a look (reads: a drain
    /// stops at an empty bucket with its backlog unread, the next token's time unknown).
    async fn next_due_after_drain(&self, sub: &PushSubscription) -> Option<i64> {
        if sub.spec.rate.is_none() {
            return self.queues.push_next_due_seen(sub);
        }
        self.queues.push_next_due(sub).await.unwrap_or_else(|e| {
            tracing::warn!(subscription = %sub.name, error = %e, "push next due time not read");
            None
        })
    }

    /// Hands over what `subs` have coming due within [`HAND_OVER_MS`]: one wake per topic, at its earliest due time, unless a
    /// wake this process asked for starts before it and stays past it (it looks at the
    /// topic again when it starts, after this due time's lease was written). A wake that
    /// cannot be sent is logged: the next sweep delivers what it would have.
    pub(super) async fn hand_over(&self, subs: &[PushSubscription]) {
        let Some(wakes) = &self.wakes else { return };
        let now = self.now_ms();
        let mut due: BTreeMap<&str, i64> = BTreeMap::new();
        for sub in subs {
            let Some(at) = self.next_due_after_drain(sub).await.filter(|at| *at > now && *at - now <= HAND_OVER_MS)
            else {
                continue;
            };
            due.entry(&sub.topic).and_modify(|t| *t = (*t).min(at)).or_insert(at);
        }
        for (topic, at) in due {
            {
                let mut woken = self.woken.lock().unwrap_or_else(|p| p.into_inner());
                woken.retain(|_, asked| *asked > now);
                if woken.get(topic).is_some_and(|asked| *asked <= at && at <= *asked + WAKE_STAYS_MS) {
                    continue;
                }
                woken.insert(topic.to_owned(), at);
            }
            if let Err(e) = wakes.wake_at(&[topic.to_owned()], at).await {
                tracing::warn!(topic, at_ms = at, error = ?e, "push wake not handed over; the next sweep delivers");
            }
        }
    }
}
