//! Content filters on pull subscriptions, and trace context on deliveries.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_core::push::Dispatcher;
use sluice_core::queues::{PushSpec, StartAt, SubscriptionSpec};
use sluice_core::{Code, Error};

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, receive, subscribe};
use crate::Backend;

pub async fn given_a_filter_on_a_pull_subscription_then_only_matching_events_are_received_and_the_rest_counted(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "filtered", 2).await;
    let filter = json!({"$or": [
        {"headers": {"type": ["order.created"]}},
        {"value": {"total": [{"numeric": [">=", 100]}]}}
    ]});
    let spec = SubscriptionSpec { start: StartAt::Earliest, filter: Some(filter), ..SubscriptionSpec::default() };
    let sub = subscribe(&queues, &topic, spec).await;
    let mut events = Vec::new();
    let mut wanted = BTreeMap::new();
    for i in 0..600u64 {
        // Bytes values match on headers only; JSON values also on their content.
        let (event, matches) = match i % 3 {
            0 => {
                let kind = if i % 2 == 0 { "order.created" } else { "order.paid" };
                let mut e = json_event(json!(null), None);
                e.value = Bytes::from(format!("raw {i}"));
                e.value_is_json = false;
                e.headers = vec![("type".into(), Bytes::from(kind))];
                (e, kind == "order.created")
            }
            _ => (json_event(json!({"total": i % 200}), None), i % 200 >= 100),
        };
        events.push(event);
        wanted.insert(i, matches);
    }
    let at = publish(&log, &topic, events).await;
    let mut got = HashSet::new();
    loop {
        let batch = receive(&queues, &topic, &sub, 10).await;
        if batch.is_empty() {
            break;
        }
        for m in &batch {
            assert!(got.insert((m.event.partition, m.event.offset)), "received twice");
            queues.ack(&topic, &sub, std::slice::from_ref(&m.receipt)).await.unwrap();
        }
    }
    let expected: HashSet<(u32, u64)> =
        at.iter().enumerate().filter(|(i, _)| wanted[&(*i as u64)]).map(|(_, p)| (p.partition, p.offset)).collect();
    assert_eq!(got, expected, "exactly the matching events are received");
    let d = queues.describe(&topic, &sub).await.unwrap();
    assert_eq!(d.backlog.filtered, (600 - expected.len()) as u64);
    assert_eq!(d.backlog.visible, 0);
    // An invalid pattern is refused with its reason, and nothing is created.
    let bad =
        SubscriptionSpec { filter: Some(json!({"value": {"n": [{"prefx": "a"}]}})), ..SubscriptionSpec::default() };
    match queues.create(&topic, "bad-filter", bad).await {
        Err(Error::Invalid { code: Code::InvalidFilter, message }) => assert!(message.contains("prefx"), "{message}"),
        other => panic!("an invalid filter: {other:?}"),
    }
    assert!(queues.list(&topic).await.unwrap().iter().all(|s| s.name != "bad-filter"));
}

pub async fn given_events_with_a_trace_context_then_a_delivery_carries_the_one_its_batch_shares(backend: &dyn Backend) {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-11111111111111111111111111111111-2222222222222222-00";
    let traced = |value: i64, traceparent: Option<&str>| {
        let mut e = json_event(json!(value), None);
        if let Some(parent) = traceparent {
            e.headers.push(("traceparent".into(), Bytes::from(parent.to_owned())));
            e.headers.push(("tracestate".into(), Bytes::from_static(b"rojo=1")));
        }
        e
    };
    for target in [PushSpec::url("https://receiver.test/", None), PushSpec::lambda("consumer")] {
        let (clock, log, queues) = manual(backend).await;
        let topic = new_topic(&log, "push-trace", 1).await;
        subscribe(&queues, &topic, push_spec(PushSpec { max_batch: 2, ..target.clone() }, 5, 100)).await;
        // Batches of two, in offset order: one sharing PARENT; then OTHER and an untraced event.
        let events = vec![traced(1, Some(PARENT)), traced(2, Some(PARENT)), traced(3, Some(OTHER)), traced(4, None)];
        publish(&log, &topic, events).await;
        let receiver = Receiver::new(|_, _| ok(json!({})));
        drain_all(&Dispatcher::new(queues.clone(), receiver.clone()), &clock, &topic, 1_000).await;

        let attempts = receiver.attempts();
        assert_eq!(attempts.len(), 2, "{target:?}: two batches");
        assert_eq!(attempts[0].trace, (Some(PARENT.into()), Some("rojo=1".into())), "{target:?}: the shared context");
        assert_eq!(attempts[1].trace, (None, None), "{target:?}: no context when the messages' differ");
        // And each message's own, in the body (a Lambda target's payload).
        assert_eq!(attempts[0].traceparents, vec![json!(PARENT), json!(PARENT)], "{target:?}");
        assert_eq!(attempts[1].traceparents, vec![json!(OTHER), Value::Null], "{target:?}");
    }
}
