//! What the workers of one `queue` run share: which messages were acked and how often, and
//! the exactly-once check of a finished run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the workers of one run share: which messages were acked, how often.
pub struct QueueRun {
    /// Per partition, the subscription's start offset.
    pub starts: Vec<u64>,
    /// Per partition, per offset from its start: times acked (saturating).
    acks: Mutex<Vec<Vec<u8>>>,
    /// Per partition, the end of the run once known: messages from there on are not the run's.
    ends: Mutex<Option<Vec<u64>>>,
    /// Acks of messages of no partition, or before a partition's start.
    foreign: AtomicU64,
    /// Messages acked at least once (counted at their first ack), and their value bytes.
    pub acked: Arc<AtomicU64>,
    pub bytes: AtomicU64,
    /// Messages of the run, once known (`u64::MAX` before).
    pub expected: AtomicU64,
    pub done: Arc<AtomicBool>,
    /// When the last message of the run was acked.
    pub end: Mutex<Option<Instant>>,
    /// The clock base of the live publishers' send instants.
    pub clock: Instant,
}

impl QueueRun {
    /// A run of a subscription starting at `starts`, one offset per partition.
    pub fn new(starts: Vec<u64>) -> Self {
        Self {
            acks: Mutex::new(vec![Vec::new(); starts.len()]),
            ends: Mutex::new(None),
            foreign: AtomicU64::new(0),
            starts,
            acked: Arc::new(AtomicU64::new(0)),
            bytes: AtomicU64::new(0),
            expected: AtomicU64::new(u64::MAX),
            done: Arc::new(AtomicBool::new(false)),
            end: Mutex::new(None),
            clock: Instant::now(),
        }
    }

    /// Counts acked messages: `(partition, offset, value bytes)`.
    pub fn record(&self, acked: &[(u32, u64, u64)]) {
        let (mut fresh, mut bytes) = (0, 0);
        {
            let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
            let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
            for &(p, offset, len) in acked {
                let start = self.starts.get(p as usize).copied().unwrap_or(0);
                let (Some(counts), Some(i)) = (acks.get_mut(p as usize), offset.checked_sub(start)) else {
                    self.foreign.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let i = i as usize;
                if counts.len() <= i {
                    counts.resize(i + 1, 0);
                }
                // Past the end (someone else publishing): recorded for `verify`, not counted.
                let within = ends.as_ref().is_none_or(|e| offset < e.get(p as usize).copied().unwrap_or(0));
                if counts[i] == 0 && within {
                    fresh += 1;
                    bytes += len;
                }
                counts[i] = counts[i].saturating_add(1);
            }
        }
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.acked.fetch_add(fresh, Ordering::Relaxed);
        self.check_done();
    }

    fn check_done(&self) {
        if self.acked.load(Ordering::Relaxed) >= self.expected.load(Ordering::Relaxed) {
            self.end.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Instant::now);
            self.done.store(true, Ordering::Relaxed);
        }
    }

    /// Fixes the end of the run. Called while no worker runs, or (live) before any worker
    /// can have seen a message past `ends`.
    pub fn set_end(&self, ends: &[u64]) {
        let expected = ends.iter().zip(&self.starts).map(|(e, s)| e.saturating_sub(*s)).sum();
        *self.ends.lock().unwrap_or_else(|p| p.into_inner()) = Some(ends.to_vec());
        self.expected.store(expected, Ordering::Relaxed);
        self.check_done();
    }

    /// Messages of `starts..ends` never acked, acked more than once, and messages outside
    /// it acked (or acks of no partition).
    pub fn verify(&self, ends: &[u64]) -> (u64, u64, u64) {
        let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        let (mut missing, mut twice, mut outside) = (0, 0, self.foreign.load(Ordering::Relaxed));
        for (p, counts) in acks.iter().enumerate() {
            let want = ends.get(p).copied().unwrap_or(0).saturating_sub(self.starts[p]) as usize;
            for i in 0..want.max(counts.len()) {
                match (i < want, counts.get(i).copied().unwrap_or(0)) {
                    (true, 0) => missing += 1,
                    (true, 1) | (false, 0) => {}
                    (true, _) => twice += 1,
                    (false, _) => outside += 1,
                }
            }
        }
        (missing, twice, outside)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(starts: Vec<u64>) -> QueueRun {
        QueueRun::new(starts)
    }

    #[test]
    fn given_every_message_acked_once_then_done_and_verified_clean() {
        let r = run(vec![5, 0]);
        r.set_end(&[7, 1]);
        r.record(&[(0, 5, 10), (1, 0, 10)]);
        assert!(!r.done.load(Ordering::Relaxed));
        r.record(&[(0, 6, 10)]);
        assert!(r.done.load(Ordering::Relaxed));
        assert_eq!((r.acked.load(Ordering::Relaxed), r.bytes.load(Ordering::Relaxed)), (3, 30));
        assert_eq!(r.verify(&[7, 1]), (0, 0, 0));
    }

    #[test]
    fn given_missing_duplicate_and_foreign_acks_then_each_is_counted() {
        let r = run(vec![5, 0]);
        r.set_end(&[8, 1]);
        // Offset 5 twice, 6 never, 7 once; 4 is before the start, 1 of partition 1 after the end.
        r.record(&[(0, 5, 1), (0, 5, 1), (0, 7, 1), (0, 4, 1), (1, 0, 1), (1, 1, 1), (9, 0, 1)]);
        assert_eq!(r.acked.load(Ordering::Relaxed), 3, "5 and 7 of partition 0, 0 of partition 1");
        assert!(!r.done.load(Ordering::Relaxed), "6 is missing");
        assert_eq!(r.verify(&[8, 1]), (1, 1, 3), "6 missing; 5 twice; 4, 1 of partition 1 and partition 9 outside");
    }
}
