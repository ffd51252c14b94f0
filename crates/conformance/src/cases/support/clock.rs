//! A manual clock that counts the sleeps started on it, for long-poll cases.

use sluice_core::clock::Sleep;
use sluice_core::{Clock, ManualClock};
use tokio::sync::watch;

use crate::cases::support::queues::REAL_PATIENCE;

/// A [`ManualClock`] that also counts the sleeps started on it, so a test can tell
/// that a long poll is waiting before it publishes or moves the clock.
pub(crate) struct WatchedClock {
    pub(crate) clock: ManualClock,
    sleeps: watch::Sender<u64>,
}

impl WatchedClock {
    pub(crate) fn new(now_ms: i64) -> Self {
        Self { clock: ManualClock::new(now_ms), sleeps: watch::Sender::new(0) }
    }

    pub(crate) fn sleeps(&self) -> u64 {
        *self.sleeps.borrow()
    }

    /// Resolves once more than `before` sleeps have been started.
    pub(crate) async fn slept_more_than(&self, before: u64) {
        let mut sleeps = self.sleeps.subscribe();
        tokio::time::timeout(REAL_PATIENCE, sleeps.wait_for(|n| *n > before))
            .await
            .expect("the receive never started waiting on the clock")
            .expect("clock alive");
    }
}

impl Clock for WatchedClock {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn sleep(&self, ms: u64) -> Sleep {
        self.sleeps.send_modify(|n| *n += 1);
        self.clock.sleep(ms)
    }
}
