//! The history of one run: every operation started and answered, every fault, every
//! crash, in order. Its hash is what "the same seed gives the same history" compares.

use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Inner {
    lines: Vec<String>,
    hash: u64,
    keep: bool,
    count: u64,
}

/// Shared by the scheduler and the fault layer.
#[derive(Clone, Default)]
pub struct Trace {
    inner: Arc<Mutex<Inner>>,
}

impl Trace {
    /// `keep`: store every line (for `--trace` and the determinism test); the hash is always kept.
    pub fn new(keep: bool) -> Self {
        let t = Self::default();
        {
            let mut i = t.inner.lock().unwrap();
            i.keep = keep;
            i.hash = 0xcbf2_9ce4_8422_2325;
        }
        t
    }

    pub fn line(&self, line: String) {
        let mut i = self.inner.lock().unwrap();
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            i.hash ^= u64::from(b);
            i.hash = i.hash.wrapping_mul(0x0100_0000_01b3);
        }
        i.count += 1;
        if i.keep {
            i.lines.push(line);
        }
    }

    pub fn hash(&self) -> u64 {
        self.inner.lock().unwrap().hash
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap().count
    }

    pub fn lines(&self) -> Vec<String> {
        self.inner.lock().unwrap().lines.clone()
    }
}
