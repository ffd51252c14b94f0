//! The simulation's clock: [`sluice_core::ManualClock`]'s behaviour (time moves only when
//! told; sleepers wake once it passes their deadline), with sleepers woken in a fixed order.
//!
//! `ManualClock` wakes its sleepers through a `tokio::sync::watch` channel, whose waiters sit
//! in one of several lists picked at random (tokio's `BigNotify`, seeded from the OS unless
//! the runtime is built with `rng_seed` under `--cfg tokio_unstable`): sleepers woken by one
//! `advance` are then scheduled in a different order on every run, and a history is not
//! reproducible. Here sleepers wake in (deadline, registration) order.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use sluice_core::clock::Sleep;
use sluice_core::Clock;

#[derive(Default)]
struct Inner {
    now: i64,
    next: u64,
    sleepers: BTreeMap<(i64, u64), Waker>,
}

/// A manual clock with deterministic wake-ups.
#[derive(Clone)]
pub struct SimClock {
    inner: Arc<Mutex<Inner>>,
}

impl SimClock {
    pub fn new(now_ms: i64) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner { now: now_ms, ..Inner::default() })) }
    }

    /// Moves the clock forward by `ms`, waking every sleeper whose deadline has come, earliest first.
    pub fn advance(&self, ms: i64) {
        let wakers: Vec<Waker> = {
            let mut i = self.inner.lock().unwrap();
            i.now += ms.max(0);
            let now = i.now;
            let due: Vec<(i64, u64)> = i.sleepers.range(..(now + 1, 0)).map(|(k, _)| *k).collect();
            due.iter().filter_map(|k| i.sleepers.remove(k)).collect()
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Sleepers waiting.
    pub fn sleepers(&self) -> usize {
        self.inner.lock().unwrap().sleepers.len()
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.inner.lock().unwrap().now
    }

    fn sleep(&self, ms: u64) -> Sleep {
        let deadline = self.now_ms().saturating_add(ms as i64);
        Box::pin(Sleeper { inner: self.inner.clone(), deadline, key: None })
    }
}

struct Sleeper {
    inner: Arc<Mutex<Inner>>,
    deadline: i64,
    key: Option<(i64, u64)>,
}

impl Future for Sleeper {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        let mut i = self.inner.lock().unwrap();
        if i.now >= deadline {
            if let Some(k) = self.key {
                i.sleepers.remove(&k);
            }
            drop(i);
            self.key = None;
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(k) => k,
            None => {
                i.next += 1;
                (deadline, i.next)
            }
        };
        i.sleepers.insert(key, cx.waker().clone());
        drop(i);
        self.key = Some(key);
        Poll::Pending
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            self.inner.lock().unwrap().sleepers.remove(&k);
        }
    }
}
