//! The AWS adapters under the failures AWS and the network cause (a `500`, an answer lost,
//! S3's `403` for a missing key), injected between the SDK and moto
//! ([`sluice_conformance::http_faults`]); a moto server of this binary's own.

use std::sync::Arc;

use bytes::Bytes;
use sluice_aws::{DynamoStateStore, S3ObjectStore};
use sluice_conformance::http_faults::{Fault, Faults};
use sluice_conformance::moto::{adapters_over, moto};
use sluice_conformance::unique_topic;
use sluice_core::ports::state::{Key, Query, StateStore, WriteOp};
use sluice_core::{ObjectStore, StorageError, SystemClock};

async fn faulty() -> (Faults, Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    let faults = Faults::default();
    let http = faults.client(sluice_aws::http_client());
    let (state, objects) = adapters_over(&moto().settings, Arc::new(SystemClock), http).await;
    (faults, state, objects)
}

fn tokens(faults: &Faults) -> Vec<String> {
    let seen = faults.seen().into_iter().filter(|s| s.operation == "dynamodb:TransactWriteItems");
    seen.map(|s| serde_json::from_str::<serde_json::Value>(&s.body).expect("a JSON body"))
        .map(|body| body["ClientRequestToken"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Reads that meet a transient `500` are sent again and succeed, each attempt counted.
#[tokio::test]
async fn given_a_transient_500_when_reading_then_the_read_is_sent_again_and_succeeds() {
    let (faults, state, objects) = faulty().await;
    let pk = unique_topic("retries");
    let key = Key::new(&pk, "a");
    state.write(vec![WriteOp::create(key.clone(), Bytes::from_static(b"x"))]).await.expect("create");
    let blob = objects.put(Bytes::from_static(b"0123456789")).await.expect("put");
    for operation in ["dynamodb:GetItem", "dynamodb:Query", "s3:GetObject", "s3:ListObjectsV2"] {
        faults.inject(operation, Fault::Refuse, 1);
    }
    let before = (state.requests().snapshot(), objects.requests().snapshot());

    assert_eq!(state.get(&key).await.expect("get").map(|i| i.version), Some(1));
    assert_eq!(state.query(&Query::all(&pk, 10)).await.expect("query").items.len(), 1);
    assert_eq!(objects.read(&blob.object, 2, 3).await.expect("read"), Bytes::from_static(b"234"));
    objects.list(None, 1).await.expect("list");

    let sent = |now: u64, before: Option<&u64>| now - before.copied().unwrap_or(0);
    for op in ["dynamodb:GetItem", "dynamodb:Query"] {
        assert_eq!(sent(state.requests().get(op), before.0.get(op)), 2, "{op}: the refused attempt is counted");
    }
    for op in ["s3:GetObject", "s3:ListObjectsV2"] {
        assert_eq!(sent(objects.requests().get(op), before.1.get(op)), 2, "{op}: the refused attempt is counted");
    }
}

/// A transaction applied whose answer is lost is sent again under the same
/// `ClientRequestToken`, answered as the first (DynamoDB's documented idempotency, which
/// the fault layer keeps since moto does not), and so succeeds and is applied once; the
/// next transaction has a token of its own.
#[tokio::test]
async fn given_a_transaction_whose_answer_is_lost_then_it_is_sent_again_under_its_token_and_applied_once() {
    let (faults, state, _) = faulty().await;
    let pk = unique_topic("token");
    let (a, b) = (Key::new(&pk, "a"), Key::new(&pk, "b"));
    faults.inject("dynamodb:TransactWriteItems", Fault::LoseAnswer, 1);
    let create = |k: &Key| WriteOp::create(k.clone(), Bytes::from_static(b"x"));
    state.write(vec![create(&a), create(&b)]).await.expect("the write's resend is answered as the write was");
    assert_eq!(state.requests().get("dynamodb:TransactWriteItems"), 2, "sent, answer lost, sent again");
    assert_eq!(state.get(&a).await.expect("get").map(|i| i.version), Some(1), "applied once");

    faults.inject("dynamodb:TransactWriteItems", Fault::Refuse, 1);
    let put = |k: &Key| WriteOp::Put {
        key: k.clone(),
        value: Bytes::from_static(b"y"),
        expires_at_ms: None,
        expect: sluice_core::ports::state::Expect::Version(1),
    };
    state.write(vec![put(&a), put(&b)]).await.expect("a refused transaction is sent again");
    assert_eq!(state.get(&b).await.expect("get").map(|i| i.version), Some(2), "applied once");
    let tokens = tokens(&faults);
    assert_eq!(tokens.len(), 4, "{tokens:?}");
    assert!(tokens.iter().all(|t| !t.is_empty() && t.len() <= 36), "{tokens:?}");
    assert_eq!((tokens[0] == tokens[1], tokens[2] == tokens[3], tokens[1] == tokens[2]), (true, true, false));
}

/// A conditional single-item write is not sent again after its answer is lost: a repeat
/// would fail its own condition and report a lost race. Its outcome is unknown.
#[tokio::test]
async fn given_a_conditional_put_whose_answer_is_lost_then_unavailable_not_a_lost_race() {
    let (faults, state, _) = faulty().await;
    let key = Key::new(unique_topic("put"), "a");
    faults.inject("dynamodb:UpdateItem", Fault::LoseAnswer, 1);
    let lost = state.write(vec![WriteOp::create(key.clone(), Bytes::from_static(b"x"))]).await;
    assert!(matches!(lost, Err(StorageError::Unavailable { .. })), "{lost:?}");
    assert_eq!(state.requests().get("dynamodb:UpdateItem"), 1);
}

/// S3's answers for a missing object map to `NotFound` with `s3:ListBucket` (a `404`) and
/// without it (a `403`); a `403` for an object that exists is not taken for a missing one.
#[tokio::test]
async fn given_a_missing_object_then_not_found_with_or_without_list_bucket_and_a_real_refusal_stays_one() {
    let (faults, _, objects) = faulty().await;
    let blob = objects.put(Bytes::from_static(b"0123456789")).await.expect("put");
    let missing = format!("segments/0000000000000-{:032x}", rand::random::<u128>());

    let found = objects.read(&missing, 0, 4).await;
    assert!(matches!(found, Err(StorageError::NotFound(_))), "a 404: {found:?}");

    faults.inject("s3:GetObject", Fault::NoListBucket, usize::MAX);
    faults.inject("s3:ListObjectsV2", Fault::NoListBucket, usize::MAX);
    let found = objects.read(&missing, 0, 4).await;
    assert!(matches!(found, Err(StorageError::NotFound(_))), "a 403 without s3:ListBucket: {found:?}");
    assert_eq!(objects.read(&blob.object, 0, 4).await.expect("an object that exists"), Bytes::from_static(b"0123"));
    faults.clear();

    faults.inject("s3:GetObject", Fault::DenyGet, usize::MAX);
    let refused = objects.read(&blob.object, 0, 4).await;
    assert!(matches!(refused, Err(StorageError::Unavailable { .. })), "a real refusal: {refused:?}");
    let found = objects.read(&missing, 0, 4).await;
    assert!(matches!(found, Err(StorageError::NotFound(_))), "listed as absent: {found:?}");
    faults.clear();
}
