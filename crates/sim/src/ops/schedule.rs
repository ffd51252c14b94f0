//! Scheduled publishes (issue 47 §5): some of TOPIC_A's requests carry a schedule on each
//! event, drawn from a generator of its own: near (a few seconds, some already past, due at
//! once), far (up to a third of the topic's retention, so an event published with a
//! timestamp 20 s old is still within the bound), or one time for a bulk request of many
//! events that all come due at once. `deliver_at_ms` is a time; `delay_ms` is stamped as
//! each attempt begins, as the API does with its clock (only on events the log timestamps,
//! so a retry never stamps past the retention). What a schedule promises is checked where
//! deliveries are seen (`checker/schedule.rs`).

use sluice_core::{Clock, NewEvent};

use crate::model::Sched;
use crate::world::{World, TOPIC_A};

/// How one request is scheduled.
#[derive(Clone, Copy)]
pub(crate) enum Plan {
    None,
    Near,
    Far,
    /// Every event of the request at this time.
    Bulk(i64),
}

/// Events of a bulk request, at least and at most.
const BULK: (i64, i64) = (20, 40);

impl World {
    /// A request's plan, and how many events it has if that is decided by the plan.
    pub(crate) fn draw_plan(&mut self, topic: &'static str) -> (Plan, Option<usize>) {
        if topic != TOPIC_A {
            return (Plan::None, None);
        }
        let now = self.clock.now_ms();
        match self.sched_rng.weighted(&[84, 8, 6, 2]) {
            0 => (Plan::None, None),
            1 => (Plan::Near, None),
            2 => (Plan::Far, None),
            _ => {
                let at = now + self.sched_rng.range(500, 4000);
                (Plan::Bulk(at), Some(self.sched_rng.range(BULK.0, BULK.1) as usize))
            }
        }
    }

    /// One event's schedule under `plan`; `timestamped`: its publisher gives its timestamp.
    pub(crate) fn draw_sched(&mut self, plan: Plan, timestamped: bool) -> Option<Sched> {
        let now = self.clock.now_ms();
        let retention = self.topic_specs[TOPIC_A].retention_ms.unwrap_or(30_000);
        let r = &mut self.sched_rng;
        let (span, at) = match plan {
            Plan::None => return None,
            Plan::Bulk(at) => return Some(Sched { delay: None, lo: at, hi: at }),
            Plan::Near => (r.range(0, 3000), now + r.range(-1000, 3000)),
            Plan::Far => {
                let span = r.range(10_000, retention / 3);
                (span, now + span)
            }
        };
        match !timestamped && r.chance(0.5) {
            true => Some(Sched { delay: Some(span as u64), lo: i64::MAX, hi: i64::MIN }),
            false => Some(Sched { delay: None, lo: at, hi: at }),
        }
    }

    /// Stamps an attempt's event `e` with its schedule, if it has one, at `now`.
    pub(crate) fn stamp_sched(&mut self, e: u64, event: &mut NewEvent, now: i64) {
        let Some(s) = self.events.get_mut(&e).and_then(|i| i.sched.as_mut()) else { return };
        let at = match s.delay {
            Some(d) => {
                let at = now + d as i64;
                (s.lo, s.hi) = (s.lo.min(at), s.hi.max(at));
                at
            }
            None => s.lo,
        };
        sluice_core::schedule::stamp(event, at);
    }

    /// The latest time any event was scheduled for: past it, every schedule is due.
    pub(crate) fn last_schedule(&self) -> Option<i64> {
        self.events.values().filter_map(|i| i.sched).map(|s| s.hi).max()
    }
}
