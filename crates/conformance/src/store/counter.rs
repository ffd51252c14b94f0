//! Handles racing on one counter under version conditions.

use std::time::Duration;

use sluice_core::ports::state::{Key, StateStore, WriteOp};
use sluice_core::StorageError;

use super::fixtures::*;
use crate::{unique_topic, Backend};

/// Increments `counter` by one: read it, write the next value over the version read, again on a lost race.
async fn increment(store: &dyn StateStore, counter: &Key) -> u32 {
    let mut lost = 0;
    loop {
        let read = get(store, counter).await;
        let value: u64 = read.as_ref().map_or(0, |i| std::str::from_utf8(&i.value).unwrap().parse().unwrap());
        let op = WriteOp::replace(counter.clone(), bytes(&(value + 1).to_string()), read.map(|i| i.version));
        match store.write(vec![op]).await {
            Ok(()) => return lost,
            Err(StorageError::ConditionFailed { op: 0, .. }) => lost += 1,
            Err(StorageError::Throttled { .. }) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("increment: {e:?}"),
        }
    }
}

pub async fn given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost(
    backend: &dyn Backend,
) {
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 10;
    let counter = key(&unique_topic("counter"), "n");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (store, _) = backend.open().await;
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut lost = 0;
            for _ in 0..INCREMENTS {
                lost += increment(store.as_ref(), &counter).await;
            }
            lost
        }));
    }
    let mut lost = 0;
    for task in tasks {
        lost += task.await.expect("task");
    }
    let (store, _) = backend.open().await;
    let total = TASKS * INCREMENTS;
    assert_eq!(value_version(store.as_ref(), &counter).await, Some((bytes(&total.to_string()), total)));
    // Not asserted (scheduling decides), but a run without races would test nothing.
    eprintln!("{lost} races lost and retried");
}
