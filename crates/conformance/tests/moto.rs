//! Every conformance suite on the AWS adapters (S3 + DynamoDB) against moto's
//! server, and what each port call costs in DynamoDB requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use sluice_aws::DynamoStateStore;
use sluice_conformance::moto::adapters;
use sluice_conformance::unique_topic;
use sluice_core::ports::state::{Expect, Key, Query, StateStore, WriteOp};
use sluice_core::{StorageError, SystemClock};

async fn moto() -> sluice_conformance::moto::MotoBackend {
    sluice_conformance::moto::MotoBackend
}

mod store {
    use sluice_conformance::store::Purge;

    use super::moto;

    sluice_conformance::store_conformance_suite!(moto(), Purge::LeavesToStore);
}

mod log {
    use super::moto;

    sluice_conformance::log_conformance_suite!(moto());
}

mod group {
    use super::moto;

    sluice_conformance::group_conformance_suite!(moto());
}

mod queue {
    use super::moto;

    sluice_conformance::queue_conformance_suite!(moto());
}

mod lost_answer {
    use super::moto;

    // Its janitor cases see only their own topics and objects, so they share this server.
    sluice_conformance::lost_answer_conformance_suite!(moto());
}

// The retention suite runs against a moto server of its own (tests/moto_retention.rs): its
// janitors work on every topic and object of their backend.

/// The requests `store` sent since `before` was taken, by operation.
fn sent_since(store: &DynamoStateStore, before: &BTreeMap<&'static str, u64>) -> Vec<(&'static str, u64)> {
    let now = store.requests().snapshot();
    now.into_iter().map(|(op, n)| (op, n - before.get(op).copied().unwrap_or(0))).filter(|&(_, n)| n > 0).collect()
}

/// Each port call costs the requests `sluice_aws::state`'s module header promises.
#[tokio::test]
async fn given_each_port_call_then_it_sends_the_dynamodb_requests_documented() {
    let (store, _) = adapters(&sluice_conformance::moto::moto().settings, Arc::new(SystemClock)).await;
    let pk = unique_topic("requests");
    let (a, b) = (Key::new(&pk, "a"), Key::new(&pk, "b"));
    let value = || Bytes::from_static(b"x");
    let put = |key: &Key, expect| WriteOp::Put { key: key.clone(), value: value(), expires_at_ms: None, expect };

    let before = store.requests().snapshot();
    store.write(vec![WriteOp::create(a.clone(), value())]).await.expect("create");
    assert_eq!(sent_since(&store, &before), [("dynamodb:UpdateItem", 1)], "one put: UpdateItem");

    let before = store.requests().snapshot();
    let lost = store.write(vec![WriteOp::create(a.clone(), value())]).await;
    assert!(matches!(lost, Err(StorageError::ConditionFailed { op: 0, .. })), "{lost:?}");
    assert_eq!(sent_since(&store, &before), [("dynamodb:UpdateItem", 1)], "a failed condition is not retried");

    let before = store.requests().snapshot();
    let ops = vec![WriteOp::Check { key: b.clone(), expect: Expect::Any }, put(&a, Expect::Version(1))];
    store.write(ops).await.expect("put beside an unconditional check");
    assert_eq!(sent_since(&store, &before), [("dynamodb:UpdateItem", 1)], "an unconditional check is not sent");

    let before = store.requests().snapshot();
    store.write(vec![WriteOp::create(b.clone(), value()), put(&a, Expect::Version(2))]).await.expect("two puts");
    assert_eq!(sent_since(&store, &before), [("dynamodb:TransactWriteItems", 1)], "several ops: one transaction");

    let before = store.requests().snapshot();
    store.write(vec![WriteOp::Check { key: a.clone(), expect: Expect::Version(3) }]).await.expect("lone check");
    assert_eq!(sent_since(&store, &before), [("dynamodb:TransactWriteItems", 1)], "a lone check");

    let before = store.requests().snapshot();
    store.write(vec![WriteOp::Delete { key: b.clone(), expect: Expect::Version(1) }]).await.expect("delete");
    assert_eq!(sent_since(&store, &before), [("dynamodb:DeleteItem", 1)], "one delete: DeleteItem");

    let before = store.requests().snapshot();
    store.write(Vec::new()).await.expect("empty write");
    let too_many: Vec<WriteOp> = (0..101).map(|i| WriteOp::create(Key::new(&pk, format!("{i:03}")), value())).collect();
    assert!(matches!(store.write(too_many).await, Err(StorageError::Invalid(_))));
    assert_eq!(store.purge_expired(100).await.expect("purge"), 0);
    assert_eq!(sent_since(&store, &before), [], "refused, empty or TTL's work: nothing sent");

    let before = store.requests().snapshot();
    assert_eq!(store.get(&a).await.expect("get").map(|i| i.version), Some(3));
    assert_eq!(store.query(&Query::all(&pk, 10)).await.expect("query").items.len(), 1);
    assert_eq!(sent_since(&store, &before), [("dynamodb:GetItem", 1), ("dynamodb:Query", 1)]);

    let keys: Vec<Key> = (0..60).map(|i| Key::new(&pk, format!("{i:03}"))).collect();
    let before = store.requests().snapshot();
    store.delete_many(keys).await.expect("delete_many");
    assert_eq!(sent_since(&store, &before), [("dynamodb:BatchWriteItem", 3)], "25 keys per BatchWriteItem");
}

mod objects {
    use super::moto;

    sluice_conformance::objects_conformance_suite!(moto());
}
