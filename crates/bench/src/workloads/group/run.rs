//! What the members of one `group` run share: its settings and paths, how far each
//! partition has been delivered, and the counts of what was delivered.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::target::Target;
use crate::wire::PolledEvent;

/// How the members of a `group` run poll.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    pub group: String,
    pub members: usize,
    pub max_events: usize,
    pub max_bytes: usize,
    pub wait_ms: u64,
    /// Commits ride on the next poll (`positions` with `auto_commit`), no commit requests.
    pub riding_commits: bool,
}

/// Per partition, how far the group has got: the next offset no member has been given yet,
/// and (once known) the offset at which the run is complete.
struct Frontier {
    next: Vec<u64>,
    end: Option<Vec<u64>>,
}

/// What the members of one run share.
pub struct GroupRun {
    pub base_url: String,
    pub topic: String,
    pub settings: GroupSettings,
    pub poll_path: String,
    pub commit_path: String,
    pub leave_path: String,
    frontier: Mutex<Frontier>,
    /// Events given to a member for the first time, and their value bytes.
    pub delivered: Arc<AtomicU64>,
    pub bytes: AtomicU64,
    /// Events given again (a member resumes from the last commit after a rebalance).
    pub redelivered: AtomicU64,
    pub done: Arc<AtomicBool>,
    /// When the last event of the run was delivered (and committed).
    pub end: Mutex<Option<Instant>>,
    /// The clock base of the publishers' send instants.
    pub clock: Instant,
}

impl GroupRun {
    /// A run of `settings` on `t`'s topic whose partitions start at `next`.
    pub fn new(t: &Target, settings: GroupSettings, next: Vec<u64>) -> Self {
        Self {
            base_url: t.base.clone(),
            topic: t.topic.clone(),
            poll_path: format!("/v1/groups/{}/poll", settings.group),
            commit_path: format!("/v1/groups/{}/commit", settings.group),
            leave_path: format!("/v1/groups/{}/leave", settings.group),
            settings,
            frontier: Mutex::new(Frontier { next, end: None }),
            delivered: Arc::new(AtomicU64::new(0)),
            bytes: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            done: Arc::new(AtomicBool::new(false)),
            end: Mutex::new(None),
            clock: Instant::now(),
        }
    }

    /// Records a poll's events against the frontier; returns how many were new. The delivery
    /// latency of each new event that carries a send instant goes into `latency`.
    pub fn deliver(&self, events: &[PolledEvent<'_>], arrived: Instant, latency: &mut Histogram<u64>) -> u64 {
        let arrived_ns = arrived.duration_since(self.clock).as_nanos() as u64;
        let (mut fresh, mut bytes, mut again) = (0, 0, 0);
        let mut f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            let Some(next) = f.next.get_mut(e.partition as usize) else { continue };
            if e.offset < *next {
                again += 1;
                continue;
            }
            *next = e.offset + 1;
            fresh += 1;
            bytes += e.value_len();
            if let Some(sent) = e.headers.ns() {
                let _ = latency.record(arrived_ns.saturating_sub(sent) / 1000);
            }
        }
        self.delivered.fetch_add(fresh, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.redelivered.fetch_add(again, Ordering::Relaxed);
        fresh
    }

    /// Ends the run once every partition has been delivered up to its end.
    pub fn check_done(&self) {
        let f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        let Some(end) = &f.end else { return };
        if f.next.iter().zip(end).all(|(n, e)| n >= e) {
            let mut at = self.end.lock().unwrap_or_else(|p| p.into_inner());
            at.get_or_insert_with(Instant::now);
            self.done.store(true, Ordering::Relaxed);
        }
    }

    pub fn set_end(&self, end: Vec<u64>) {
        self.frontier.lock().unwrap_or_else(|p| p.into_inner()).end = Some(end);
        self.check_done();
    }

    /// Events no member got before the run ended.
    pub fn missing(&self) -> u64 {
        let f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        f.end.as_ref().map_or(0, |end| f.next.iter().zip(end).map(|(n, e)| e.saturating_sub(*n)).sum())
    }
}
