//! Time and chance are inputs: the core never reads the system clock or a
//! random generator directly, so timeouts and expiry are tested with a
//! [`ManualClock`] instead of sleeps, and ids with a [`SeededRandom`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A boxed future, as trait objects return them.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Wall-clock time in milliseconds since the Unix epoch, and waiting on it.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;

    /// Resolves once `ms` milliseconds of this clock's time have passed.
    fn sleep(&self, ms: u64) -> Sleep;

    /// Resolves once this clock reads `deadline_ms` or later (at once if it already does).
    /// Unlike `sleep(deadline_ms - now_ms())`, a clock that moves between the two reads
    /// does not push the deadline later: a schedule of ticks stays on time.
    fn sleep_until(&self, deadline_ms: i64) -> Sleep {
        self.sleep((deadline_ms - self.now_ms()).max(0) as u64)
    }
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

// The one place the core may read the system's time (crates/core/clippy.toml bans it elsewhere).
#[allow(clippy::disallowed_methods)]
impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }

    fn sleep(&self, ms: u64) -> Sleep {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// A clock that moves only when told to: for tests of timeouts and expiry.
/// Its sleepers wake when [`ManualClock::advance`] moves it past their deadline.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        Self { now_ms: watch::Sender::new(now_ms) }
    }

    /// Moves the clock forward by `ms`, waking every sleeper whose time has come.
    pub fn advance(&self, ms: i64) {
        self.now_ms.send_modify(|now| *now += ms);
    }

    /// Sets the clock to `now_ms` (forward only: an earlier time is ignored).
    pub fn set(&self, now_ms: i64) {
        self.now_ms.send_modify(|now| *now = (*now).max(now_ms));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now_ms.borrow()
    }

    fn sleep(&self, ms: u64) -> Sleep {
        self.sleep_until(*self.now_ms.borrow() + ms as i64)
    }

    fn sleep_until(&self, deadline: i64) -> Sleep {
        let mut now = self.now_ms.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is dropped, nobody can wake us anyway.
            if now.wait_for(|now| *now >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// A clock on which waiting takes no time: `sleep` moves it forward by its length and ends
/// at once. A long poll under it runs through its wait at full speed, and the same inputs
/// see the same times (request-count tests, fuzz targets).
#[derive(Debug)]
pub struct SteppingClock {
    now_ms: AtomicI64,
}

impl SteppingClock {
    pub fn new(now_ms: i64) -> Self {
        Self { now_ms: AtomicI64::new(now_ms) }
    }
}

impl Clock for SteppingClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    fn sleep(&self, ms: u64) -> Sleep {
        self.now_ms.fetch_add(i64::try_from(ms).unwrap_or(i64::MAX / 4), Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

/// A source of random 64-bit numbers, for ids and jitter.
pub trait Random: Send + Sync + 'static {
    fn next_u64(&self) -> u64;
}

/// The operating system's randomness (through `rand`'s thread generator).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRandom;

// The one place the core may draw the system's randomness (see crates/core/clippy.toml).
#[allow(clippy::disallowed_methods)]
impl Random for SystemRandom {
    fn next_u64(&self) -> u64 {
        rand::random()
    }
}

/// A repeatable sequence (SplitMix64), for tests.
#[derive(Debug, Default)]
pub struct SeededRandom {
    state: AtomicU64,
}

impl SeededRandom {
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }
}

impl Random for SeededRandom {
    fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_only_when_advanced_past_their_deadline() {
        let clock = Arc::new(ManualClock::new(1_000));
        let sleeper = tokio::spawn(clock.sleep(500));
        tokio::task::yield_now().await;
        clock.advance(499);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its time");
        clock.advance(1);
        sleeper.await.unwrap();
        assert_eq!(clock.now_ms(), 1_500);
    }

    #[tokio::test]
    async fn manual_clock_sleep_until_wakes_at_its_deadline_wherever_the_clock_stood() {
        let clock = Arc::new(ManualClock::new(1_000));
        clock.advance(300);
        let sleeper = tokio::spawn(clock.sleep_until(1_500));
        tokio::task::yield_now().await;
        clock.advance(199);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its deadline");
        clock.advance(1);
        sleeper.await.unwrap();
        assert!(clock.sleep_until(1_200).now_or_never().is_some(), "a deadline passed ends at once");
    }

    #[test]
    fn seeded_random_repeats_and_varies() {
        let (a, b) = (SeededRandom::new(7), SeededRandom::new(7));
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(xs, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert!(xs.windows(2).all(|w| w[0] != w[1]));
    }
}
