//! The fault layer's DynamoDB conflict rule (`crates/sim/src/fault/conflict.rs`): while a
//! transaction is in flight, another transaction naming one of its items (a condition check
//! counts) is cancelled and a single-item write to one of them is refused, both `Throttled`
//! and nothing written; reads go through, and writes that do not overlap both apply.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::ports::state::{Expect, Key, StateStore, WriteOp};
use sluice_core::{Clock, StorageError};
use sluice_sim::fault::{Chaos, Fault, FaultConfig, FaultyStore, Life};
use sluice_sim::trace::Trace;
use sluice_testkit::{Layered, MemStore, SimClock};

/// The shared store, the faults' shared state, and two processes' views of the store. Only
/// the conflict rule is on: no random fault, no random yield.
fn world() -> (MemStore, Arc<Chaos>, Layered<FaultyStore>, Layered<FaultyStore>) {
    let clock: Arc<dyn Clock> = Arc::new(SimClock::new(0));
    let mem = MemStore::new(clock.clone());
    let chaos = Arc::new(Chaos::new(1, FaultConfig { enabled: true, ..FaultConfig::default() }, Trace::new(false)));
    let process = |pid: usize| {
        let inner: Arc<dyn StateStore> = Arc::new(mem.handle(clock.clone()));
        Layered::new(inner, FaultyStore::new(chaos.clone(), Life::new(pid, pid as u64)))
    };
    let (a, b) = (process(0), process(1));
    (mem, chaos, a, b)
}

fn key(sk: &str) -> Key {
    Key::new("head", sk)
}

fn put(sk: &str, value: &'static str) -> WriteOp {
    WriteOp::Put { key: key(sk), value: Bytes::from_static(value.as_bytes()), expires_at_ms: None, expect: Expect::Any }
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

fn fired(chaos: &Chaos, fault: Fault) -> u64 {
    chaos.fired().get(&fault).copied().unwrap_or(0)
}

#[test]
fn given_two_overlapping_transactions_on_one_item_then_only_the_first_applies() {
    run(async {
        let (mem, chaos, a, b) = world();
        // Both name item "0"; each also creates an item of its own.
        let first = a.write(vec![put("0", "a"), put("a", "a")]);
        let second = b.write(vec![put("0", "b"), put("b", "b")]);
        let (first, second) = tokio::join!(first, second);
        assert!(first.is_ok(), "{first:?}");
        assert!(matches!(second, Err(StorageError::Throttled { .. })), "{second:?}");
        let shared = mem.get(&key("0")).await.unwrap().expect("the first transaction's item");
        assert_eq!((shared.value.as_ref(), shared.version), (&b"a"[..], 1), "written once, by the first");
        assert!(mem.get(&key("a")).await.unwrap().is_some());
        assert_eq!(mem.get(&key("b")).await.unwrap(), None, "nothing of the cancelled transaction");
        assert_eq!(fired(&chaos, Fault::TransactionConflict), 1);
        // Once the first has ended, the second's retry applies.
        b.write(vec![put("0", "b"), put("b", "b")]).await.expect("no transaction in flight");
        assert_eq!(mem.get(&key("0")).await.unwrap().unwrap().version, 2);
    });
}

#[test]
fn given_a_transaction_in_flight_then_a_condition_check_on_its_item_conflicts_too() {
    run(async {
        let (mem, chaos, a, b) = world();
        let first = a.write(vec![put("0", "a"), put("a", "a")]);
        let checked = b.write(vec![WriteOp::Check { key: key("0"), expect: Expect::Absent }, put("b", "b")]);
        let (first, checked) = tokio::join!(first, checked);
        assert!(first.is_ok(), "{first:?}");
        assert!(matches!(checked, Err(StorageError::Throttled { .. })), "{checked:?}");
        assert_eq!(mem.get(&key("b")).await.unwrap(), None);
        assert_eq!(fired(&chaos, Fault::TransactionConflict), 1);
    });
}

#[test]
fn given_a_transaction_in_flight_then_a_single_write_to_its_item_is_refused_and_a_read_served() {
    run(async {
        let (mem, chaos, a, b) = world();
        let transaction = a.write(vec![put("0", "a"), put("a", "a")]);
        let others = async {
            let read = b.get(&key("0")).await;
            let single = b.write(vec![put("0", "b")]).await;
            let elsewhere = b.write(vec![put("c", "b")]).await;
            (read, single, elsewhere)
        };
        let (transaction, (read, single, elsewhere)) = tokio::join!(transaction, others);
        assert!(transaction.is_ok(), "{transaction:?}");
        assert!(read.is_ok(), "reads never conflict: {read:?}");
        assert!(matches!(single, Err(StorageError::Throttled { .. })), "{single:?}");
        assert!(elsewhere.is_ok(), "an item the transaction does not name: {elsewhere:?}");
        assert_eq!(mem.get(&key("0")).await.unwrap().unwrap().value.as_ref(), b"a");
        assert_eq!(fired(&chaos, Fault::WriteConflict), 1);
    });
}

#[test]
fn given_transactions_one_after_the_other_then_both_apply() {
    run(async {
        let (mem, chaos, a, b) = world();
        a.write(vec![put("0", "a"), put("a", "a")]).await.expect("alone");
        b.write(vec![put("0", "b"), put("b", "b")]).await.expect("after the first ended");
        b.write(vec![put("0", "c")]).await.expect("a single write, no transaction in flight");
        assert_eq!(mem.get(&key("0")).await.unwrap().unwrap().version, 3);
        assert!(chaos.fired().is_empty(), "{:?}", chaos.fired());
    });
}
