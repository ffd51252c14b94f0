//! What one delivery is on the wire: the JSON body, its id, and its Standard Webhooks
//! signature (`webhook-id`, `webhook-timestamp`, `webhook-signature`: `v1,<base64 of
//! HMAC-SHA-256 over "{id}.{timestamp}.{body}">`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::Sha256;

use crate::queues::Message;

/// Receivers reject timestamps further than this from their clock (the standard's advice).
pub const TOLERANCE_S: i64 = 5 * 60;

#[derive(Serialize)]
struct Body<'a> {
    topic: &'a str,
    subscription: &'a str,
    messages: Vec<Item>,
}

#[derive(Serialize)]
struct Item {
    id: String,
    partition: u32,
    offset: u64,
    receive_count: u32,
    first_receive_ms: i64,
    timestamp_ms: i64,
    key: Option<String>,
    headers: serde_json::Map<String, serde_json::Value>,
    /// Its schedule, if it was published with one (kept as a header, shown as a field).
    #[serde(skip_serializing_if = "Option::is_none")]
    deliver_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
}

/// A message's id in deliveries and in `batchItemFailures`: `<topic>/<partition>/<offset>`.
pub fn message_id(topic: &str, partition: u32, offset: u64) -> String {
    format!("{topic}/{partition}/{offset}")
}

/// The body of a delivery of `messages` (values published as JSON stay JSON; bytes are
/// base64 under `value_base64`).
pub fn body(topic: &str, subscription: &str, messages: &[Message]) -> Vec<u8> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let items = messages
        .iter()
        .map(|m| {
            let r = &m.event.record;
            let json = r.value_is_json.then(|| std::str::from_utf8(&r.value).ok()).flatten();
            let value = json.and_then(|v| RawValue::from_string(v.to_owned()).ok());
            Item {
                id: message_id(topic, m.event.partition, m.event.offset),
                partition: m.event.partition,
                offset: m.event.offset,
                receive_count: m.receive_count,
                first_receive_ms: m.first_receive_ms,
                timestamp_ms: r.timestamp_ms,
                key: r.key.as_deref().map(text),
                headers: r
                    .headers
                    .iter()
                    .filter(|(n, _)| n != crate::schedule::DELIVER_AT_HEADER)
                    .map(|(n, v)| (n.clone(), text(v).into()))
                    .collect(),
                deliver_at_ms: crate::schedule::deliver_at(&r.headers),
                value_base64: value.is_none().then(|| STANDARD.encode(&r.value)),
                value,
            }
        })
        .collect();
    // Serializing plain strings, numbers and checked JSON cannot fail.
    serde_json::to_vec(&Body { topic, subscription, messages: items }).unwrap_or_default()
}

/// The `webhook-id` of a delivery: the same for the same messages of the same subscription,
/// so a retry of a batch carries the id of its first attempt (the receiver's dedup key).
pub fn delivery_id(subscription_id: u64, messages: &[Message]) -> String {
    let mut ids: Vec<(u32, u64)> = messages.iter().map(|m| (m.event.partition, m.event.offset)).collect();
    ids.sort_unstable();
    let mut bytes = subscription_id.to_le_bytes().to_vec();
    for (p, o) in ids {
        bytes.extend_from_slice(&p.to_le_bytes());
        bytes.extend_from_slice(&o.to_le_bytes());
    }
    format!("msg_{:016x}{:08x}", crate::hash::fnv1a_64(&bytes), crate::hash::fnv1a_32(&bytes))
}

/// The HMAC-SHA-256 of `{id}.{timestamp}.{body}` with `key`, not yet finalized.
fn mac(key: &[u8], id: &str, timestamp_s: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(format!("{id}.{timestamp_s}.").as_bytes());
    mac.update(body);
    mac
}

/// `v1,<base64 signature>` of a delivery with `key` (the secret's decoded bytes).
pub fn sign(key: &[u8], id: &str, timestamp_s: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(key, id, timestamp_s, body).finalize().into_bytes()))
}

/// `webhook-signature` with each of `keys`, space-separated (`v1,<new> v1,<old>` while a
/// rotated secret's overlap lasts: the standard lets a receiver accept any one).
pub fn sign_with_each(keys: &[Vec<u8>], id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let signatures: Vec<String> = keys.iter().map(|key| sign(key, id, timestamp_s, body)).collect();
    signatures.join(" ")
}

/// Checks a delivery as a receiver should: the timestamp within [`TOLERANCE_S`] of
/// `now_s`, and one of the space-separated signatures matching (in constant time).
pub fn verify(key: &[u8], id: &str, timestamp: &str, signatures: &str, body: &[u8], now_s: i64) -> bool {
    let Ok(ts) = timestamp.parse::<i64>() else { return false };
    if (now_s - ts).abs() > TOLERANCE_S {
        return false;
    }
    signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|sig| STANDARD.decode(sig).is_ok_and(|sig| mac(key, id, ts, body).verify_slice(&sig).is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks reference libraries' test vector.
    #[test]
    fn signs_as_the_standard_s_reference_vector() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let key = crate::queues::secret_key(secret).unwrap();
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        let sig = sign(&key, id, 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(verify(&key, id, "1614265330", &format!("v1,bogus {sig}"), body, 1614265330 + 10));
        assert!(!verify(&key, id, "1614265330", &sig, b"{\"test\": 2432232315}", 1614265330));
        assert!(!verify(&key, id, "1614265330", &sig, body, 1614265330 + TOLERANCE_S + 1));
    }
}
