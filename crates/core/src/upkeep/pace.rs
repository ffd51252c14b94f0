//! Pacing: when the janitor's heavy writes may go. A compaction's rewrite writes a blob of
//! up to 8 MiB (on the embedded backend a file, its `fdatasync` and a directory sync) and a
//! swap of up to 100 items: beside live requests on the same disk and cores it took push's
//! p99 from 8–10 ms to 30–74 ms (docs/PERFORMANCE.md, "Upkeep that yields to live
//! traffic"). A [`Pacer`] lets the process that runs the janitor hold each rewrite back
//! while it is busy, for a bounded time, so compaction still progresses under constant load.
//!
//! Nothing here is a safety argument: a rewrite held back is the same conditional write a
//! little later, and the retention steps are never held (they are small state writes that
//! the bounds depend on).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::clock::{Clock, Sleep};

/// When the janitor may start its next heavy write (a compaction's rewrite).
pub trait Pacer: Send + Sync + 'static {
    /// Resolves once a rewrite may start: at once, or after waiting for live traffic to
    /// quiet; it always resolves, after a bounded wait, so compaction never starves.
    fn until_quiet(&self) -> Sleep;
}

/// A [`Pacer`] that counts live requests: a rewrite waits while more than `busy_requests`
/// arrived in each `window_ms` of the clock, and for at most `max_wait_ms` in all.
pub struct TrafficPacer {
    requests: Arc<AtomicU64>,
    clock: Arc<dyn Clock>,
    settings: PaceSettings,
}

/// How a [`TrafficPacer`] judges traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceSettings {
    /// The window requests are counted over.
    pub window_ms: u64,
    /// More requests than this in a window is live traffic.
    pub busy_requests: u64,
    /// The longest a rewrite waits for a quiet window.
    pub max_wait_ms: u64,
}

impl Default for PaceSettings {
    /// Quiet is at most one request in 50 ms (20 a second: a dashboard's polls, a trickle of
    /// publishes); a rewrite waits up to 10 s, longer than a burst such as the side by
    /// side's 5 s push phase, and short enough that constant load still sees a merge every 10 s.
    fn default() -> Self {
        Self { window_ms: 50, busy_requests: 1, max_wait_ms: 10_000 }
    }
}

impl TrafficPacer {
    /// A pacer over `requests`, a count the request path raises by one per request.
    pub fn new(requests: Arc<AtomicU64>, clock: Arc<dyn Clock>, settings: PaceSettings) -> Self {
        Self { requests, clock, settings }
    }
}

impl Pacer for TrafficPacer {
    fn until_quiet(&self) -> Sleep {
        let (requests, clock, s) = (self.requests.clone(), self.clock.clone(), self.settings);
        Box::pin(async move {
            let start = clock.now_ms();
            loop {
                // A window of the clock's time, always: a count since some earlier moment would
                // average a burst that has just begun with the quiet before it.
                let before = requests.load(Ordering::Relaxed);
                clock.sleep(s.window_ms).await;
                let seen = requests.load(Ordering::Relaxed).wrapping_sub(before);
                let waited = u64::try_from(clock.now_ms() - start).unwrap_or(0);
                if seen <= s.busy_requests || waited >= s.max_wait_ms {
                    if waited > s.window_ms {
                        tracing::debug!(waited_ms = waited, "a rewrite waited for live traffic");
                    }
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;
    use crate::ManualClock;

    fn pacer(clock: &Arc<ManualClock>) -> (TrafficPacer, Arc<AtomicU64>) {
        let requests = Arc::new(AtomicU64::new(0));
        let settings = PaceSettings { window_ms: 50, busy_requests: 1, max_wait_ms: 1_000 };
        (TrafficPacer::new(requests.clone(), clock.clone(), settings), requests)
    }

    /// Polls `wait` once; whether it has resolved.
    fn ready(wait: &mut Sleep) -> bool {
        wait.as_mut().now_or_never().is_some()
    }

    #[test]
    fn a_rewrite_waits_one_window_when_quiet() {
        let clock = Arc::new(ManualClock::new(0));
        let (pacer, requests) = pacer(&clock);
        let mut wait = pacer.until_quiet();
        assert!(!ready(&mut wait), "it looks at a window first");
        requests.fetch_add(1, Ordering::Relaxed);
        clock.advance(50);
        assert!(ready(&mut wait), "one request in the window is quiet");
    }

    #[test]
    fn a_rewrite_waits_while_requests_keep_coming_until_they_stop() {
        let clock = Arc::new(ManualClock::new(0));
        let (pacer, requests) = pacer(&clock);
        let mut wait = pacer.until_quiet();
        for _ in 0..10 {
            assert!(!ready(&mut wait), "held back while busy");
            requests.fetch_add(5, Ordering::Relaxed);
            clock.advance(50);
        }
        assert!(!ready(&mut wait), "the last busy window is judged: still held");
        clock.advance(50);
        assert!(ready(&mut wait), "a quiet window lets it go");
    }

    #[test]
    fn a_rewrite_waits_no_longer_than_the_bound_under_constant_load() {
        let clock = Arc::new(ManualClock::new(0));
        let (pacer, requests) = pacer(&clock);
        let mut wait = pacer.until_quiet();
        for _ in 0..19 {
            assert!(!ready(&mut wait));
            requests.fetch_add(100, Ordering::Relaxed);
            clock.advance(50);
        }
        assert!(!ready(&mut wait), "950 ms waited of 1,000");
        requests.fetch_add(100, Ordering::Relaxed);
        clock.advance(50);
        assert!(ready(&mut wait), "busy still, but the bound has passed");
    }
}
