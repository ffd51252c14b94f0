//! A push secret rotated: during the overlap every delivery carries both signatures, each
//! verifying with its own secret; after it, the new one alone. The overlap's end is judged
//! on the injected clock.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{secret_key, PushSpec, SecretRotation, SubscriptionSpec};
use sluice_core::{Clock, Code, Error};

use super::receiver::*;
use crate::cases::support::queues::{manual, new_topic, publish, subscribe};
use crate::Backend;

/// The receiver, keeping the last delivery.
#[derive(Default)]
struct Signed {
    last: Mutex<Option<Delivery>>,
}

#[async_trait]
impl Deliver for Signed {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        *self.last.lock().unwrap() = Some(delivery.clone());
        ok(json!({}))
    }
}

impl Signed {
    /// Which of `secrets` each signature of the last delivery verifies with, in the
    /// header's order (a signature verifying with none is `None`).
    fn last_signed_by(&self, secrets: &[&str]) -> Vec<Option<usize>> {
        let last = self.last.lock().unwrap().clone().expect("a delivery");
        let header = |name: &str| last.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let signed = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let (Some(id), Some(ts), Some(signatures)) = signed else { panic!("an unsigned delivery to a URL") };
        let now_s: i64 = ts.parse().unwrap();
        let verifies =
            |secret: &str, sig: &str| webhook::verify(&secret_key(secret).unwrap(), &id, &ts, sig, &last.body, now_s);
        signatures.split(' ').map(|sig| secrets.iter().position(|s| verifies(s, sig))).collect()
    }
}

fn push_of(spec: &SubscriptionSpec) -> PushSpec {
    spec.push.clone().expect("a push subscription")
}

pub async fn given_a_rotated_push_secret_then_both_sign_during_the_overlap_and_only_the_new_one_after(
    backend: &dyn Backend,
) {
    let (clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-rotated", 1).await;
    let sub =
        subscribe(&queues, &topic, push_spec(PushSpec::url("https://receiver.test/", Some(SECRET.into())), 5, 100))
            .await;
    let receiver = Arc::new(Signed::default());
    let dispatcher = Dispatcher::new(queues.clone(), receiver.clone());
    let topics = Topics::Named(vec![topic.clone()]);
    // Publishes one event at `at` and pushes it. Deliveries are 5 s apart at least: a
    // process skips a partition it saw idle for that long (`IDLE_HINT_MS`).
    let (at_clock, log, at_topic, dispatcher, topics) = (&clock, &log, &topic, &dispatcher, &topics);
    let deliver_at = |at: i64| async move {
        at_clock.set(at);
        publish(log, at_topic, vec![json_event(json!({"n": 1}), None)]).await;
        let run = dispatcher.drain(topics, at + 60_000).await.unwrap();
        assert_eq!(run.deliveries, 1, "at {at}: {run:?}");
    };
    let start = clock.now_ms();
    deliver_at(start).await;
    assert_eq!(receiver.last_signed_by(&[SECRET]), vec![Some(0)], "before: the old secret alone");

    let rotation = SecretRotation { secret: None, overlap_ms: Some(60_000) };
    let rotated = queues.rotate_secret(&topic, &sub, &rotation).await.expect("rotate");
    let new = rotated.secret.clone();
    assert!(new.starts_with("whsec_") && new != SECRET, "a new secret is generated: {new}");
    assert_eq!(rotated.previous_expires_ms, start + 60_000);
    let (both, new_and_old) = (vec![Some(0), Some(1)], [new.as_str(), SECRET]);
    deliver_at(start + 5_000).await;
    assert_eq!(receiver.last_signed_by(&new_and_old), both, "v1,<new> v1,<old>, each verifying with its own");
    deliver_at(rotated.previous_expires_ms - 1).await;
    assert_eq!(receiver.last_signed_by(&new_and_old), both, "the overlap's last instant");
    deliver_at(rotated.previous_expires_ms + 5_000).await;
    assert_eq!(receiver.last_signed_by(&new_and_old), vec![Some(0)], "after the overlap: the new secret alone");

    // Given the secret that signs already (a retry), nothing changes and the answer is the same.
    let again = SecretRotation { secret: Some(new.clone()), overlap_ms: Some(1) };
    assert_eq!(queues.rotate_secret(&topic, &sub, &again).await.unwrap(), rotated);
}

pub async fn given_a_bad_rotation_or_a_subscription_without_a_secret_then_it_is_refused_and_nothing_changes(
    backend: &dyn Backend,
) {
    let (_clock, log, queues) = manual(backend).await;
    let topic = new_topic(&log, "push-rotate-bad", 1).await;
    let url =
        subscribe(&queues, &topic, push_spec(PushSpec::url("https://receiver.test/", Some(SECRET.into())), 5, 100))
            .await;
    let lambda = subscribe(&queues, &topic, push_spec(PushSpec::lambda("consumer"), 5, 100)).await;
    let pull = subscribe(&queues, &topic, SubscriptionSpec::default()).await;
    let before = push_of(&queues.describe(&topic, &url).await.unwrap().subscription.spec);
    let rotate = |sub: &str, secret: Option<&str>, overlap_ms: Option<u64>| {
        let rotation = SecretRotation { secret: secret.map(str::to_owned), overlap_ms };
        let queues = queues.clone();
        let (topic, sub) = (topic.clone(), sub.to_owned());
        async move { queues.rotate_secret(&topic, &sub, &rotation).await }
    };
    let code = |r: Result<_, Error>| match r {
        Err(Error::Invalid { code, .. }) => code,
        other => panic!("not refused as invalid: {other:?}"),
    };
    assert_eq!(code(rotate(&url, Some("whsec_AAAA"), None).await), Code::InvalidPush, "a key too short");
    assert_eq!(code(rotate(&url, Some("secret"), None).await), Code::InvalidPush, "no whsec_");
    assert_eq!(code(rotate(&url, None, Some(8 * 24 * 3_600_000)).await), Code::InvalidPush, "an overlap past 7 days");
    assert_eq!(code(rotate(&lambda, None, None).await), Code::InvalidRequest, "a function has no secret");
    assert_eq!(code(rotate(&pull, None, None).await), Code::InvalidRequest, "a pull subscription");
    let missing = rotate("missing", None, None).await;
    assert!(matches!(missing, Err(Error::SubscriptionNotFound { .. })), "{missing:?}");
    let after = push_of(&queues.describe(&topic, &url).await.unwrap().subscription.spec);
    assert_eq!(after, before, "a refused rotation changes nothing");
}
