//! Describe of a filtered subscription: what no receive has matched yet is `unscanned`.

use serde_json::json;
use sluice_core::queues::{StartAt, SubscriptionSpec};

use crate::cases::support::queues::*;
use crate::Backend;

pub async fn given_a_filtered_subscription_then_describe_reports_unmatched_events_as_unscanned_not_visible(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "unscanned", 1).await;
    let filter = Some(json!({"key": ["keep"]}));
    let filtered = subscribe(&queues, &topic, SubscriptionSpec { filter, ..spec(StartAt::Earliest) }).await;
    let plain = subscribe(&queues, &topic, spec(StartAt::Earliest)).await;
    let key = |i: usize| if i.is_multiple_of(5) { "keep" } else { "drop" };
    let events = (0..10).map(|i| event(format!("{i}"), Some(0), Some(key(i).into()), Some(START_MS))).collect();
    publish(&log, &topic, events).await;

    let counts = |b: sluice_core::queues::Backlog| (b.visible, b.in_flight, b.filtered, b.unscanned);
    let d = queues.describe(&topic, &filtered).await.unwrap();
    assert_eq!(counts(d.backlog), (0, 0, 0, 10), "nothing matched yet: unscanned, not visible");
    assert_eq!(d.partitions[0].backlog.unscanned, 10, "per partition too");
    let d = queues.describe(&topic, &plain).await.unwrap();
    assert_eq!(counts(d.backlog), (10, 0, 0, 0), "without a filter, new messages are visible");

    let got = receive(&queues, &topic, &filtered, 10).await;
    assert_eq!(positions(&got), [(0, 0), (0, 5)]);
    let d = queues.describe(&topic, &filtered).await.unwrap();
    assert_eq!(counts(d.backlog), (0, 2, 8, 0), "scanned: the matches held, the rest filtered");
    publish(&log, &topic, vec![event("late".into(), Some(0), Some("drop".into()), Some(START_MS))]).await;
    let d = queues.describe(&topic, &filtered).await.unwrap();
    assert_eq!(counts(d.backlog), (0, 2, 8, 1), "a new event is unscanned until a receive looks");
}
