//! The registry of stored items: every kind of item the core keeps in the state store,
//! with the shape of its keys, the record it holds, who writes it and who deletes it.
//! One list, so a reader (and DynamoDB's operator) sees the whole layout in one place;
//! the constructors beside it ([`topic_key`], [`cursor_key`], …, one module per
//! capability) build every key of these shapes; [`kind_of`] parses a key back to its
//! kind, and the simulation checks that every key the core writes is one of these. docs/DESIGN.md and docs/AWS.md carry [`table`]'s output
//! (a test keeps them equal).
//!
//! Placeholders in the shapes: `<topic>`/`<sub>` are ids in 16 hex digits, `<p>` a
//! partition in decimal, `<offset>` and `<time>` 20-digit decimals, `<p10>` a partition
//! in 10 digits, `<shard>` a small decimal.

use crate::ports::state::Key;

/// One kind of stored item.
#[derive(Debug)]
pub struct ItemKind {
    pub name: &'static str,
    pub pk: &'static str,
    pub sk: &'static str,
    /// The record its value holds (JSON, encoded by `layout::encode`).
    pub value: &'static str,
    pub written_by: &'static str,
    pub deleted_by: &'static str,
}

/// Every kind of item, in the order the docs list them. (A table: long by nature.)
pub const ITEM_KINDS: &[ItemKind] = &[
    ItemKind {
        name: "topic (live or tombstone)",
        pk: "topics",
        sk: "<name>",
        value: "TopicRecord",
        written_by: "create, delete",
        deleted_by: "re-create replaces it",
    },
    ItemKind {
        name: "purge order of a deleted topic",
        pk: "purge",
        sk: "<topic>",
        value: "PurgeRecord",
        written_by: "topic delete, janitor (progress)",
        deleted_by: "janitor",
    },
    ItemKind {
        name: "partition head (next offset, log start, bytes, max timestamp)",
        pk: "head#<topic>",
        sk: "<p10>",
        value: "HeadRecord",
        written_by: "topic create, committer, retention, topic delete (a tombstone)",
        deleted_by: "topic purge",
    },
    ItemKind {
        name: "segment index entry",
        pk: "seg#<topic>#<p>",
        sk: "<offset>",
        value: "SegmentRecord",
        written_by: "committer, compaction",
        deleted_by: "retention, compaction, topic purge",
    },
    ItemKind {
        name: "idempotency record (expires after 48 h)",
        pk: "idem#<topic>#<shard>",
        sk: "<key>",
        value: "IdempotencyRecord",
        written_by: "committer",
        deleted_by: "expiry, topic purge",
    },
    ItemKind {
        name: "object record (live segments and bytes; doomed before deletion)",
        pk: "obj#<object>",
        sk: "-",
        value: "ObjectRecord",
        written_by: "committer, retention, compaction, collector",
        deleted_by: "collector (expiry once doomed)",
    },
    ItemKind {
        name: "object whose segments are all gone",
        pk: "free#<shard>",
        sk: "<object>",
        value: "FreeRecord",
        written_by: "retention, compaction, topic purge",
        deleted_by: "collector",
    },
    ItemKind {
        name: "the janitor's cursors (collector listing, pass)",
        pk: "upkeep",
        sk: "gc, pass",
        value: "Cursor",
        written_by: "janitor",
        deleted_by: "never",
    },
    ItemKind {
        name: "what the janitor did to a topic",
        pk: "upkeep#<topic>",
        sk: "-",
        value: "UpkeepRecord",
        written_by: "janitor",
        deleted_by: "topic purge",
    },
    ItemKind {
        name: "time index entry (a settled segment by its running maximum timestamp)",
        pk: "time#<topic>#<p>",
        sk: "<time>#<offset>",
        value: "TimeEntry",
        written_by: "janitor (time index)",
        deleted_by: "retention, topic purge",
    },
    ItemKind {
        name: "time index cursor",
        pk: "tcur#<topic>",
        sk: "<p10>",
        value: "TimeCursor",
        written_by: "janitor (time index)",
        deleted_by: "topic purge",
    },
    ItemKind {
        name: "group record (generation, assignment)",
        pk: "group#<group>",
        sk: "meta",
        value: "GroupRecord",
        written_by: "poll (rebalance), seek, leave",
        deleted_by: "group delete, offsets expiry",
    },
    ItemKind {
        name: "group member (expires with its session)",
        pk: "group#<group>",
        sk: "member#<member>",
        value: "MemberRecord",
        written_by: "poll (heartbeat)",
        deleted_by: "leave, expiry",
    },
    ItemKind {
        name: "group activity (no session outlasts it)",
        pk: "group#<group>",
        sk: "active",
        value: "ActivityRecord",
        written_by: "poll, seek",
        deleted_by: "group delete, offsets expiry",
    },
    ItemKind {
        name: "group registry entry (the group list)",
        pk: "groups",
        sk: "<group>",
        value: "RegistryRecord",
        written_by: "poll (first), seek",
        deleted_by: "group delete, offsets expiry",
    },
    ItemKind {
        name: "committed offset",
        pk: "goff#<group>",
        sk: "<topic name>#<p>",
        value: "OffsetRecord",
        written_by: "commit, poll (auto-commit), seek",
        deleted_by: "group delete, offsets expiry",
    },
    ItemKind {
        name: "offsets expiry index entry",
        pk: "goff-expiry",
        sk: "<time>#<group>",
        value: "ActivityRecord",
        written_by: "poll, seek",
        deleted_by: "offsets expiry, group delete",
    },
    ItemKind {
        name: "subscription (live or tombstone)",
        pk: "subs#<topic>",
        sk: "<name>",
        value: "SubscriptionRecord",
        written_by: "create, delete, pause, resume, change, secret rotation",
        deleted_by: "topic purge",
    },
    ItemKind {
        name: "queue cursor (next offset, dead and expired counts, small held leases)",
        pk: "q#<sub>#<p>",
        sk: "c",
        value: "CursorItem",
        written_by:
            "create, receive, ack, nack, visibility, bury, redrive, pause, resume, seek, change, delete (tombstone)",
        deleted_by: "subscription purge",
    },
    ItemKind {
        name: "lease (messages delivered or parked, by due time)",
        pk: "q#<sub>#<p>",
        sk: "l#<time>#<nonce>",
        value: "LeaseRecord",
        written_by: "receive, ack, nack, visibility, redrive",
        deleted_by: "receive, ack, bury, seek, subscription purge",
    },
    ItemKind {
        name: "push delivery counts, last error and flow state (partition 0 only)",
        pk: "q#<sub>#<p>",
        sk: "s",
        value: "PushStatsRecord",
        written_by: "dispatcher",
        deleted_by: "subscription purge",
    },
    ItemKind {
        name: "rate bucket (tokens, throttled time; partition 0 only)",
        pk: "q#<sub>#<p>",
        sk: "r",
        value: "RateRecord",
        written_by: "receive (take and give back tokens)",
        deleted_by: "subscription purge",
    },
    ItemKind {
        name: "push run lease (the dispatcher run driving a push subscription; expiring)",
        pk: "push-run#<sub>",
        sk: "-",
        value: "RunLeaseRecord",
        written_by: "dispatcher (claim, renew, a drain asked for)",
        deleted_by: "dispatcher (release), expiry",
    },
    ItemKind {
        name: "dead letter",
        pk: "dlq#<sub>#<p>",
        sk: "<offset>",
        value: "DeadRecord",
        written_by: "receive (bury), dispatcher (bury on a 410)",
        deleted_by: "DLQ delete, redrive, purge; subscription purge",
    },
    ItemKind {
        name: "mark of a dead letter deleted or purged (expires after 7 days)",
        pk: "dlq#<sub>#<p>#gone",
        sk: "<offset>",
        value: "RemovedDeadRecord",
        written_by: "DLQ delete, purge",
        deleted_by: "expiry, subscription purge",
    },
    ItemKind {
        name: "purge order of a deleted subscription",
        pk: "purge-subs",
        sk: "<sub>",
        value: "SubPurgeRecord",
        written_by: "subscription delete, janitor (progress)",
        deleted_by: "janitor",
    },
    ItemKind {
        name: "receipt-signing key",
        pk: "queues",
        sk: "receipt-key",
        value: "64 hex digits",
        written_by: "the first receive",
        deleted_by: "never",
    },
];

/// The kind of item `key` is, if it is one the core writes.
pub fn kind_of(key: &Key) -> Option<&'static ItemKind> {
    ITEM_KINDS.iter().find(|kind| fits(kind.pk, &key.pk) && fits(kind.sk, &key.sk))
}

/// Whether `text` has the shape `shape`: literal parts as they are, placeholders as
/// their fields. `a, b` lists literal alternatives.
fn fits(shape: &str, text: &str) -> bool {
    if !shape.contains('<') {
        return shape.split(", ").any(|alternative| alternative == text);
    }
    let mut rest = text;
    let mut parts = shape.split('<').peekable();
    let lead = parts.next().unwrap_or_default();
    let Some(after) = rest.strip_prefix(lead) else { return false };
    rest = after;
    while let Some(part) = parts.next() {
        let Some((field, literal)) = part.split_once('>') else { return false };
        let last = parts.peek().is_none() && literal.is_empty();
        // A field ends at the next literal (the last one ends the text); free-form names
        // (`<name>`, `<group>`, `<key>`, `<object>`, `<member>`, `<topic name>`) may hold
        // the separator themselves, so they end at its last occurrence.
        let free = matches!(field, "name" | "group" | "key" | "object" | "member" | "topic name");
        let end = if last {
            rest.len()
        } else if free {
            match rest.rfind(literal) {
                Some(i) => i,
                None => return false,
            }
        } else {
            match rest.find(literal) {
                Some(i) => i,
                None => return false,
            }
        };
        if !field_fits(field, &rest[..end]) {
            return false;
        }
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
}

fn field_fits(field: &str, value: &str) -> bool {
    let digits = |n: usize| value.len() == n && value.bytes().all(|b| b.is_ascii_digit());
    match field {
        "topic" | "sub" | "nonce" => value.len() == 16 && value.bytes().all(|b| b.is_ascii_hexdigit()),
        "offset" | "time" => digits(20),
        "p10" => digits(10),
        "p" | "shard" => !value.is_empty() && value.len() <= 10 && value.bytes().all(|b| b.is_ascii_digit()),
        _ => !value.is_empty(),
    }
}

/// The registry as a Markdown table (what docs/DESIGN.md and docs/AWS.md carry).
pub fn table() -> String {
    let mut out = String::from("| item | `pk` | `sk` | value | written by | deleted by |\n|---|---|---|---|---|---|\n");
    for k in ITEM_KINDS {
        let code = |s: &str| s.split(", ").map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            k.name,
            code(k.pk),
            code(k.sk),
            k.value,
            k.written_by,
            k.deleted_by
        ));
    }
    out
}

// Every key is built by the constructors of these modules, one per shape listed above (a
// test pins each to its shape): key literals live nowhere else in the core or its adapters.
mod groups;
mod log;
mod queues;

pub use self::groups::*;
pub use self::log::*;
pub use self::queues::*;

/// Appends `n` in decimal, zero-padded to `width` digits: what `format!("{n:0width$}")`
/// writes, without the formatting machinery, as keys are made on every request.
fn push_padded(out: &mut String, n: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let (mut n, mut start) = (n, digits.len());
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(std::iter::repeat_n('0', width.saturating_sub(digits.len())));
    // The buffer is zeros up to the digits: its tail is the padded number (ASCII).
    let from = start.min(digits.len().saturating_sub(width));
    out.push_str(std::str::from_utf8(&digits[from..]).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::objects::StorageError;

    fn name(key: Key) -> &'static str {
        kind_of(&key).map_or("none", |k| k.name)
    }

    #[test]
    fn the_log_s_keys_parse_as_their_kinds() {
        assert_eq!(name(topic_key("orders")), ITEM_KINDS[0].name);
        assert_eq!(name(purge_key(7)), ITEM_KINDS[1].name);
        assert_eq!(name(head_key(7, 3)), ITEM_KINDS[2].name);
        assert_eq!(name(segment_key(7, 3, 42)), ITEM_KINDS[3].name);
        assert_eq!(name(idempotency_key(7, "a#b")), ITEM_KINDS[4].name);
        assert_eq!(name(object_key("segments/1-ab")), ITEM_KINDS[5].name);
        assert_eq!(name(free_key("segments/1-ab")), ITEM_KINDS[6].name);
        assert_eq!(name(collector_cursor_key()), ITEM_KINDS[7].name);
        assert_eq!(name(upkeep_record_key(7)), ITEM_KINDS[8].name);
    }

    /// Every constructor against the literal key it writes (stored data: these bytes must
    /// never change) and the kind it is listed as; every kind has one.
    #[test]
    fn every_constructor_writes_the_shape_listed() {
        let cases: Vec<(Key, (&str, &str), usize)> = vec![
            (topic_key("orders"), ("topics", "orders"), 0),
            (purge_key(0x7a), ("purge", "000000000000007a"), 1),
            (head_key(0x7a, 3), ("head#000000000000007a", "0000000003"), 2),
            (segment_key(0x7a, 3, 42), ("seg#000000000000007a#3", "00000000000000000042"), 3),
            (idempotency_key(0x7a, "k"), ("idem#000000000000007a#10", "k"), 4),
            (object_key("segments/1-ab"), ("obj#segments/1-ab", "-"), 5),
            (free_key("segments/1-ab"), ("free#1", "segments/1-ab"), 6),
            (collector_cursor_key(), ("upkeep", "gc"), 7),
            (pass_cursor_key(), ("upkeep", "pass"), 7),
            (upkeep_record_key(0x7a), ("upkeep#000000000000007a", "-"), 8),
            (
                time_entry_key(0x7a, 3, 5, 42),
                ("time#000000000000007a#3", "09223372036854775813#00000000000000000042"),
                9,
            ),
            (time_cursor_key(0x7a, 3), ("tcur#000000000000007a", "0000000003"), 10),
            (group_meta_key("g#1"), ("group#g#1", "meta"), 11),
            (member_key("g#1", "m-1"), ("group#g#1", "member#m-1"), 12),
            (activity_key("g#1"), ("group#g#1", "active"), 13),
            (registry_key("g#1"), ("groups", "g#1"), 14),
            (offset_key("g#1", "orders", 3), ("goff#g#1", "orders#0000000003"), 15),
            (expiry_key(5, "g#1"), ("goff-expiry", "00000000000000000005#g#1"), 16),
            (expiry_key(-5, "g"), ("goff-expiry", "00000000000000000000#g"), 16),
            (subscription_key(0x7a, "s"), ("subs#000000000000007a", "s"), 17),
            (cursor_key(0x7b, 3), ("q#000000000000007b#3", "c"), 18),
            (lease_key(0x7b, 3, 5, 0x1f), ("q#000000000000007b#3", "l#00000000000000000005#000000000000001f"), 19),
            (push_stats_key(0x7b), ("q#000000000000007b#0", "s"), 20),
            (rate_key(0x7b), ("q#000000000000007b#0", "r"), 21),
            (push_run_key(0x7b), ("push-run#000000000000007b", "-"), 22),
            (dead_key(0x7b, 3, 42), ("dlq#000000000000007b#3", "00000000000000000042"), 23),
            (removed_dead_key(0x7b, 3, 42), ("dlq#000000000000007b#3#gone", "00000000000000000042"), 24),
            (sub_purge_key(0x7b), ("purge-subs", "000000000000007b"), 25),
            (receipt_signing_key(), ("queues", "receipt-key"), 26),
        ];
        for (key, (pk, sk), kind) in &cases {
            assert_eq!(key, &Key::new(*pk, *sk));
            assert_eq!(kind_of(key).map(|k| k.name), Some(ITEM_KINDS[*kind].name), "{key:?}");
        }
        let covered: std::collections::BTreeSet<usize> = cases.iter().map(|(_, _, kind)| *kind).collect();
        assert_eq!(covered.len(), ITEM_KINDS.len(), "every kind has a constructor");
    }

    /// The collections and sort keys the core queries by, against their literal shapes.
    #[test]
    fn collections_and_sort_keys_are_their_literal_shapes() {
        assert_eq!((topics_pk(), purge_pk(), groups_pk(), expiry_pk()), ("topics", "purge", "groups", "goff-expiry"));
        assert_eq!(sub_purge_pk(), "purge-subs");
        assert_eq!(heads_pk(0x7a), "head#000000000000007a");
        assert_eq!(segments_pk(0x7a, 3), "seg#000000000000007a#3");
        assert_eq!(idempotency_pk_shard(0x7a, 3), "idem#000000000000007a#03");
        assert_eq!(free_pk(5), "free#5");
        assert_eq!(time_entries_pk(0x7a, 3), "time#000000000000007a#3");
        assert_eq!(time_cursors_pk(0x7a), "tcur#000000000000007a");
        assert_eq!(time_sk(-1), "09223372036854775807");
        assert_eq!((group_pk("g"), offsets_pk("g")), ("group#g".to_owned(), "goff#g".to_owned()));
        assert_eq!(expiry_sk_upto(5), "00000000000000000005$");
        assert_eq!(subs_pk(0x7a), "subs#000000000000007a");
        assert_eq!(
            queue_collections(0x7b, 3),
            [
                "q#000000000000007b#3".to_owned(),
                "dlq#000000000000007b#3".to_owned(),
                "dlq#000000000000007b#3#gone".to_owned()
            ]
        );
        assert_eq!(lease_sk(-5, 0x1f), "l#00000000000000000000#000000000000001f");
        assert_eq!(tp_key("my#topic", 12), "my#topic#0000000012");
        assert_eq!((CURSOR_SK, PUSH_STATS_SK, RATE_SK, LEASE_PREFIX), ("c", "s", "r", "l#"));
        assert_eq!((GROUP_META_SK, ACTIVITY_SK), ("meta", "active"));
    }

    #[test]
    fn parsers_read_back_what_the_constructors_write() {
        assert_eq!(topic_of_heads_pk(&heads_pk(0x7a)), Some(0x7a));
        assert_eq!(topic_of_heads_pk("head#7"), None);
        assert_eq!(partition_of(&head_key(1, 7).sk).unwrap(), 7);
        assert_eq!(member_of(&member_key("g", "m#1").sk), Some("m#1"));
        assert_eq!(member_of(GROUP_META_SK), None);
        assert_eq!(split_tp_key(&tp_key("my#topic", 12)), Some(("my#topic", 12)));
        assert_eq!(parse_lease_sk(&lease_sk(5, 9)).unwrap(), 5);
        assert!(matches!(parse_lease_sk("c"), Err(StorageError::Corrupt(_))));
        assert_eq!(expiry_entry_of(&expiry_key(42, "g#x")).unwrap(), (42, "g#x".to_owned()));
    }

    #[test]
    fn padded_numbers_are_what_format_writes() {
        for n in [0, 1, 9, 10, 4_294_967_295, 99_999_999_999, u64::MAX] {
            for width in [0, 1, 10, 20] {
                let mut out = String::from("k#");
                push_padded(&mut out, n, width);
                assert_eq!(out, format!("k#{n:0width$}"), "{n} in {width}");
            }
        }
        assert_eq!(offset_sk(42), format!("{:020}", 42));
        assert_eq!(head_key(1, 7).sk, "0000000007");
    }

    #[test]
    fn offset_keys_sort_as_offsets() {
        let mut offsets = [0u64, 9, 10, 99, 100, 12_345, u64::MAX];
        let mut keys: Vec<String> = offsets.iter().map(|&o| offset_sk(o)).collect();
        keys.sort();
        offsets.sort_unstable();
        assert_eq!(keys, offsets.iter().map(|&o| offset_sk(o)).collect::<Vec<_>>());
        assert_eq!(offset_of(&offset_sk(12_345)).unwrap(), 12_345);
    }

    #[test]
    fn idempotency_shards_are_stable_and_spread() {
        assert_eq!(idempotency_key(7, "abc"), idempotency_key(7, "abc"));
        let shards: std::collections::HashSet<String> =
            (0..200).map(|i| idempotency_key(7, &format!("key-{i}")).pk).collect();
        assert_eq!(shards.len(), IDEMPOTENCY_SHARDS as usize);
    }

    #[test]
    fn keys_of_no_kind_do_not_parse() {
        for (pk, sk) in [
            ("head#7", "0000000003"),
            ("seg#0000000000000007#3", "42"),
            ("upkeep", "other"),
            ("q#0000000000000007#0", "x"),
            ("nothing", "-"),
            ("group#g", "meta#x"),
        ] {
            assert!(kind_of(&Key::new(pk, sk)).is_none(), "{pk} {sk}");
        }
    }

    #[test]
    fn free_form_names_may_hold_separators() {
        assert_eq!(name(Key::new("goff#a#b", "my#topic#12")), "committed offset");
        assert_eq!(name(Key::new("goff-expiry", format!("{:020}#g#1", 5))), "offsets expiry index entry");
        assert_eq!(name(Key::new("group#a#b", "member#m#1")), "group member (expires with its session)");
    }

    /// The docs carry the registry's table between markers. `SLUICE_WRITE_DOCS=1 cargo test
    /// -p sluice-core keys` writes it there.
    #[test]
    fn the_docs_list_exactly_the_registry() {
        let table = table();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for doc in ["docs/DESIGN.md", "docs/AWS.md"] {
            let path = root.join(doc);
            let text = std::fs::read_to_string(&path).unwrap();
            let (before, rest) = text.split_once(BEGIN).unwrap_or_else(|| panic!("{doc}: no {BEGIN}"));
            let (inside, after) = rest.split_once(END).unwrap_or_else(|| panic!("{doc}: no {END}"));
            if std::env::var_os("SLUICE_WRITE_DOCS").is_some() && inside != table {
                std::fs::write(&path, format!("{before}{BEGIN}{table}{END}{after}")).unwrap();
                continue;
            }
            assert_eq!(inside, table, "{doc} must carry the registry's table (SLUICE_WRITE_DOCS=1 writes it)");
        }
    }

    const BEGIN: &str = "<!-- stored-items:begin (crates/core/src/keys/mod.rs) -->\n";
    const END: &str = "<!-- stored-items:end -->";
}
