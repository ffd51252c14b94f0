//! Large buffers kept for the next use: a replay's answer (about 1.5 MB for 1,000 events
//! of 1 KiB) and a group commit's blob.
//!
//! `serve`'s allocator hands freed memory back to the OS at once (mimalloc's `purge_delay`
//! 0, for the resident size: docs/PERFORMANCE.md), so a fresh buffer of a megabyte is
//! faulted in and zeroed by the kernel a page at a time as it is written, then unmapped
//! when freed: `perf` put that at a fifth of the server's CPU under a replay and a
//! batched publish. A pool keeps a few such buffers, within a budget of bytes, so their
//! pages stay mapped; small buffers and everything else are left to the allocator (so a
//! small blob, whose slices an index item may keep, never holds a large buffer). A buffer
//! comes back only once the last [`Bytes`] made from it is dropped, so nothing still read
//! is overwritten.

use std::sync::Mutex;

use bytes::Bytes;

/// Empty buffers of at least `min_bytes` kept for reuse, their capacities within
/// `max_bytes` together.
pub struct BufferPool {
    kept: Mutex<Vec<Vec<u8>>>,
    min_bytes: usize,
    max_bytes: usize,
}

impl BufferPool {
    /// A pool keeping buffers of `min_bytes` or more, at most `max_bytes` of them (0 keeps none).
    pub const fn new(min_bytes: usize, max_bytes: usize) -> Self {
        Self { kept: Mutex::new(Vec::new()), min_bytes, max_bytes }
    }

    /// An empty buffer with room for `capacity` bytes: the smallest kept one that has it,
    /// or a new one (always for less than `min_bytes`).
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity < self.min_bytes {
            return Vec::with_capacity(capacity);
        }
        let mut kept = self.lock();
        let fits = kept.iter().enumerate().filter(|(_, b)| b.capacity() >= capacity).min_by_key(|(_, b)| b.capacity());
        match fits.map(|(i, _)| i) {
            Some(i) => kept.swap_remove(i),
            None => Vec::with_capacity(capacity),
        }
    }

    /// `buf`'s bytes, given back to this pool once the last `Bytes` sharing them is dropped.
    pub fn freeze(&'static self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Returned { buf, pool: self })
    }

    /// Keeps `buf` (emptied) if the budget allows, giving up the smallest kept buffers for it.
    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() < self.min_bytes || buf.capacity() > self.max_bytes {
            return;
        }
        buf.clear();
        let mut kept = self.lock();
        kept.push(buf);
        kept.sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut total = 0;
        kept.retain(|b| {
            total += b.capacity();
            total <= self.max_bytes
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn kept_capacities(&self) -> Vec<usize> {
        self.lock().iter().map(Vec::capacity).collect()
    }
}

/// A pooled buffer lent to `Bytes`: back to its pool when they are all dropped.
struct Returned {
    buf: Vec<u8>,
    pool: &'static BufferPool,
}

impl AsRef<[u8]> for Returned {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_only_after_its_last_bytes_are_dropped_and_is_taken_again() {
        static POOL: BufferPool = BufferPool::new(100, 1 << 20);
        let mut buf = POOL.take(1000);
        buf.extend_from_slice(b"answer");
        let (ptr, capacity) = (buf.as_ptr(), buf.capacity());
        let bytes = POOL.freeze(buf);
        let part = bytes.slice(1..3);
        drop(bytes);
        assert!(POOL.kept_capacities().is_empty(), "a slice still reads it");
        assert_eq!(part, "ns");
        drop(part);
        assert_eq!(POOL.kept_capacities(), vec![capacity]);
        let again = POOL.take(500);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0), "the same memory, emptied");
        assert!(POOL.take(capacity + 1).capacity() > capacity, "too small: a new one");
    }

    #[test]
    fn small_buffers_are_neither_kept_nor_handed_out() {
        static POOL: BufferPool = BufferPool::new(100, 1 << 20);
        drop(POOL.freeze(Vec::with_capacity(99)));
        assert!(POOL.kept_capacities().is_empty());
        drop(POOL.freeze(Vec::with_capacity(5000)));
        assert_eq!(POOL.take(10).capacity(), 10, "a small answer takes no kept buffer");
        assert_eq!(POOL.kept_capacities(), vec![5000]);
    }

    #[test]
    fn the_pool_keeps_the_largest_buffers_within_its_budget() {
        static POOL: BufferPool = BufferPool::new(100, 1000);
        for capacity in [300, 2000, 400, 500] {
            drop(POOL.freeze(Vec::with_capacity(capacity)));
        }
        let mut kept = POOL.kept_capacities();
        kept.sort_unstable();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept[0] >= 400 && kept.iter().sum::<usize>() <= 1000, "{kept:?}");
        assert!(POOL.take(450).capacity() >= 450);
    }
}
