//! A scripted receiver (a `Deliver` that answers as a flaky webhook would) and the
//! helpers the push cases share.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use sluice_core::ports::deliver::{Answer, Deliver, Delivery, TargetError, Wakes};
use sluice_core::push::{webhook, Dispatcher, Topics};
use sluice_core::queues::{Backoff, PushSpec, StartAt, SubscriptionSpec};
use sluice_core::{Clock, ManualClock, NewEvent};

/// One attempt as the receiver saw it.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    pub(super) webhook_id: Option<String>,
    /// Message ids with their keys and receive counts.
    pub(super) items: Vec<(String, Option<String>, u32)>,
    /// What the receiver answered failed (all of them for a non-2xx or a timeout).
    pub(super) failed: HashSet<String>,
    /// The request's `traceparent` and `tracestate` headers.
    pub(super) trace: (Option<String>, Option<String>),
    /// Each message's `traceparent` header, as the body has it.
    pub(super) traceparents: Vec<Value>,
    /// Deliveries under way when this one arrived, itself included.
    pub(super) out: usize,
}

pub(super) type Script = dyn Fn(&Value, usize) -> Answer + Send + Sync;

/// A URL target's signing secret the cases give (28 bytes), so a receiver checks every
/// signature from the first delivery ([`Receiver::verifying`]).
pub(super) const SECRET: &str = "whsec_c2x1aWNlLWNvbmZvcm1hbmNlLXB1c2gta2V5IQ==";

/// A scripted push target: answers each attempt as `script` says (given the body and the
/// attempt's number), keeps every attempt, and checks what at-least-once forbids.
pub(super) struct Receiver {
    pub(super) script: Box<Script>,
    pub(super) attempts: Mutex<Vec<Attempt>>,
    pub(super) acked: Mutex<HashSet<String>>,
    /// Messages delivered again after an attempt had acked them.
    pub(super) after_ack: Mutex<Vec<String>>,
    /// Keys in an attempt under way, and keys seen twice at once.
    pub(super) in_flight: Mutex<HashSet<String>>,
    pub(super) overlaps: Mutex<Vec<String>>,
    /// The signing key, to check every delivery's signature.
    pub(super) key: Mutex<Option<Vec<u8>>>,
    pub(super) bad_signatures: Mutex<usize>,
    /// Deliveries under way now.
    pub(super) out: Mutex<usize>,
}

impl Receiver {
    pub(super) fn new(script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(script),
            attempts: Mutex::default(),
            acked: Mutex::default(),
            after_ack: Mutex::default(),
            in_flight: Mutex::default(),
            overlaps: Mutex::default(),
            key: Mutex::default(),
            bad_signatures: Mutex::default(),
            out: Mutex::default(),
        })
    }

    /// Checks every delivery's signature with `secret`'s key from now on.
    pub(super) fn verifying(self: Arc<Self>, secret: &str) -> Arc<Self> {
        *self.key.lock().unwrap() = Some(sluice_core::queues::secret_key(secret).expect("a valid secret"));
        self
    }

    pub(super) fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    pub(super) fn acked(&self) -> HashSet<String> {
        self.acked.lock().unwrap().clone()
    }

    /// Counts a signed delivery whose signature does not verify, or that came while no key
    /// was given (nothing would have checked it).
    fn check_signature(&self, delivery: &Delivery) {
        let header = |name: &str| delivery.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let Some(key) = self.key.lock().unwrap().clone() else {
            if header("webhook-signature").is_some() {
                *self.bad_signatures.lock().unwrap() += 1;
            }
            return;
        };
        let (id, ts, sig) = (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let now_s = ts.as_deref().and_then(|t| t.parse().ok()).unwrap_or(0);
        let valid = match (id, ts, sig) {
            (Some(id), Some(ts), Some(sig)) => webhook::verify(&key, &id, &ts, &sig, &delivery.body, now_s),
            _ => false,
        };
        if !valid {
            *self.bad_signatures.lock().unwrap() += 1;
        }
    }
}

pub(super) fn items(body: &Value) -> Vec<(String, Option<String>, u32)> {
    body["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let id = m["id"].as_str().unwrap_or_default().to_owned();
                    (id, m["key"].as_str().map(str::to_owned), m["receive_count"].as_u64().unwrap_or(0) as u32)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[async_trait]
impl Deliver for Receiver {
    async fn deliver(&self, delivery: &Delivery) -> Answer {
        self.check_signature(delivery);
        let out = {
            let mut out = self.out.lock().unwrap();
            *out += 1;
            *out
        };
        let body: Value = serde_json::from_slice(&delivery.body).expect("a delivery's body is JSON");
        let items = items(&body);
        let keys: Vec<String> = items.iter().filter_map(|(_, k, _)| k.clone()).collect();
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            for k in &keys {
                if !in_flight.insert(k.clone()) {
                    self.overlaps.lock().unwrap().push(k.clone());
                }
            }
        }
        {
            let acked = self.acked.lock().unwrap();
            self.after_ack
                .lock()
                .unwrap()
                .extend(items.iter().filter(|(id, ..)| acked.contains(id)).map(|i| i.0.clone()));
        }
        // Let other deliveries run meanwhile (a slow receiver).
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let n = self.attempts.lock().unwrap().len();
        let answer = (self.script)(&body, n);
        let ids: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
        let failed = sluice_core::push::judge(&answer, &ids).failed;
        self.acked.lock().unwrap().extend(ids.iter().filter(|id| !failed.contains(*id)).cloned());
        let header = |name: &str| delivery.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let (webhook_id, trace) = (header("webhook-id"), (header("traceparent"), header("tracestate")));
        let traceparents = body["messages"].as_array().into_iter().flatten();
        let traceparents = traceparents.map(|m| m["headers"]["traceparent"].clone()).collect();
        self.attempts.lock().unwrap().push(Attempt { webhook_id, items, failed, trace, traceparents, out });
        *self.out.lock().unwrap() -= 1;
        let mut in_flight = self.in_flight.lock().unwrap();
        for k in &keys {
            in_flight.remove(k);
        }
        answer
    }
}

pub(super) fn ok(body: Value) -> Answer {
    Answer::Status { status: 200, retry_after_ms: None, body: serde_json::to_vec(&body).unwrap() }
}

pub(super) fn status(status: u16, retry_after_ms: Option<u64>) -> Answer {
    Answer::Status { status, retry_after_ms, body: b"nope".to_vec() }
}

pub(super) fn json_event(value: Value, key: Option<String>) -> NewEvent {
    NewEvent {
        key: key.map(Bytes::from),
        headers: Vec::new(),
        value: Bytes::from(value.to_string()),
        value_is_json: true,
        timestamp_ms: None,
        partition: None,
    }
}

pub(super) fn push_spec(push: PushSpec, max_receive_count: u32, backoff_ms: u64) -> SubscriptionSpec {
    SubscriptionSpec {
        start: StartAt::Earliest,
        max_receive_count,
        redelivery_backoff: Some(Backoff::Steps(vec![backoff_ms])),
        push: Some(push),
        ..SubscriptionSpec::default()
    }
}

/// Drains `topic`'s push subscriptions, moving the clock by `step` between rounds, until a
/// round delivers nothing twice in a row (nothing due, nothing waiting a step away).
pub(super) async fn drain_all(dispatcher: &Dispatcher, clock: &ManualClock, topic: &str, step: i64) {
    let topics = Topics::Named(vec![topic.to_owned()]);
    let mut idle = 0;
    for _ in 0..500 {
        let done = dispatcher.drain(&topics, clock.now_ms() + 60_000).await.expect("drain");
        idle = if done.deliveries == 0 { idle + 1 } else { 0 };
        if idle == 2 {
            return;
        }
        clock.advance(step);
    }
    panic!("the push subscription never drained");
}

/// The wakes a dispatcher asked for, as the dispatcher function would have been invoked.
#[derive(Default)]
pub(super) struct Asked(pub(super) Mutex<Vec<(Vec<String>, i64)>>);

#[async_trait]
impl Wakes for Asked {
    async fn wake_at(&self, topics: &[String], at_ms: i64) -> Result<(), TargetError> {
        self.0.lock().unwrap().push((topics.to_vec(), at_ms));
        Ok(())
    }
}
