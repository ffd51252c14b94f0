//! What a schedule promises (docs/API.md, "Scheduled delivery"): the event is in the log at
//! once with the time it was published with (replay shows it); no subscription, pull or
//! push, delivers it before that time on the simulation's clock; it holds back no other
//! message, not even one of its key; and nothing scheduled is lost: once every schedule is
//! due, the quiet end's drains deliver each one still in the log (settled, dead-lettered,
//! sought over or expired, by the end's counts in `drain.rs` and `subops.rs`).

use sluice_core::schedule::deliver_at;
use sluice_core::segment::Record;

use crate::model::EventInfo;
use crate::world::{World, T0};

impl World {
    /// What is wrong with the schedule `record` carries, against the model's event: none
    /// where it was published without one; where it was, the time stamped on an attempt.
    /// Narrows the model to the time found.
    pub(crate) fn sched_problem(&mut self, e: u64, record: &Record) -> Option<String> {
        let got = deliver_at(&record.headers);
        let info = self.events.get_mut(&e)?;
        match (info.sched.as_mut(), got) {
            (None, None) => None,
            (None, Some(at)) => Some(format!("scheduled for {}, published without one", at - T0)),
            (Some(s), None) => Some(format!("published for {}..{}, carries no schedule", s.lo - T0, s.hi - T0)),
            (Some(s), Some(at)) if at < s.lo || at > s.hi => {
                Some(format!("scheduled for {}, published for {}..{}", at - T0, s.lo - T0, s.hi - T0))
            }
            (Some(s), Some(at)) => {
                (s.lo, s.hi) = (at, at);
                None
            }
        }
    }

    /// A message of `record` delivered by `by_ms` (a receive's answer, an attempt's start): not
    /// before its schedule.
    pub(crate) fn check_not_early(&mut self, what: &str, p: u32, o: u64, record: &Record, by_ms: i64) {
        let Some(at) = deliver_at(&record.headers) else { return };
        self.stat("scheduled_delivered");
        if at > by_ms {
            let detail = format!("{what} {p}@{o}: delivered by {}, scheduled for {}", by_ms - T0, at - T0);
            self.violate("scheduled-early", detail);
        }
    }

    /// An event pushed at `start_ms`: not before its schedule, as the model knows it.
    pub(crate) fn check_pushed_not_early(&mut self, what: &str, deliver_at: Option<i64>, info_lo: i64, start_ms: i64) {
        let at = deliver_at.unwrap_or(info_lo);
        if at > start_ms {
            let detail = format!("{what}: pushed at {}, scheduled for {}", start_ms - T0, at - T0);
            self.violate("scheduled-early", detail);
        }
    }
}

/// Whether an event holds back later ones of its key: a scheduled one never does.
pub(crate) fn holds_key(info: &EventInfo) -> bool {
    info.sched.is_none()
}
