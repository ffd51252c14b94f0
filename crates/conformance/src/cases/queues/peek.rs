//! Peek: the visible messages, seen without receiving them.

use serde_json::json;
use sluice_core::queues::{Peeked, StartAt, SubscriptionSpec};
use sluice_core::{Code, Error};

use crate::cases::support::queues::*;
use crate::Backend;

fn seen(peeked: &[Peeked]) -> Vec<(u32, u64, u32)> {
    peeked.iter().map(|p| (p.event.partition, p.event.offset, p.receive_count)).collect()
}

pub async fn given_a_peek_then_it_shows_the_visible_messages_and_changes_nothing(backend: &dyn Backend) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "peek", 2).await;
    let filter = Some(json!({"key": ["keep"]}));
    let sub_spec =
        SubscriptionSpec { visibility_timeout_ms: 10_000, max_receive_count: 2, filter, ..spec(StartAt::Earliest) };
    let sub = subscribe(&queues, &topic, sub_spec).await;
    let keyed = |value: &str, p: u32, key: &str| event(value.into(), Some(p), Some(key.into()), Some(START_MS));
    let events = vec![keyed("a", 0, "keep"), keyed("b", 0, "drop"), keyed("c", 0, "keep"), keyed("d", 1, "keep")];
    publish(&log, &topic, events).await;

    let before = queues.describe(&topic, &sub).await.expect("describe");
    let peeked = queues.peek(&topic, &sub, 10).await.expect("peek");
    assert_eq!(seen(&peeked), [(0, 0, 0), (0, 2, 0), (1, 0, 0)], "the matching messages, none delivered yet");
    assert_eq!(String::from_utf8_lossy(&peeked[1].event.record.value), "c");
    assert_eq!(seen(&queues.peek(&topic, &sub, 2).await.expect("peek 2")), [(0, 0, 0), (0, 2, 0)], "limit");
    let after = queues.describe(&topic, &sub).await.expect("describe");
    assert_eq!(after, before, "a peek changed the subscription (cursor, counts or leases)");

    let got = receive(&queues, &topic, &sub, 10).await;
    let mut firsts: Vec<_> = got.iter().map(|m| (at(m), m.receive_count)).collect();
    firsts.sort();
    assert_eq!(firsts, [((0, 0), 1), ((0, 2), 1), ((1, 0), 1)], "peeks counted no delivery");
    assert!(queues.peek(&topic, &sub, 10).await.expect("peek").is_empty(), "held messages are not visible");

    let released = got.iter().find(|m| at(m) == (0, 2)).expect("(0, 2) received");
    assert_eq!(nack(&queues, &topic, &sub, &released.receipt, 0).await, Ok(()));
    assert_eq!(seen(&queues.peek(&topic, &sub, 10).await.expect("peek")), [(0, 2, 1)], "released: visible again");
    assert_eq!(seen(&queues.peek(&topic, &sub, 10).await.expect("peek")), [(0, 2, 1)], "and still");
    assert_eq!(receive_one(&queues, &topic, &sub).await.receive_count, 2, "the peeks left it as released");

    clock.advance(10_000);
    let due = seen(&queues.peek(&topic, &sub, 10).await.expect("peek"));
    assert_eq!(due, [(0, 0, 1), (1, 0, 1)], "due again after the window; (0, 2) ran out of receives: not visible");

    for limit in [0, 101] {
        let refused = queues.peek(&topic, &sub, limit).await;
        assert!(matches!(refused, Err(Error::Invalid { code: Code::InvalidLimit, .. })), "limit {limit}: {refused:?}");
    }
    let missing = queues.peek(&topic, "nobody", 10).await;
    assert!(matches!(missing, Err(Error::SubscriptionNotFound { .. })), "{missing:?}");
}
