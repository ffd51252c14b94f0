//! What every modelled service shares: virtual time, one seeded source of latency, the
//! meter, the trace, and rate buckets. Time is tokio's, paused: the runtime jumps to the
//! next timer whenever every task waits, so a run of minutes takes seconds, and on one
//! thread the same seed gives the same history.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::clock::Sleep;
use sluice_core::Clock;

use super::meter::Meter;
use super::params::Dist;
use crate::rng::Rng;

/// The virtual clock's start (2026-01-01), as the fault simulation's.
pub const T0: i64 = 1_767_225_600_000;

/// The core's clock over tokio's paused time.
pub struct VirtualClock {
    start: tokio::time::Instant,
}

impl Default for VirtualClock {
    /// Starts now: call it inside the runtime whose paused time it reads.
    fn default() -> Self {
        Self { start: tokio::time::Instant::now() }
    }
}

impl VirtualClock {
    /// Milliseconds since the run began, with tokio's precision.
    pub fn elapsed_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> i64 {
        T0 + self.start.elapsed().as_millis() as i64
    }

    fn sleep(&self, ms: u64) -> Sleep {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// A token bucket: `rate` per second, holding at most `burst`.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    at_ms: f64,
    rate: f64,
    burst: f64,
}

impl Bucket {
    pub fn new(rate: f64, burst: f64) -> Self {
        Self { tokens: burst, at_ms: 0.0, rate, burst }
    }

    /// Whether `n` tokens could be taken at `now_ms`.
    pub fn room(&mut self, now_ms: f64, n: f64) -> bool {
        self.tokens = (self.tokens + (now_ms - self.at_ms).max(0.0) * self.rate / 1000.0).min(self.burst);
        self.at_ms = now_ms;
        self.tokens >= n || self.tokens >= self.burst
    }

    /// Takes `n` tokens at `now_ms` if there are that many; a request larger than the
    /// burst passes when the bucket is full (it then runs a debt).
    pub fn take(&mut self, now_ms: f64, n: f64) -> bool {
        if self.room(now_ms, n) {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// Buckets by name, made on first use.
#[derive(Debug)]
pub struct Buckets<K> {
    map: HashMap<K, Bucket>,
}

impl<K> Default for Buckets<K> {
    fn default() -> Self {
        Self { map: HashMap::new() }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    pub fn room(&mut self, key: &K, now_ms: f64, n: f64, rate: f64) -> bool {
        self.map.entry(key.clone()).or_insert_with(|| Bucket::new(rate, rate)).room(now_ms, n)
    }

    pub fn take(&mut self, key: K, now_ms: f64, n: f64, rate: f64) -> bool {
        self.map.entry(key).or_insert_with(|| Bucket::new(rate, rate)).take(now_ms, n)
    }
}

/// The shared services' clock, chance, meter and trace.
pub struct Cloud {
    pub clock: Arc<VirtualClock>,
    rng: Mutex<Rng>,
    pub meter: Mutex<Meter>,
    trace: bool,
}

impl Cloud {
    pub fn new(seed: u64, trace: bool) -> Arc<Self> {
        Arc::new(Self {
            clock: Arc::new(VirtualClock::default()),
            rng: Mutex::new(Rng::new(seed)),
            meter: Mutex::new(Meter::default()),
            trace,
        })
    }

    pub fn now_ms(&self) -> f64 {
        self.clock.elapsed_ms()
    }

    pub fn draw(&self, dist: &Dist) -> f64 {
        dist.draw(&mut self.rng.lock().unwrap())
    }

    pub fn next_u64(&self) -> u64 {
        self.rng.lock().unwrap().next_u64()
    }

    /// Waits `ms` of virtual time (tokio's timers round up to the millisecond).
    pub async fn wait(&self, ms: f64) {
        if ms > 0.0 {
            tokio::time::sleep(Duration::from_micros((ms * 1000.0) as u64)).await;
        }
    }

    /// Waits a draw of `dist` and answers how long that was.
    pub async fn wait_draw(&self, dist: &Dist) -> f64 {
        let ms = self.draw(dist);
        self.wait(ms).await;
        ms
    }

    pub fn count(&self, f: impl FnOnce(&mut Meter)) {
        f(&mut self.meter.lock().unwrap());
    }

    pub fn tracing(&self) -> bool {
        self.trace
    }

    /// One `--trace` line (on stderr: stdout keeps the one JSON line): when an operation
    /// began, what it was, how long it took and how it ended.
    pub fn trace(&self, began_ms: f64, what: &str, outcome: &str) {
        if self.trace {
            let took = self.now_ms() - began_ms;
            eprintln!("{began_ms:>10.1} ms {took:>8.1} ms {what} {outcome}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate() {
        let mut b = Bucket::new(1000.0, 1000.0);
        assert!((0..1000).all(|_| b.take(0.0, 1.0)));
        assert!(!b.take(0.0, 1.0), "the burst is spent");
        assert!(b.take(1.0, 1.0), "one token back each millisecond");
        assert!(!b.take(1.0, 1.0));
    }
}
