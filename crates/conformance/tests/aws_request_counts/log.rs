//! What publishing, replaying, long polls and a consumer group cost.

use super::*;

/// Single-event publishes after the cold one.
const WARM: usize = 20;

#[tokio::test]
async fn requests_per_operation_are_what_the_cost_model_says() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let counted = counted_log().await;
    let (state, objects, log) = &counted;
    let topic = unique_topic("costs");
    let spec = TopicSpec { partitions: 8, retention_ms: None, retention_bytes: None };

    let ((created, _), create) = counted!(state, objects, log.create_topic(&topic, spec).await.unwrap());
    per_request("create topic", &create, 1);
    // The record and every partition's head, in one transaction.
    assert_eq!(requests(&create), Counts::from([("dynamodb:GetItem", 1), ("dynamodb:TransactWriteItems", 1)]));

    // A fresh (or long-frozen) instance reads the topic and the partition head first.
    let (cold_result, cold) =
        counted!(state, objects, log.publish(&topic, vec![kib_event(0, false)], None).await.unwrap());
    per_request("cold publish, batch 1", &cold, 1);
    assert_eq!(
        requests(&cold),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:UpdateItem", 1)]),
        "inline, one partition: one write of the head, carrying the entry; no S3 PUT"
    );
    // What that write is billed for the head: 1 write unit per started KB.
    let cold_at = cold_result[0].partition;
    let key = sluice_core::keys::head_key(created.id, cold_at);
    let item = state.get(&key).await.unwrap().expect("the head");
    let item_bytes =
        "pk".len() + key.pk.len() + "sk".len() + key.sk.len() + "d".len() + item.value.len() + "v".len() + 1;
    println!("head carrying one 1 KiB event: {item_bytes} bytes as DynamoDB sizes it");
    assert!(item_bytes <= 2048, "a batch-1 commit's head is 2 KB units at most, as docs/AWS.md prices it");

    warm_publishes(&counted, &topic).await;
    replays(&counted, &topic).await;
    idle_long_poll(&counted, &topic).await;
    group_polls(&counted, &topic).await;
    group_deletes(&counted, &topic).await;

    let (_, delete) = counted!(state, objects, log.delete_topic(&topic).await.unwrap());
    per_request("delete topic", &delete, 1);
    let expected = [("dynamodb:GetItem", 1), ("dynamodb:Query", 1), ("dynamodb:TransactWriteItems", 1)];
    assert_eq!(requests(&delete), Counts::from(expected), "the record, the heads read, one write fencing them");

    let (_, purge) =
        counted!(state, objects, { while upkeep::step(state.as_ref(), upkeep::STEP_BUDGET, 0).await.unwrap().more {} });
    per_request("janitor: purge the deleted topic (~560 index items)", &purge, 1);
    assert!(purge.contains_key("dynamodb:BatchWriteItem"), "{purge:?}");
}

/// Warm publishes of batch 1 and 100, on one partition and keyed over 8, and with keys.
async fn warm_publishes((state, objects, log): &Counted, topic: &str) {
    let (_, batch1) = counted!(state, objects, {
        for i in 0..WARM {
            log.publish(topic, vec![kib_event(i, false)], None).await.unwrap();
        }
    });
    per_request("warm publish, batch 1", &batch1, WARM);
    // Each: the previous entry written out as its own item, then the head carrying this one.
    assert_eq!(requests(&batch1), Counts::from([("dynamodb:UpdateItem", 2 * WARM as u64)]));

    const BATCHES: usize = 5;
    let (_, batch100) = counted!(state, objects, {
        for b in 0..BATCHES {
            log.publish(topic, (0..100).map(|i| kib_event(b * 100 + i, false)).collect(), None).await.unwrap();
        }
    });
    per_request("warm publish, batch 100, one partition", &batch100, BATCHES);
    // The first also writes out the entry the last batch-1 commit left in the head.
    let expected =
        [("dynamodb:TransactWriteItems", BATCHES as u64), ("dynamodb:UpdateItem", 1), ("s3:PutObject", BATCHES as u64)];
    assert_eq!(requests(&batch100), Counts::from(expected));

    // Keyed over 8 partitions: the first batch reads the 7 heads this instance has not seen yet.
    let keyed = |b: usize| (0..100).map(|i| kib_event(10_000 + b * 100 + i, true)).collect::<Vec<_>>();
    log.publish(topic, keyed(0), None).await.unwrap();
    let (_, spread) = counted!(state, objects, {
        for b in 1..=BATCHES {
            log.publish(topic, keyed(b), None).await.unwrap();
        }
    });
    per_request("warm publish, batch 100 keyed over 8 partitions", &spread, BATCHES);
    assert_eq!(
        requests(&spread),
        Counts::from([("dynamodb:TransactWriteItems", BATCHES as u64), ("s3:PutObject", BATCHES as u64)])
    );

    let (_, idempotent) = counted!(state, objects, {
        for i in 0..10 {
            let key = IdempotencyKey { key: format!("k{i}"), fingerprint: vec![1; 32] };
            log.publish(topic, vec![kib_event(i, false)], Some(key)).await.unwrap();
        }
    });
    per_request("warm publish with Idempotency-Key, batch 1", &idempotent, 10);
    assert_eq!(
        requests(&idempotent),
        Counts::from([("dynamodb:GetItem", 20), ("dynamodb:TransactWriteItems", 10)]),
        "the topic and the key are read afresh"
    );
}

/// A read of `topic`'s partition 0 from `offset`.
fn read(topic: &str, offset: u64, max_events: usize, wait_ms: u64) -> ReadRequest {
    ReadRequest { topic: topic.to_owned(), partition: 0, offset, max_events, max_bytes: 6 << 20, wait_ms }
}

/// Replay: 100 events written as one segment, then 20 written one per segment.
async fn replays((state, objects, log): &Counted, topic: &str) {
    let (_, replay100) = counted!(state, objects, {
        let page = log.read(&read(topic, 1 + WARM as u64, 100, 0)).await.unwrap();
        assert_eq!(page.events.len(), 100);
    });
    per_request("replay 100 events from one batch-100 segment", &replay100, 1);
    assert_eq!(
        requests(&replay100),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:Query", 1), ("s3:GetObject", 1)])
    );

    let (_, singles) = counted!(state, objects, {
        let page = log.read(&read(topic, 1, WARM, 0)).await.unwrap();
        assert_eq!(page.events.len(), WARM);
    });
    per_request("replay 20 events stored one per segment", &singles, 1);
    assert_eq!(
        requests(&singles),
        Counts::from([("dynamodb:GetItem", 2), ("dynamodb:Query", 1)]),
        "inline: the query brings the bytes"
    );
}

/// An idle long poll: one head read per check interval. Its clock passes each nap at once,
/// so the poll checks exactly at 0, 500, …, 2000 ms of its wait, however slow the machine.
async fn idle_long_poll((state, objects, log): &Counted, topic: &str) {
    let hw = log.describe_topic(topic).await.unwrap().1[0].high_watermark;
    let stepping = Arc::new(SteppingClock::new(SystemClock.now_ms()));
    let idle_log = Log::new(
        state.clone(),
        objects.clone(),
        stepping.clone(),
        LogConfig {
            poll_interval: Duration::from_millis(500),
            inline_segment_bytes: AWS_INLINE_SEGMENT_BYTES,
            ..LogConfig::default()
        },
    );
    let started = stepping.now_ms();
    let (_, idle) = counted!(state, objects, {
        let page = idle_log.read(&read(topic, hw, 10, 2_000)).await.unwrap();
        assert!(page.events.is_empty());
    });
    assert_eq!(stepping.now_ms() - started, 2_000, "the poll waited out its 2 s");
    per_request("idle long poll of 2 s at a 500 ms interval", &idle, 1);
    assert_eq!(requests(&idle), Counts::from([("dynamodb:GetItem", 1 + 5)]), "a cold topic read, then 5 head checks");
}

/// A consumer group on the topic: join, polls of 100 events with a commit each, an idle poll.
async fn group_polls((state, objects, log): &Counted, topic: &str) {
    let groups = Groups::new(log.clone());
    let group = unique_topic("readers");
    let poll = |member: Option<String>, max_events: usize| PollRequest {
        group: group.clone(),
        member_id: member,
        topics: vec![topic.to_owned()],
        max_events,
        max_bytes: 6 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: None,
        auto_commit: false,
        positions: None,
        instance_id: None,
    };
    let (answer, join) = counted!(state, objects, groups.poll(&poll(None, 100)).await.unwrap());
    per_request("group poll: join (first member, 100 events)", &join, 1);
    let member = answer.member_id;
    const POLLS: usize = 5;
    let mut last = None;
    let (_, steady) = counted!(state, objects, {
        for _ in 0..POLLS {
            let a = groups.poll(&poll(Some(member.clone()), 100)).await.unwrap();
            assert_eq!(a.events.len(), 100);
            last = Some(a);
        }
    });
    per_request("group poll: steady member, 100 events", &steady, POLLS);
    assert_eq!(steady.get("dynamodb:UpdateItem"), Some(&(POLLS as u64)), "one small write per poll: the heartbeat");
    assert!(!steady.contains_key("dynamodb:TransactWriteItems"), "a poll that changes nothing writes one item");
    let last = last.unwrap();
    let mut next: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &last.events {
        next.insert(e.event.partition, e.event.offset + 1);
    }
    let offsets: Vec<CommitOffset> = next
        .iter()
        .map(|(&partition, &offset)| CommitOffset { topic: topic.to_owned(), partition, offset, metadata: None })
        .collect();
    let (_, commit) =
        counted!(state, objects, groups.commit(&group, &member, last.generation, &offsets).await.unwrap());
    per_request(&format!("group commit of {} partitions", offsets.len()), &commit, 1);
    assert_eq!(commit.get("dynamodb:TransactWriteItems"), Some(&1));
    // The same cycle with the commit riding on the next poll (`auto_commit` with the positions
    // the client confirms): the commit's writes go in the heartbeat's, one transaction.
    let between = groups.poll(&poll(Some(member.clone()), 100)).await.unwrap();
    for e in &between.events {
        next.insert(e.event.partition, e.event.offset + 1);
    }
    let mut riding = poll(Some(member.clone()), 100);
    riding.auto_commit = true;
    riding.positions =
        Some(next.iter().map(|(&partition, &o)| (TopicPartition { topic: topic.to_owned(), partition }, o)).collect());
    let (_, ridden) = counted!(state, objects, assert_eq!(groups.poll(&riding).await.unwrap().events.len(), 100));
    per_request("group poll with auto_commit of the previous poll's positions, 100 events", &ridden, 1);
    assert_eq!(ridden.get("dynamodb:TransactWriteItems"), Some(&1), "{ridden:?}");
    assert_eq!(ridden.get("dynamodb:UpdateItem"), None, "the heartbeat is in the commit's transaction: {ridden:?}");
    let (drained, rest) =
        counted!(state, objects, groups.poll(&poll(Some(member.clone()), 1000)).await.unwrap().events.len());
    per_request(&format!("group poll: steady member, max 1000 events ({drained} left to read)"), &rest, 1);
    let (_, idle) = counted!(state, objects, {
        let a = groups.poll(&poll(Some(member.clone()), 1000)).await.unwrap();
        assert!(a.events.is_empty());
    });
    per_request("group poll: idle member, nothing new", &idle, 1);
    assert_eq!(idle.get("dynamodb:UpdateItem"), None, "an idle poll early in its session writes nothing: {idle:?}");
    assert!(!idle.contains_key("s3:GetObject"));
    spare_member(&groups, (state, objects), poll(None, 10)).await;
}

/// More members than partitions: the member assigned nothing reads the topic and the group,
/// not the topic's heads (it fetches nothing).
async fn spare_member(groups: &Groups, (state, objects): (&Billed, &S3ObjectStore), template: PollRequest) {
    let topic = unique_topic("crowded");
    let spec = TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None };
    groups.log().create_topic(&topic, spec).await.unwrap();
    let group = unique_topic("crowded");
    let join = |member: Option<String>| PollRequest {
        group: group.clone(),
        member_id: member,
        topics: vec![topic.clone()],
        ..template.clone()
    };
    let a = groups.poll(&join(None)).await.unwrap().member_id;
    let b = groups.poll(&join(None)).await.unwrap().member_id;
    let (a, b) = (groups.poll(&join(Some(a))).await.unwrap(), groups.poll(&join(Some(b))).await.unwrap());
    let spare = if a.assignment.is_empty() { a } else { b };
    assert!(spare.assignment.is_empty());
    let (_, idle) = counted!(state, objects, groups.poll(&join(Some(spare.member_id.clone()))).await.unwrap());
    per_request("group poll: member assigned no partition", &idle, 1);
    let expected = Counts::from([("dynamodb:GetItem", 1), ("dynamodb:Query", 1)]);
    assert_eq!(requests(&idle), expected, "the topic and the group, no heads: {idle:?}");
}

/// Deleting a group whose offsets fit in one transaction, and one whose offsets do not (150
/// partitions): the tombstone the wide one's first write leaves costs one more write.
async fn group_deletes((state, objects, log): &Counted, topic: &str) {
    let groups = Groups::new(log.clone());
    let wide = unique_topic("wide");
    log.create_topic(&wide, TopicSpec { partitions: 150, retention_ms: None, retention_bytes: None }).await.unwrap();
    for (topic, partitions) in [(topic.to_owned(), 8u32), (wide, 150)] {
        let group = unique_topic("deleted");
        let join = PollRequest {
            group: group.clone(),
            member_id: None,
            topics: vec![topic.clone()],
            max_events: 1,
            max_bytes: 6 << 20,
            wait_ms: 0,
            reset: ResetPolicy::Latest,
            session_timeout_ms: None,
            auto_commit: false,
            positions: None,
            instance_id: None,
        };
        let member = groups.poll(&join).await.unwrap();
        let all: Vec<CommitOffset> = (0..partitions)
            .map(|partition| CommitOffset { topic: topic.clone(), partition, offset: 0, metadata: None })
            .collect();
        for chunk in all.chunks(90) {
            groups.commit(&group, &member.member_id, member.generation, chunk).await.unwrap();
        }
        groups.leave(&group, &member.member_id).await.unwrap();
        let (_, delete) = counted!(state, objects, groups.delete(&group).await.unwrap());
        per_request(&format!("group delete, {partitions} committed offsets"), &delete, 1);
        let writes = delete.get("dynamodb:TransactWriteItems").copied().unwrap_or(0)
            + delete.get("dynamodb:DeleteItem").copied().unwrap_or(0);
        // The first transaction (100 items at most), the sweep's transactions of the offsets
        // left (none for a small group), then the tombstone's `DeleteItem`.
        let expected = if partitions <= 96 { 2 } else { 3 };
        assert_eq!(writes, expected, "{delete:?}");
    }
}
