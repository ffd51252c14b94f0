//! Changing a subscription in place: each setting changes and describe shows it; a new
//! visibility timeout applies from the next receive (a lease already granted keeps its
//! window); a new filter applies from `filter_since`; `start` and `ordering` cannot change;
//! and no receive that starts after a change has answered uses the old settings, whatever
//! a process caches. Time passes on a [`ManualClock`](sluice_core::ManualClock).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use sluice_core::queues::{
    Backoff, Ordering, PushPatch, PushSpec, PushTarget, Queues, StartAt, SubscriptionPatch, SubscriptionSpec,
};
use sluice_core::{Error, Log, ManualClock};

use crate::cases::support::faults::{puts_at, Action, Fault, Scripted};
use crate::cases::support::queues::*;
use crate::cases::support::race::receives_racing;
use crate::Backend;

fn settings() -> SubscriptionSpec {
    SubscriptionSpec { visibility_timeout_ms: 60_000, ..spec(StartAt::Earliest) }
}

fn keyed(key: &str, partition: u32) -> sluice_core::NewEvent {
    event(format!("v-{key}"), Some(partition), Some(key.to_owned()), Some(START_MS))
}

pub async fn given_a_patch_then_each_field_changes_and_describe_shows_it(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "patch-fields", 2).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let before = queues.describe(&topic, &sub).await.expect("describe").subscription;
    let unchanged = queues.patch(&topic, &sub, &SubscriptionPatch::default()).await.expect("an empty patch");
    assert_eq!(unchanged, before, "an empty patch answers the subscription unchanged");

    let backoff = Backoff::Steps(vec![100, 200]);
    let change = SubscriptionPatch {
        visibility_timeout_ms: Some(5_000),
        max_receive_count: Some(9),
        delay_ms: Some(250),
        redelivery_backoff: Some(Some(backoff.clone())),
        filter: Some(Some(json!({"key": ["a"]}))),
        start: Some(StartAt::Earliest),
        ordering: Some(Ordering::None),
        ..SubscriptionPatch::default()
    };
    let patched = queues.patch(&topic, &sub, &change).await.expect("patch");
    let want = SubscriptionSpec {
        visibility_timeout_ms: 5_000,
        max_receive_count: 9,
        delay_ms: 250,
        redelivery_backoff: Some(backoff),
        filter: Some(json!({"key": ["a"]})),
        ..settings()
    };
    assert_eq!(patched.spec, want, "every field given changed, start and ordering named as they are");
    assert_eq!((patched.start_offsets.clone(), patched.created_ms), (before.start_offsets, before.created_ms));
    let described = queues.describe(&topic, &sub).await.expect("describe");
    assert_eq!(described.subscription, patched, "describe shows what the patch answered");
    assert!(described.partitions.iter().all(|p| p.filter_since == Some(0)), "{:?}", described.partitions);
    assert_eq!(queues.patch(&topic, &sub, &change).await.expect("again"), patched, "the same patch: unchanged");

    let removed = SubscriptionPatch { filter: Some(None), redelivery_backoff: Some(None), ..Default::default() };
    let patched = queues.patch(&topic, &sub, &removed).await.expect("remove the filter and the backoff");
    assert_eq!((patched.spec.filter, patched.spec.redelivery_backoff), (None, None));

    let push = SubscriptionSpec { push: Some(PushSpec::url("https://a.example/hook", None)), ..settings() };
    let pushed = subscribe(&queues, &topic, push).await;
    let change = PushPatch {
        url: Some("https://b.example/hook".into()),
        max_batch: Some(7),
        timeout_ms: Some(2_000),
        max_in_flight: Some(3),
        lambda: None,
    };
    let created = queues.describe(&topic, &pushed).await.unwrap().subscription.spec.push.unwrap();
    let patched = queues
        .patch(&topic, &pushed, &SubscriptionPatch { push: Some(change), ..Default::default() })
        .await
        .expect("patch a push target");
    let push = patched.spec.push.expect("still push");
    assert_eq!((push.max_batch, push.timeout_ms, push.max_in_flight), (7, 2_000, 3));
    assert_eq!(push.target, PushTarget::Url { url: "https://b.example/hook".into(), secret: secret_of(&created) });
    assert_eq!(queues.describe(&topic, &pushed).await.unwrap().subscription.spec.push, Some(push));
}

fn secret_of(push: &PushSpec) -> String {
    push.secret().expect("a URL target's secret").to_owned()
}

pub async fn given_a_changed_visibility_timeout_then_the_next_receive_uses_it_and_a_granted_lease_keeps_its_window(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "patch-window", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let first = publish_at(&log, &topic, 0, "first", START_MS).await;
    let second = publish_at(&log, &topic, 0, "second", START_MS).await;
    let held = receive(&queues, &topic, &sub, 1).await.remove(0);
    assert_eq!((at(&held), held.held_until_ms), (first, START_MS + 60_000), "held under the old timeout");

    let shorter = SubscriptionPatch { visibility_timeout_ms: Some(10_000), ..Default::default() };
    queues.patch(&topic, &sub, &shorter).await.expect("patch");
    let next = receive_one(&queues, &topic, &sub).await;
    assert_eq!((at(&next), next.held_until_ms), (second, START_MS + 10_000), "the next receive uses the new one");

    clock.advance(10_000);
    let again = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&again), vec![second], "the new window ended; the lease granted before keeps its own");
    assert_eq!(ack(&queues, &topic, &sub, &again[0].receipt).await, Ok(()));
    clock.advance(50_000);
    assert_eq!(positions(&receive(&queues, &topic, &sub, 10).await), vec![first], "and ends at its own time");
}

pub async fn given_a_changed_filter_then_it_applies_from_filter_since_on_each_partition(backend: &dyn Backend) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "patch-filter", 2).await;
    let filtered = SubscriptionSpec { filter: Some(json!({"key": ["a"]})), ..settings() };
    let sub = subscribe(&queues, &topic, filtered).await;
    publish(&log, &topic, vec![keyed("a", 0), keyed("b", 0), keyed("b", 1)]).await;
    let judged = receive(&queues, &topic, &sub, 10).await;
    assert_eq!(positions(&judged), vec![(0, 0)], "the old filter judged these");
    publish(&log, &topic, vec![keyed("a", 0), keyed("b", 0), keyed("a", 1), keyed("b", 1)]).await;

    let cursors: BTreeMap<u32, u64> =
        queues.describe(&topic, &sub).await.unwrap().partitions.iter().map(|p| (p.partition, p.cursor)).collect();
    let change = SubscriptionPatch { filter: Some(Some(json!({"key": ["b"]}))), ..Default::default() };
    queues.patch(&topic, &sub, &change).await.expect("patch the filter");
    let described = queues.describe(&topic, &sub).await.unwrap();
    let since: BTreeMap<u32, u64> =
        described.partitions.iter().filter_map(|p| Some((p.partition, p.filter_since?))).collect();
    assert_eq!(since, cursors, "the new filter applies from each partition's cursor at the change");
    assert_eq!(cursors, BTreeMap::from([(0, 2), (1, 1)]), "the first receive passed over the b's");
    let mut got = positions(&receive(&queues, &topic, &sub, 10).await);
    got.sort_unstable();
    assert_eq!(got, vec![(0, 3), (1, 2)], "from there, only what the new filter matches");
    assert!(described.partitions.iter().all(|p| p.filter_since.is_some()), "every partition shows it");
}

pub async fn given_a_patch_naming_start_ordering_or_a_push_target_on_a_pull_subscription_then_refused_and_unchanged(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "patch-refused", 1).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let before = queues.describe(&topic, &sub).await.unwrap().subscription;
    let refused = [
        (SubscriptionPatch { start: Some(StartAt::Latest), ..Default::default() }, "start"),
        (SubscriptionPatch { ordering: Some(Ordering::Key), ..Default::default() }, "ordering"),
        (SubscriptionPatch { push: Some(PushPatch::default()), ..Default::default() }, "push"),
        (SubscriptionPatch { visibility_timeout_ms: Some(1), max_receive_count: Some(0), ..Default::default() }, "max"),
    ];
    for (patch, field) in refused {
        match queues.patch(&topic, &sub, &patch).await {
            Err(Error::Invalid { message, .. }) => assert!(message.contains(field), "{field}: {message}"),
            other => panic!("{field}: {other:?}"),
        }
        assert_eq!(queues.describe(&topic, &sub).await.unwrap().subscription, before, "{field}: nothing changed");
    }
    queues.delete(&topic, &sub).await.unwrap();
    let change = SubscriptionPatch { visibility_timeout_ms: Some(1), ..Default::default() };
    for (t, s) in [("no-such-topic", "s"), (topic.as_str(), "no-such-sub"), (topic.as_str(), sub.as_str())] {
        let result = queues.patch(t, s, &change).await;
        assert!(matches!(result, Err(Error::TopicNotFound(_) | Error::SubscriptionNotFound { .. })), "{t}/{s}");
    }
}

/// A change whose record write fails after it marked every partition leaves them taking
/// nothing; a change that names only what is stored (here: the window the failed one did
/// not set) answers 200, and from then on the partitions deliver again (found by the
/// simulation, seed 1151: a queue partition delivering nothing after the operator's next
/// change, once its earlier one had failed).
pub async fn given_a_change_failed_after_its_marks_when_one_naming_the_stored_settings_answers_then_all_deliver(
    backend: &dyn Backend,
) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (store, objects) = backend.open_with(clock.clone()).await;
    let script = Scripted::new(store);
    let log = Log::new(script.clone(), objects, clock.clone(), crate::log_config());
    let queues = Queues::new(log.clone());
    let topic = new_topic(&log, "patch-marked", 2).await;
    queues.create(&topic, "s", settings()).await.unwrap();
    for i in 0..4 {
        publish_at(&log, &topic, i % 2, &format!("m{i}"), START_MS).await;
    }
    script.at(|ops| puts_at(ops, sluice_core::keys::SUBS_PREFIX, "s"), Action::Fault(Fault::FailBefore));
    let failed = SubscriptionPatch { visibility_timeout_ms: Some(5_000), ..Default::default() };
    assert!(queues.patch(&topic, "s", &failed).await.is_err(), "the record write fails after the marks");
    assert_eq!(script.pending(), 0, "the fault met the record write");
    assert!(receive(&queues, &topic, "s", 10).await.is_empty(), "marked partitions take nothing");

    let same = SubscriptionPatch { visibility_timeout_ms: Some(60_000), ..Default::default() };
    let answered = queues.patch(&topic, "s", &same).await.expect("a change naming the stored window");
    assert_eq!(answered.spec.visibility_timeout_ms, 60_000);
    let got = receive(&queues, &topic, "s", 10).await;
    assert_eq!(got.len(), 4, "every partition delivers again: {:?}", positions(&got));
    assert!(got.iter().all(|m| m.held_until_ms == START_MS + 60_000), "with the stored window");
}

/// Two processes on one store, the first caching subscriptions.
async fn two_processes(backend: &dyn Backend) -> (Arc<ManualClock>, Log, Queues, Queues) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut logs = Vec::new();
    for _ in 0..2 {
        let (store, objects) = backend.open_with(clock.clone()).await;
        logs.push(Log::new(store, objects, clock.clone(), crate::log_config()));
    }
    let (cached, other) = (Queues::caching_subscriptions(logs[0].clone()), Queues::new(logs[1].clone()));
    (clock, logs.swap_remove(0), cached, other)
}

pub async fn given_a_cached_subscription_patched_elsewhere_then_the_next_receive_uses_the_new_settings(
    backend: &dyn Backend,
) {
    let (_clock, log, cached, other) = two_processes(backend).await;
    let topic = new_topic(&log, "patch-cached", 2).await;
    other.create(&topic, "s", settings()).await.unwrap();
    for i in 0..4 {
        publish_at(&log, &topic, i % 2, &format!("m{i}"), START_MS).await;
    }
    let first = receive(&cached, &topic, "s", 1).await;
    assert_eq!(first[0].held_until_ms, START_MS + 60_000, "the receive that caches the old settings");

    let change = SubscriptionPatch { visibility_timeout_ms: Some(5_000), ..Default::default() };
    other.patch(&topic, "s", &change).await.expect("patch elsewhere");
    // Within the cache's lifetime: the cursors announce the change, whatever the cache says.
    let next = receive(&cached, &topic, "s", 10).await;
    let windows: Vec<i64> = next.iter().map(|m| m.held_until_ms - START_MS).collect();
    assert_eq!(windows, vec![5_000; 3], "a process that cached the old settings uses the new ones");
}

/// Receives racing a change of the visibility timeout (`receives_racing`), and the window
/// each message got (the clock stands still: the window is the timeout used).
pub async fn given_receives_racing_a_patch_then_none_that_started_after_its_answer_uses_the_old_setting(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "patch-race", 4).await;
    let sub = subscribe(&queues, &topic, settings()).await;
    let total = scaled(backend, 400).max(80);
    publish(&log, &topic, (0..total).map(|i| event(format!("m{i}"), Some(i as u32 % 4), None, None)).collect()).await;
    let change = SubscriptionPatch { visibility_timeout_ms: Some(7_000), ..Default::default() };
    let race = receives_racing(&log, &topic, &sub, total, async {
        queues.patch(&topic, &sub, &change).await.expect("patch");
    })
    .await;
    let late: Vec<_> = race.late.iter().map(|m| (at(m), m.held_until_ms - START_MS)).collect();
    assert!(!late.is_empty(), "receives started after the change took messages");
    let old: Vec<_> = late.iter().filter(|(_, window)| *window != 7_000).collect();
    assert!(old.is_empty(), "receives started after the change answered used the old timeout: {old:?}");
}
