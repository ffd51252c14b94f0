//! The consumer groups' keys: a group's record, members and activity, the group list,
//! committed offsets and their expiry index.

use super::push_padded;
use crate::ports::objects::StorageError;
use crate::ports::state::Key;

const GROUPS_PK: &str = "groups";
const EXPIRY_PK: &str = "goff-expiry";
/// The sort key of a group's record in its collection.
pub const GROUP_META_SK: &str = "meta";
/// The sort key of a group's activity in its collection.
pub const ACTIVITY_SK: &str = "active";
/// What a member's sort key in a [`group_pk`] starts with.
pub const MEMBER_PREFIX: &str = "member#";
/// What every [`group_pk`] starts with.
pub const GROUP_PREFIX: &str = "group#";
/// What every [`offsets_pk`] starts with.
pub const OFFSETS_PREFIX: &str = "goff#";

/// The collection of a group's record, members and activity.
pub fn group_pk(group: &str) -> String {
    format!("{GROUP_PREFIX}{group}")
}

/// A group's record (generation, assignment).
pub fn group_meta_key(group: &str) -> Key {
    Key::new(group_pk(group), GROUP_META_SK)
}

/// A member of a group.
pub fn member_key(group: &str, member: &str) -> Key {
    Key::new(group_pk(group), format!("{MEMBER_PREFIX}{member}"))
}

/// The member a sort key in a [`group_pk`] names, `None` if it names no member.
pub fn member_of(sk: &str) -> Option<&str> {
    sk.strip_prefix(MEMBER_PREFIX)
}

/// A group's activity.
pub fn activity_key(group: &str) -> Key {
    Key::new(group_pk(group), ACTIVITY_SK)
}

/// The collection of the offsets expiry index.
pub fn expiry_pk() -> &'static str {
    EXPIRY_PK
}

/// A group's entry in the offsets expiry index, due at `until`.
pub fn expiry_key(until: i64, group: &str) -> Key {
    Key::new(EXPIRY_PK, format!("{:020}#{group}", until.max(0)))
}

/// The last sort key of the expiry index's entries due at `threshold` or earlier ('$'
/// sorts right after '#').
pub fn expiry_sk_upto(threshold: i64) -> String {
    format!("{threshold:020}$")
}

/// An expiry entry's time and group.
pub fn expiry_entry_of(key: &Key) -> Result<(i64, String), StorageError> {
    let parsed = key.sk.split_once('#').and_then(|(t, g)| Some((t.parse::<i64>().ok()?, g.to_owned())));
    parsed.ok_or_else(|| StorageError::Corrupt(format!("offsets expiry entry {:?}", key.sk)))
}

/// The collection of the group registry (the group list).
pub fn groups_pk() -> &'static str {
    GROUPS_PK
}

/// A group's entry in the group registry.
pub fn registry_key(group: &str) -> Key {
    Key::new(GROUPS_PK, group)
}

/// The collection of a group's committed offsets.
pub fn offsets_pk(group: &str) -> String {
    format!("{OFFSETS_PREFIX}{group}")
}

/// A group's committed offset of a partition.
pub fn offset_key(group: &str, topic: &str, partition: u32) -> Key {
    Key::new(offsets_pk(group), tp_key(topic, partition))
}

/// `topic#partition` keys as the group records use them (partition zero-padded, so string
/// order is numeric order).
pub fn tp_key(topic: &str, partition: u32) -> String {
    let mut key = String::with_capacity(topic.len() + 11);
    key.push_str(topic);
    key.push('#');
    push_padded(&mut key, u64::from(partition), 10);
    key
}

/// The topic and partition of a [`tp_key`].
pub fn split_tp_key(key: &str) -> Option<(&str, u32)> {
    let (topic, partition) = key.rsplit_once('#')?;
    Some((topic, partition.parse().ok()?))
}
