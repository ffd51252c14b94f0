//! Room for the bytes of publishes in flight: what bounds a process's memory whatever the
//! number of connections sending to it ([`super::LogConfig::publish_bytes_in_flight`]).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most room a semaphore can count here (its permits are taken as `u32`).
const MAX_ROOM: usize = (u32::MAX >> 3) as usize;

/// Bytes held by publishes under way, up to a size; one semaphore permit per byte.
pub(crate) struct Room {
    permits: Arc<Semaphore>,
    size: usize,
}

/// Room held for one publish's bytes until it is dropped.
#[must_use = "the room is given back when this is dropped"]
pub struct Admission(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Room {
    pub(crate) fn new(size: usize) -> Self {
        let size = size.clamp(1, MAX_ROOM);
        Self { permits: Arc::new(Semaphore::new(size)), size }
    }

    /// Waits, first come first served, until `bytes` fit, and holds them until the answer
    /// is dropped. More than the whole room waits for all of it; 0 bytes count as 1.
    pub(crate) async fn admit(&self, bytes: usize) -> Admission {
        let wanted = bytes.clamp(1, self.size) as u32;
        // The semaphore is never closed: this always holds a permit.
        Admission(self.permits.clone().acquire_many_owned(wanted).await.ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn given_a_full_room_then_a_publish_waits_until_one_under_way_is_answered() {
        let room = Room::new(100);
        let first = room.admit(80).now_or_never().expect("room for the first");
        let mut second = Box::pin(room.admit(50));
        assert!((&mut second).now_or_never().is_none(), "80 + 50 do not fit in 100");
        drop(first);
        let _second = second.now_or_never().expect("room once the first is answered");
    }

    #[tokio::test]
    async fn given_a_publish_larger_than_the_room_then_it_waits_for_all_of_it_and_gets_it() {
        let room = Room::new(100);
        let small = room.admit(1).now_or_never().expect("room");
        let mut huge = Box::pin(room.admit(10_000));
        assert!((&mut huge).now_or_never().is_none(), "it needs the whole room");
        drop(small);
        let _huge = huge.now_or_never().expect("the whole room, not more");
        assert!(room.admit(0).now_or_never().is_none(), "an empty body still counts one byte");
    }

    #[tokio::test]
    async fn given_waiting_publishes_then_they_are_admitted_first_come_first_served() {
        let room = Room::new(100);
        let held = room.admit(100).now_or_never().expect("room");
        let mut big = Box::pin(room.admit(100));
        let mut small = Box::pin(room.admit(10));
        assert!((&mut big).now_or_never().is_none());
        assert!((&mut small).now_or_never().is_none());
        drop(held);
        // The small one is asked for first here, but the big one came first.
        assert!((&mut small).now_or_never().is_none(), "no overtaking the one in front");
        let big = big.now_or_never().expect("the first in line");
        drop(big);
        let _small = small.now_or_never().expect("then the second");
    }
}
