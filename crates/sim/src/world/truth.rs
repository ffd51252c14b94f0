//! Ground truth, read from the stores directly (no faults), and the decoders the checker
//! reads receipts and event values with.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sluice_core::layout::{self, HeadRecord, TopicRecord};
use sluice_core::queues::SubscriptionRecord;

use super::{Done, World};

impl World {
    pub(crate) fn topic_now(&self, name: &str) -> Option<(u64, u64, bool)> {
        let item = self.mem.peek(&sluice_core::keys::topic_key(name))?;
        let record: TopicRecord = layout::decode("topic", &item.value).ok()?;
        Some((record.id, item.version, record.deleted_ms.is_none()))
    }

    pub(crate) fn live_topic_id(&self, name: &str) -> Option<u64> {
        self.topic_now(name).filter(|t| t.2).map(|t| t.0)
    }

    pub(crate) fn head_now(&self, topic_id: u64, partition: u32) -> HeadRecord {
        self.mem
            .peek(&sluice_core::keys::head_key(topic_id, partition))
            .and_then(|i| layout::decode("head", &i.value).ok())
            .unwrap_or_default()
    }

    /// The newest entry the partition's head carries, if it carries one.
    pub(crate) fn head_tail(&self, topic_id: u64, partition: u32) -> Option<layout::Tail> {
        let item = self.mem.peek(&sluice_core::keys::head_key(topic_id, partition))?;
        layout::decode_head(&item.value).ok()?.1
    }

    pub(crate) fn sub_now(&self, topic: &str, sub: &str) -> Option<SubscriptionRecord> {
        let tid = self.live_topic_id(topic)?;
        let item = self.mem.peek(&sluice_core::keys::subscription_key(tid, sub))?;
        // A deleted subscription may leave a tombstone (`"deleted": true`) rather than no item.
        let raw: serde_json::Value = serde_json::from_slice(&item.value).ok()?;
        if raw.get("deleted").and_then(|d| d.as_bool()) == Some(true) {
            return None;
        }
        layout::decode("subscription", &item.value).ok()
    }

    /// The topic id an op worked on, if the topic was not deleted or re-created while it ran.
    pub(crate) fn known_topic(&self, d: &Done, topic: &str) -> Option<u64> {
        let now = self.topic_now(topic);
        match (d.topic0, now) {
            (Some(a), Some(b)) if a == b && a.2 => Some(a.0),
            _ => None,
        }
    }
}

/// A receipt's sub id, partition, offset, nonce and receive count. Receipts start with
/// `r` (`queues/receipt.rs`): 76 characters, or 75 for one issued before the letter.
pub(crate) fn receipt_parts(receipt: &str) -> Option<(u64, u32, u64, u64, u32)> {
    let body = if receipt.len() == 75 { receipt } else { receipt.strip_prefix('r')? };
    let b = URL_SAFE_NO_PAD.decode(body).ok()?;
    if b.len() < 40 {
        return None;
    }
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
    let sub = u64_at(0);
    let partition = u32::from_be_bytes(b[8..12].try_into().unwrap());
    let offset = u64_at(12);
    let nonce = u64_at(20);
    let count = u32::from_be_bytes(b[36..40].try_into().unwrap());
    Some((sub, partition, offset, nonce, count))
}

pub(crate) fn event_id(value: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    v.get("e")?.as_u64()
}
