//! What a work queue costs: receives, acks, releases, dead letters, an empty receive.

use sluice_core::queues::{
    Message, Queues, Rate, ReceiveRequest, SeekTo, StartAt, SubscriptionPatch, SubscriptionSpec,
};

use super::*;

fn receive(max_messages: usize) -> ReceiveRequest {
    ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms: None }
}

fn receipts(got: &[Message]) -> Vec<String> {
    got.iter().map(|m| m.receipt.clone()).collect()
}

#[tokio::test]
async fn queue_requests_per_receive_and_ack_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let counted = counted_log().await;
    let (state, objects, log) = &counted;
    let topic = unique_topic("queue-costs");
    log.create_topic(&topic, TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None }).await.unwrap();
    // Published as batches of 100 keyed events over 8 partitions: ~12 events per segment.
    for batch in 0..20 {
        log.publish(&topic, (0..100).map(|i| kib_event(batch * 100 + i, true)).collect(), None).await.unwrap();
    }
    let queues = Queues::new(log.clone());
    let spec = SubscriptionSpec { start: StartAt::Earliest, ..SubscriptionSpec::default() };
    let (_, create) = counted!(state, objects, queues.create(&topic, "work", spec).await.unwrap());
    per_request("create subscription", &create, 1);
    // The receipt key is read (or made) once per process.
    let first = queues.receive(&topic, "work", &receive(10)).await.unwrap();
    queues.ack(&topic, "work", &first.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>()).await.unwrap();

    receives_and_acks(&counted, &queues, &topic).await;
    settles(&counted, &queues, &topic).await;
    peek_and_ready(&counted, &queues, &topic).await;
    pause_and_resume(&counted, &queues, &topic).await;
    seek_and_purge(&counted, &queues, &topic).await;
    change(&counted, &queues, &topic).await;
    rated(&counted, &queues, &topic).await;
    dead_letters(&counted, &queues, &topic).await;

    // Drain, then an empty receive reads and writes nothing.
    loop {
        let got = queues.receive(&topic, "work", &receive(100)).await.unwrap();
        if got.is_empty() {
            break;
        }
        queues.ack(&topic, "work", &got.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>()).await.unwrap();
    }
    let (_, empty) =
        counted!(state, objects, assert!(queues.receive(&topic, "work", &receive(10)).await.unwrap().is_empty()));
    per_request("queue receive, empty queue (8 partitions)", &empty, 1);
    for op in ["dynamodb:UpdateItem", "dynamodb:TransactWriteItems", "dynamodb:DeleteItem", "s3:GetObject"] {
        assert!(!empty.contains_key(op), "an empty receive writes nothing and reads no object: {empty:?}");
    }
    let (d, describe) = counted!(state, objects, queues.describe(&topic, "work").await.unwrap());
    per_request("describe subscription (8 partitions)", &describe, 1);
    assert_eq!((d.backlog.visible, d.backlog.in_flight), (0, 0));
}

/// Receives of batch 10 and 100, then their acks: about one write each.
async fn receives_and_acks((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    for batch in [10, 100] {
        const ROUNDS: usize = 5;
        let mut received = Vec::new();
        let (_, receives) = counted!(state, objects, {
            for _ in 0..ROUNDS {
                received.push(queues.receive(topic, "work", &receive(batch)).await.unwrap());
            }
        });
        let messages: usize = received.iter().map(Vec::len).sum();
        per_request(&format!("queue receive, batch {batch} ({messages} messages)"), &receives, ROUNDS);
        assert_eq!(messages, ROUNDS * batch);
        let (_, acks) = counted!(state, objects, {
            for got in &received {
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                assert!(queues.ack(topic, "work", &receipts).await.unwrap().iter().all(Result::is_ok));
            }
        });
        per_request(&format!("queue ack, batch {batch}"), &acks, ROUNDS);
        // A receive's messages usually come from one partition: one write takes them.
        let writes = receives.get("dynamodb:TransactWriteItems").copied().unwrap_or(0);
        assert!(writes as usize <= 2 * ROUNDS, "about one write per receive: {receives:?}");
        let ack_writes: u64 = ["dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:TransactWriteItems"]
            .iter()
            .map(|op| acks.get(op).copied().unwrap_or(0))
            .sum();
        assert!(ack_writes as usize <= 2 * ROUNDS, "about one write per ack: {acks:?}");
    }
}

/// Release, extend and ack-next: each settles one lease with one write.
async fn settles((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let got = queues.receive(topic, "work", &receive(10)).await.unwrap();
    let (_, nack) = counted!(state, objects, queues.nack(topic, "work", &receipts(&got), 0).await.unwrap());
    per_request("queue nack, batch 10", &nack, 1);
    let got = queues.receive(topic, "work", &receive(10)).await.unwrap();
    let (renewed, visibility) =
        counted!(state, objects, queues.change_visibility(topic, "work", &receipts(&got), 60_000).await.unwrap());
    per_request("queue visibility change, batch 10", &visibility, 1);
    let renewed: Vec<String> = renewed.into_iter().map(|r| r.unwrap().unwrap()).collect();
    queues.ack(topic, "work", &renewed).await.unwrap();
    let held = queues.receive(topic, "work", &receive(10)).await.unwrap();
    let ((acks, next), ack_next) =
        counted!(state, objects, queues.ack_and_receive(topic, "work", &receipts(&held), &receive(10)).await.unwrap());
    per_request("queue receive carrying the previous batch's acks, batch 10", &ack_next, 1);
    assert!(acks.iter().all(Result::is_ok) && next.len() == 10);
    queues.ack(topic, "work", &receipts(&next)).await.unwrap();
    // A release or a move is one write: the lease out of the cursor item, the moved messages
    // into a lease item of their own.
    assert_eq!(nack.get("dynamodb:TransactWriteItems"), Some(&1), "{nack:?}");
    assert_eq!(visibility.get("dynamodb:TransactWriteItems"), Some(&1), "{visibility:?}");
    // The acks ride on the receive's one write: the cursor item, with the leases in it.
    // Topic and subscription read once, and the head of the partition the acks ride on alone
    // (a `GetItem`, where every head is a `Query`).
    assert_eq!(ack_next.get("dynamodb:GetItem"), Some(&3), "topic, subscription, one head: {ack_next:?}");
    assert_eq!(ack_next.get("dynamodb:UpdateItem"), Some(&1), "one write: {ack_next:?}");
    assert_eq!(ack_next.get("dynamodb:TransactWriteItems"), None, "one write: {ack_next:?}");
}

/// A peek of 10 (reads only) and `/readyz`'s read of the store: what a dashboard or a
/// load balancer polling them costs.
async fn peek_and_ready((state, objects, log): &Counted, queues: &Queues, topic: &str) {
    const ROUNDS: usize = 5;
    let (_, peeks) = counted!(state, objects, {
        for _ in 0..ROUNDS {
            assert_eq!(queues.peek(topic, "work", 10).await.unwrap().len(), 10);
        }
    });
    per_request("queue peek, 10 messages (8 partitions)", &peeks, ROUNDS);
    for op in ["dynamodb:UpdateItem", "dynamodb:TransactWriteItems", "dynamodb:DeleteItem", "dynamodb:PutItem"] {
        assert!(!peeks.contains_key(op), "a peek writes nothing: {peeks:?}");
    }
    let (_, ready) = counted!(state, objects, log.ready().await.unwrap());
    per_request("readyz", &ready, 1);
    assert_eq!(requests(&ready), Counts::from([("dynamodb:Query", 1)]), "one query of one item: {ready:?}");
}

/// A pause and a resume of 8 partitions: each reads and rewrites every cursor, then the
/// record (the route then answers a describe); a receive while paused writes nothing.
async fn pause_and_resume((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let (_, pause) = counted!(state, objects, queues.pause(topic, "work").await.unwrap());
    per_request("pause subscription (8 partitions)", &pause, 1);
    let (_, again) = counted!(state, objects, queues.pause(topic, "work").await.unwrap());
    per_request("pause subscription, already paused (8 partitions)", &again, 1);
    let (_, paused) =
        counted!(state, objects, assert!(queues.receive(topic, "work", &receive(10)).await.unwrap().is_empty()));
    per_request("queue receive, paused (8 partitions)", &paused, 1);
    let (_, resume) = counted!(state, objects, queues.resume(topic, "work").await.unwrap());
    per_request("resume subscription (8 partitions)", &resume, 1);
    for op in ["dynamodb:UpdateItem", "dynamodb:TransactWriteItems", "dynamodb:DeleteItem", "s3:GetObject"] {
        assert!(!paused.contains_key(op), "a paused receive writes nothing and reads no object: {paused:?}");
        assert!(!again.contains_key(op), "pausing a paused subscription writes nothing: {again:?}");
    }
    for (what, counts) in [("pause", &pause), ("resume", &resume)] {
        let writes = counts.get("dynamodb:UpdateItem").copied().unwrap_or_default()
            + counts.get("dynamodb:PutItem").copied().unwrap_or_default();
        assert_eq!(writes, 9, "a {what} writes 8 cursors and the record: {counts:?}");
    }
}

/// A seek of 8 partitions, its dry run first, then a purge: each partition read whole
/// with its head, then moved in one write (a dry run writes nothing).
async fn seek_and_purge((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let (dry, counts) = counted!(state, objects, queues.seek(topic, "work", &SeekTo::Earliest, true).await.unwrap());
    per_request("seek subscription, dry run (8 partitions)", &counts, 1);
    for op in ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:TransactWriteItems", "dynamodb:DeleteItem"] {
        assert!(!counts.contains_key(op), "a dry run writes nothing: {counts:?}");
    }
    let (real, counts) = counted!(state, objects, queues.seek(topic, "work", &SeekTo::Earliest, false).await.unwrap());
    per_request("seek subscription to earliest (8 partitions)", &counts, 1);
    assert_eq!((real.redeliver, real.skip), (dry.redeliver, dry.skip), "the dry run counted what the seek did");
    let (_, counts) = counted!(state, objects, queues.purge(topic, "work").await.unwrap());
    per_request("purge subscription (8 partitions)", &counts, 1);
    let writes = ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:TransactWriteItems"]
        .iter()
        .map(|op| counts.get(*op).copied().unwrap_or_default())
        .sum::<u64>();
    assert_eq!(writes, 8, "one write per partition: {counts:?}");
}

/// A change of settings on 8 partitions: it reads and marks every cursor, then writes the
/// record (the route then answers a describe); the same change again reads the cursors (a
/// failed change's marks are written over) and writes nothing.
async fn change((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let longer = SubscriptionPatch { visibility_timeout_ms: Some(45_000), ..SubscriptionPatch::default() };
    let (_, changed) = counted!(state, objects, queues.patch(topic, "work", &longer).await.unwrap());
    per_request("change subscription settings (8 partitions)", &changed, 1);
    let (_, again) = counted!(state, objects, queues.patch(topic, "work", &longer).await.unwrap());
    per_request("change subscription settings, already so (8 partitions)", &again, 1);
    let writes = changed.get("dynamodb:UpdateItem").copied().unwrap_or_default()
        + changed.get("dynamodb:PutItem").copied().unwrap_or_default();
    assert_eq!(writes, 9, "a change writes 8 cursors and the record: {changed:?}");
    for op in ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:TransactWriteItems"] {
        assert!(!again.contains_key(op), "the same change again writes nothing: {again:?}");
    }
}

/// Dead letters: a queue whose messages die at their first expiry, listed, redriven, purged,
/// and the subscription deleted and purged by the janitor.
async fn dead_letters((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let dying = SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: 0,
        max_receive_count: 1,
        ..SubscriptionSpec::default()
    };
    queues.create(topic, "dying", dying).await.unwrap();
    queues.receive(topic, "dying", &receive(10)).await.unwrap();
    let (page, list) = counted!(state, objects, queues.dead_letters(topic, "dying", None, 100).await.unwrap());
    per_request("dead letters listed, first time (10 buried, 8 partitions)", &list, 1);
    assert_eq!(page.entries.len(), 10);
    let (_, redrive) = counted!(state, objects, queues.redrive(topic, "dying", None).await.unwrap());
    per_request("redrive 10 dead letters (8 partitions)", &redrive, 1);
    queues.receive(topic, "dying", &receive(10)).await.unwrap();
    queues.dead_letters(topic, "dying", None, 100).await.unwrap();
    let (_, purge) = counted!(state, objects, queues.purge_dead_letters(topic, "dying").await.unwrap());
    per_request("purge 10 dead letters (8 partitions)", &purge, 1);
    let (_, delete) = counted!(state, objects, queues.delete(topic, "dying").await.unwrap());
    per_request("delete subscription", &delete, 1);
    assert_eq!(delete.get("dynamodb:TransactWriteItems"), Some(&1), "one write: {delete:?}");
    let (_, purge) =
        counted!(state, objects, { while upkeep::step(state.as_ref(), upkeep::STEP_BUDGET, 0).await.unwrap().more {} });
    per_request("janitor: purge the deleted subscription (8 partitions)", &purge, 1);
}

/// Receives of a subscription with a rate: one read and one conditional write of its bucket
/// per receive (a busy one uses every token it took); one that finds the bucket empty reads
/// it, writes only to count the wait once, and reads no partition.
async fn rated((state, objects, _): &Counted, queues: &Queues, topic: &str) {
    let writes = |c: &BTreeMap<&'static str, u64>| {
        ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:TransactWriteItems"]
            .iter()
            .map(|op| c.get(*op).copied().unwrap_or_default())
            .sum::<u64>()
    };
    for (name, per_second, burst) in [("rated", 1000, 20), ("slow", 1, 10)] {
        let rate = Some(Rate { per_second, burst });
        let spec = SubscriptionSpec { start: StartAt::Earliest, rate, ..SubscriptionSpec::default() };
        queues.create(topic, name, spec).await.unwrap();
        // The first receive creates the bucket (with the subscription's check).
        queues.receive(topic, name, &receive(10)).await.unwrap();
    }
    let (got, busy) = counted!(state, objects, queues.receive(topic, "rated", &receive(10)).await.unwrap());
    per_request("queue receive with a rate, busy, batch 10", &busy, 1);
    assert_eq!(got.len(), 10);
    assert_eq!(busy.get("dynamodb:GetItem"), Some(&4), "topic, subscription, bucket, one head: {busy:?}");
    assert_eq!(writes(&busy), 2, "the tokens, then the take: {busy:?}");
    let (got, empty) = counted!(state, objects, queues.receive(topic, "slow", &receive(10)).await.unwrap());
    per_request("queue receive with a rate, bucket empty", &empty, 1);
    assert!(got.is_empty());
    assert_eq!(writes(&empty), 1, "the throttled time counted: {empty:?}");
    assert!(!empty.contains_key("dynamodb:Query"), "no partition read: {empty:?}");
    let (_, again) = counted!(state, objects, queues.receive(topic, "slow", &receive(10)).await.unwrap());
    per_request("queue receive with a rate, bucket empty, wait already counted", &again, 1);
    assert_eq!(writes(&again), 0, "nothing more to count: {again:?}");
}
