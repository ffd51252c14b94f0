//! Receives racing a change of their subscription (a pause, a PATCH): eight tasks, half of
//! them caching subscriptions as `serve` does, each noting whether the change had answered
//! before its receive started, so a case can check what no late receive may see.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sluice_core::queues::{Message, Queues};
use sluice_core::Log;

use super::queues::receive;

/// What the race saw.
pub(crate) struct Race {
    /// The messages of receives that started after the change answered.
    pub late: Vec<Message>,
    /// How many messages had been taken when the change answered.
    pub at_answer: usize,
    /// How many were taken in all.
    pub taken: usize,
}

/// Races receives of batches of 3 against `change`, run once a tenth of `total` (the queue's
/// messages, published before) is taken; half the queue is left for after the change, so a
/// late receive has something to take. Ends once every task has made five receives that
/// started after the change answered.
pub(crate) async fn receives_racing(
    log: &Log,
    topic: &str,
    sub: &str,
    total: usize,
    change: impl Future<Output = ()>,
) -> Race {
    let answered = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicUsize::new(0));
    let late = Arc::new(Mutex::new(Vec::new()));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let q = if w % 2 == 0 { Queues::caching_subscriptions(log.clone()) } else { Queues::new(log.clone()) };
        let (topic, sub) = (topic.to_owned(), sub.to_owned());
        let (answered, received, late) = (answered.clone(), received.clone(), late.clone());
        workers.spawn(async move {
            let mut after = 0;
            while after < 5 {
                let started_after = answered.load(Ordering::SeqCst);
                if !started_after && received.load(Ordering::SeqCst) >= total / 2 {
                    tokio::task::yield_now().await;
                    continue;
                }
                let got = receive(&q, &topic, &sub, 3).await;
                received.fetch_add(got.len(), Ordering::SeqCst);
                if started_after {
                    after += 1;
                    late.lock().unwrap().extend(got);
                }
            }
        });
    }
    while received.load(Ordering::SeqCst) < total / 10 {
        tokio::task::yield_now().await;
    }
    change.await;
    answered.store(true, Ordering::SeqCst);
    let at_answer = received.load(Ordering::SeqCst);
    while workers.join_next().await.is_some() {}
    let late = std::mem::take(&mut *late.lock().unwrap());
    Race { late, at_answer, taken: received.load(Ordering::SeqCst) }
}
