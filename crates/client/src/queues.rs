//! Work queues: subscriptions, receive, peek, ack, nack, visibility, and the dead-letter queue.
//! Subscription settings and answers are JSON values: they have many optional parts
//! (start, filter, push, backoff) that docs/API.md describes.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_wire::{RotateSecret, SecretRotated, SeekOutcome, Settled};

use crate::client::Call;
use crate::types::{DeadLetterPage, Message, PeekedMessage, ReceiptResult};
use crate::{Client, Error};

#[derive(Deserialize)]
struct Peeked {
    messages: Vec<PeekedMessage>,
}

#[derive(Deserialize)]
struct Subscriptions {
    subscriptions: Vec<Value>,
}

/// What one receive answered.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Received {
    /// The messages, now in flight for this receiver.
    pub messages: Vec<Message>,
    /// One result per receipt acked with the receive, in the order sent.
    #[serde(default)]
    pub acks: Vec<ReceiptResult>,
}

/// A receive request: how many, how long to wait, and what to ack first.
#[derive(Debug, Clone, Default)]
pub struct Receive {
    /// 1 to 100 (default 1).
    pub max_messages: u32,
    /// Long poll: how long to wait for a first message (at most 20,000).
    pub wait_ms: u64,
    /// The visibility timeout of these deliveries; `None`: the subscription's.
    pub visibility_timeout_ms: Option<u64>,
    /// Receipts to ack before receiving (at most 100), in the same request.
    pub ack: Vec<String>,
}

impl Client {
    fn subscription(topic: &str, sub: &str) -> String {
        format!("/v1/topics/{topic}/subscriptions/{sub}")
    }

    /// Creates a subscription with `settings` (docs/API.md lists them; `{}` for the
    /// defaults), or finds it with exactly these settings. Retried (creating is
    /// idempotent), except for a webhook push target without a `secret`: the server makes
    /// one and shows it only in the answer that created the subscription, so a retry after
    /// a lost answer would succeed without it. That one is sent once, and a lost answer is
    /// the caller's error to see.
    pub async fn create_subscription(&self, topic: &str, sub: &str, settings: &Value) -> Result<Value, Error> {
        let makes_secret = settings.get("push").is_some_and(|p| p.get("url").is_some() && p.get("secret").is_none());
        let call = Call::new(Method::PUT, Self::subscription(topic, sub)).json(settings)?;
        self.fetch(if makes_secret { call.once() } else { call }).await
    }

    /// The subscriptions of a topic, by name.
    pub async fn list_subscriptions(&self, topic: &str) -> Result<Vec<Value>, Error> {
        let call = Call::new(Method::GET, format!("/v1/topics/{topic}/subscriptions"));
        Ok(self.fetch::<Subscriptions>(call).await?.subscriptions)
    }

    /// A subscription with its backlog (visible, in flight, delayed, dead, …) per partition.
    pub async fn describe_subscription(&self, topic: &str, sub: &str) -> Result<Value, Error> {
        self.fetch(Call::new(Method::GET, Self::subscription(topic, sub))).await
    }

    /// Changes a subscription's settings in place: `change` names those to change
    /// (docs/API.md, "Change"; `null` removes a filter, a backoff or a `rate`), the others stay.
    /// Answers the subscription as described; once it has, every receive or delivery that
    /// starts uses the new settings. Retried: the same change twice changes nothing more.
    pub async fn patch_subscription(&self, topic: &str, sub: &str, change: &Value) -> Result<Value, Error> {
        self.fetch(Call::new(Method::PATCH, Self::subscription(topic, sub)).json(change)?).await
    }

    /// Pauses a subscription: it keeps counting the topic's events and delivers nothing
    /// (receives wait as on an empty queue, push stops) until resumed; messages already out
    /// can still be acked, nacked and held. Answers the subscription as described. Retried
    /// (pausing a paused subscription changes nothing).
    pub async fn pause(&self, topic: &str, sub: &str) -> Result<Value, Error> {
        let call = Call::new(Method::POST, format!("{}/pause", Self::subscription(topic, sub)));
        self.fetch(call.json(&json!({}))?).await
    }

    /// Moves every partition of a subscription's queue to `to` (`"earliest"`, `"latest"`,
    /// `{"timestamp_ms": T}` or `{"offsets": [o0, o1, …]}`): messages before it are passed
    /// over, those from it on delivered again as new. With `dry_run`, nothing changes and
    /// the answer counts what the seek would do now. A dry run is retried; a seek is not
    /// (a retry after a lost answer would count from where the first one moved the queue).
    pub async fn seek(&self, topic: &str, sub: &str, to: Value, dry_run: bool) -> Result<SeekOutcome, Error> {
        let call = Call::new(Method::POST, format!("{}/seek", Self::subscription(topic, sub)));
        let call = call.json(&json!({ "to": to, "dry_run": dry_run }))?;
        self.fetch(if dry_run { call } else { call.once() }).await
    }

    /// Purges a subscription's queue (a seek to `latest`; its dead letters stay). Not
    /// retried, as [`Client::seek`].
    pub async fn purge(&self, topic: &str, sub: &str) -> Result<SeekOutcome, Error> {
        let call = Call::new(Method::POST, format!("{}/purge", Self::subscription(topic, sub)));
        self.fetch(call.json(&json!({}))?.once()).await
    }

    /// Rotates a push subscription's signing secret: `rotation.secret` (generated if
    /// `None`) signs from now on, shown only in this answer; the old one signs beside it
    /// until `previous_expires_ms` (`rotation.overlap_ms`, 24 h if `None`). Retried only
    /// with a given secret (a retry of one already applied changes nothing); a generated
    /// one is sent once, since a retry after a lost answer would replace the secret no one
    /// saw and end the old one's overlap.
    pub async fn rotate_secret(&self, topic: &str, sub: &str, rotation: &RotateSecret) -> Result<SecretRotated, Error> {
        let call = Call::new(Method::POST, format!("{}/secret", Self::subscription(topic, sub))).json(rotation)?;
        self.fetch(if rotation.secret.is_some() { call } else { call.once() }).await
    }

    /// Resumes a paused subscription; answers it as described. Retried, as [`Client::pause`].
    pub async fn resume(&self, topic: &str, sub: &str) -> Result<Value, Error> {
        let call = Call::new(Method::POST, format!("{}/resume", Self::subscription(topic, sub)));
        self.fetch(call.json(&json!({}))?).await
    }

    /// Deletes a subscription. Retried; a retry's `404` means an earlier attempt deleted it.
    pub async fn delete_subscription(&self, topic: &str, sub: &str) -> Result<(), Error> {
        self.delete(Self::subscription(topic, sub)).await
    }

    /// Acks `request.ack`, then receives. Retried: a lost answer leaves its messages in
    /// flight until their visibility timeout, then they are delivered again. A retry's acks
    /// answer as the server finds them: `ok` for a message already acked (by the lost
    /// attempt), `stale_receipt` only for one delivered again, released or dead-lettered.
    pub async fn receive(&self, topic: &str, sub: &str, request: &Receive) -> Result<Received, Error> {
        let mut body = json!({"max_messages": request.max_messages.max(1), "wait_ms": request.wait_ms});
        if let Some(ms) = request.visibility_timeout_ms {
            body["visibility_timeout_ms"] = json!(ms);
        }
        if !request.ack.is_empty() {
            body["ack"] = json!(request.ack);
        }
        let path = format!("{}/receive", Self::subscription(topic, sub));
        let call = Call::new(Method::POST, path).json(&body)?.waiting(request.wait_ms);
        self.fetch(call).await
    }

    /// Up to `limit` (1 to 100) visible messages, without receiving them: no receipt, and
    /// no receive count, lease or cursor changes, so the next receive gets them as before.
    /// Retried (it changes nothing).
    pub async fn peek(&self, topic: &str, sub: &str, limit: u32) -> Result<Vec<PeekedMessage>, Error> {
        let call = Call::new(Method::GET, format!("{}/messages", Self::subscription(topic, sub))).query("limit", limit);
        Ok(self.fetch::<Peeked>(call).await?.messages)
    }

    /// The messages are done. One result per receipt, in order.
    pub async fn ack(&self, topic: &str, sub: &str, receipts: &[String]) -> Result<Vec<ReceiptResult>, Error> {
        self.settle(topic, sub, "ack", json!({"receipts": receipts})).await
    }

    /// Gives the messages back, visible again after `delay_ms`.
    pub async fn nack(
        &self,
        topic: &str,
        sub: &str,
        receipts: &[String],
        delay_ms: u64,
    ) -> Result<Vec<ReceiptResult>, Error> {
        self.settle(topic, sub, "nack", json!({"receipts": receipts, "delay_ms": delay_ms})).await
    }

    /// Keeps the messages hidden for `visibility_timeout_ms` from now; an `ok` result
    /// carries the receipt to use from then on.
    pub async fn change_visibility(
        &self,
        topic: &str,
        sub: &str,
        receipts: &[String],
        visibility_timeout_ms: u64,
    ) -> Result<Vec<ReceiptResult>, Error> {
        let body = json!({"receipts": receipts, "visibility_timeout_ms": visibility_timeout_ms});
        self.settle(topic, sub, "visibility", body).await
    }

    /// Retried: the server answers a retry truthfully (a message an earlier attempt settled
    /// is `ok`; `stale_receipt` means this settle did not happen), so results are as sent.
    async fn settle(&self, topic: &str, sub: &str, verb: &str, body: Value) -> Result<Vec<ReceiptResult>, Error> {
        let call = Call::new(Method::POST, format!("{}/{verb}", Self::subscription(topic, sub))).json(&body)?;
        Ok(self.fetch::<Settled>(call).await?.results)
    }

    /// A page of dead letters, after `after` (the previous page's `next`).
    pub async fn dead_letters(
        &self,
        topic: &str,
        sub: &str,
        limit: u32,
        after: Option<&str>,
    ) -> Result<DeadLetterPage, Error> {
        let mut call = Call::new(Method::GET, format!("{}/dlq", Self::subscription(topic, sub))).query("limit", limit);
        if let Some(after) = after {
            call = call.query("after", after);
        }
        self.fetch(call).await
    }

    /// Removes one dead letter for good. Retried; a retry's `404` means it is gone.
    pub async fn delete_dead_letter(&self, topic: &str, sub: &str, id: &str) -> Result<(), Error> {
        self.delete(format!("{}/dlq/{id}", Self::subscription(topic, sub))).await
    }

    /// Puts up to `max_messages` dead letters (all of them: `None`) back in the queue;
    /// answers how many. Retried only without a bound, where a retry is harmless.
    pub async fn redrive(&self, topic: &str, sub: &str, max_messages: Option<u64>) -> Result<u64, Error> {
        let path = format!("{}/dlq/redrive", Self::subscription(topic, sub));
        let call = match max_messages {
            Some(n) => Call::new(Method::POST, path).json(&json!({"max_messages": n}))?.once(),
            None => Call::new(Method::POST, path).json(&json!({}))?,
        };
        Ok(self.fetch::<Value>(call).await?["redriven"].as_u64().unwrap_or_default())
    }

    /// Removes every dead letter; answers how many. Retried.
    pub async fn purge_dead_letters(&self, topic: &str, sub: &str) -> Result<u64, Error> {
        let call = Call::new(Method::DELETE, format!("{}/dlq", Self::subscription(topic, sub)));
        Ok(self.fetch::<Value>(call).await?["purged"].as_u64().unwrap_or_default())
    }
}
