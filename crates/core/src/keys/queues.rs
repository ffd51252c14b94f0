//! The queues' keys: subscriptions, a queue's cursor, leases, push counts and run leases, dead
//! letters, subscription purge orders and the receipt-signing key.

use super::offset_sk;
use crate::ports::objects::StorageError;
use crate::ports::state::Key;

/// The sort key of a queue's cursor item.
pub const CURSOR_SK: &str = "c";
/// The sort key of a push subscription's delivery counts: sorts after the cursor and every
/// lease, so a partition's first items are still those.
pub const PUSH_STATS_SK: &str = "s";
/// The sort key of a subscription's rate bucket: after every lease, before the push counts.
pub const RATE_SK: &str = "r";
/// What every lease item's sort key starts with.
pub const LEASE_PREFIX: &str = "l#";
const SUB_PURGE_PK: &str = "purge-subs";
/// What every push subscription's run lease's partition key starts with.
pub const PUSH_RUN_PREFIX: &str = "push-run#";
/// What every [`subs_pk`] starts with.
pub const SUBS_PREFIX: &str = "subs#";
/// What every [`queue_pk`] starts with.
pub const QUEUE_PREFIX: &str = "q#";
/// What every [`dlq_pk`] starts with.
pub const DLQ_PREFIX: &str = "dlq#";

/// The collection of a topic's subscriptions.
pub fn subs_pk(topic_id: u64) -> String {
    format!("{SUBS_PREFIX}{topic_id:016x}")
}

/// Where a subscription's record is.
pub fn subscription_key(topic_id: u64, name: &str) -> Key {
    Key::new(subs_pk(topic_id), name)
}

/// The collection of a subscription's cursor and leases on one partition.
pub fn queue_pk(sub_id: u64, partition: u32) -> String {
    format!("{QUEUE_PREFIX}{sub_id:016x}#{partition}")
}

/// The collection of a subscription's dead letters on one partition.
pub fn dlq_pk(sub_id: u64, partition: u32) -> String {
    format!("{DLQ_PREFIX}{sub_id:016x}#{partition}")
}

/// The collection of the marks a subscription's dead letters leave on one partition when
/// they are deleted or purged (apart from the dead letters, which are listed whole).
pub fn removed_dead_pk(sub_id: u64, partition: u32) -> String {
    format!("{DLQ_PREFIX}{sub_id:016x}#{partition}#gone")
}

/// The collections holding a subscription's state on one partition: its cursor and
/// leases, its dead letters, and the marks of those deleted or purged.
pub fn queue_collections(sub_id: u64, partition: u32) -> [String; 3] {
    [queue_pk(sub_id, partition), dlq_pk(sub_id, partition), removed_dead_pk(sub_id, partition)]
}

/// A queue's cursor item on one partition.
pub fn cursor_key(sub_id: u64, partition: u32) -> Key {
    Key::new(queue_pk(sub_id, partition), CURSOR_SK)
}

/// A push subscription's delivery counts (kept on partition 0).
pub fn push_stats_key(sub_id: u64) -> Key {
    Key::new(queue_pk(sub_id, 0), PUSH_STATS_SK)
}

/// A subscription's rate bucket (`queues/rate.rs`; kept on partition 0, so the
/// subscription's purge removes it).
pub fn rate_key(sub_id: u64) -> Key {
    Key::new(queue_pk(sub_id, 0), RATE_SK)
}

/// A push subscription's run lease: which dispatcher run drives it (an item of its own,
/// expiring, so no purge needs to find it).
pub fn push_run_key(sub_id: u64) -> Key {
    Key::new(format!("{PUSH_RUN_PREFIX}{sub_id:016x}"), "-")
}

/// The sort key of a lease due at `due`.
pub fn lease_sk(due: i64, nonce: u64) -> String {
    format!("{LEASE_PREFIX}{:020}#{nonce:016x}", due.max(0))
}

/// A lease item.
pub fn lease_key(sub_id: u64, partition: u32, due: i64, nonce: u64) -> Key {
    Key::new(queue_pk(sub_id, partition), lease_sk(due, nonce))
}

/// The due time a [`lease_sk`] names.
pub fn parse_lease_sk(sk: &str) -> Result<i64, StorageError> {
    sk.strip_prefix(LEASE_PREFIX)
        .and_then(|rest| rest.split('#').next())
        .and_then(|due| due.parse().ok())
        .ok_or_else(|| StorageError::Corrupt(format!("lease sort key {sk:?}")))
}

/// The dead letter of the message at `offset`.
pub fn dead_key(sub_id: u64, partition: u32, offset: u64) -> Key {
    Key::new(dlq_pk(sub_id, partition), offset_sk(offset))
}

/// The mark the dead letter of the message at `offset` left when it was deleted or purged.
pub fn removed_dead_key(sub_id: u64, partition: u32, offset: u64) -> Key {
    Key::new(removed_dead_pk(sub_id, partition), offset_sk(offset))
}

/// The collection of every subscription purge order.
pub fn sub_purge_pk() -> &'static str {
    SUB_PURGE_PK
}

/// The purge order of the deleted subscription `sub_id`.
pub fn sub_purge_key(sub_id: u64) -> Key {
    Key::new(SUB_PURGE_PK, format!("{sub_id:016x}"))
}

/// The receipt-signing key.
pub fn receipt_signing_key() -> Key {
    Key::new("queues", "receipt-key")
}
