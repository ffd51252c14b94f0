//! The registry of stored items: every kind of item the core keeps in the state store,
//! with the shape of its keys, the record it holds, who writes it and who deletes it.
//! One list, so a reader (and DynamoDB's operator) sees the whole layout in one place;
//! [`kind_of`] parses a key back to its kind, and the simulation checks that every key the
//! core writes is one of these. docs/DESIGN.md and docs/AWS.md carry [`table`]'s output
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
        written_by: "committer, retention",
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
        written_by: "create, delete",
        deleted_by: "topic purge",
    },
    ItemKind {
        name: "queue cursor (next offset, dead and expired counts, small held leases)",
        pk: "q#<sub>#<p>",
        sk: "c",
        value: "CursorItem",
        written_by: "receive, ack, nack, visibility, bury, redrive",
        deleted_by: "subscription purge",
    },
    ItemKind {
        name: "lease (messages delivered or parked, by due time)",
        pk: "q#<sub>#<p>",
        sk: "l#<time>#<nonce>",
        value: "LeaseRecord",
        written_by: "receive, ack, nack, visibility, redrive",
        deleted_by: "receive, ack, bury, subscription purge",
    },
    ItemKind {
        name: "push delivery counts and last error (partition 0 only)",
        pk: "q#<sub>#<p>",
        sk: "s",
        value: "PushStatsRecord",
        written_by: "dispatcher",
        deleted_by: "subscription purge",
    },
    ItemKind {
        name: "dead letter",
        pk: "dlq#<sub>#<p>",
        sk: "<offset>",
        value: "DeadRecord",
        written_by: "receive (bury)",
        deleted_by: "DLQ delete, redrive, purge; subscription purge",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout;

    fn name(key: Key) -> &'static str {
        kind_of(&key).map_or("none", |k| k.name)
    }

    #[test]
    fn the_log_s_keys_parse_as_their_kinds() {
        assert_eq!(name(layout::topic_key("orders")), ITEM_KINDS[0].name);
        assert_eq!(name(layout::purge_key(7)), ITEM_KINDS[1].name);
        assert_eq!(name(layout::head_key(7, 3)), ITEM_KINDS[2].name);
        assert_eq!(name(layout::segment_key(7, 3, 42)), ITEM_KINDS[3].name);
        assert_eq!(name(layout::idempotency_key(7, "a#b")), ITEM_KINDS[4].name);
        assert_eq!(name(layout::object_key("segments/1-ab")), ITEM_KINDS[5].name);
        assert_eq!(name(layout::free_key("segments/1-ab")), ITEM_KINDS[6].name);
        assert_eq!(name(layout::upkeep_key("gc")), ITEM_KINDS[7].name);
        assert_eq!(name(layout::upkeep_record_key(7)), ITEM_KINDS[8].name);
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

    const BEGIN: &str = "<!-- stored-items:begin (crates/core/src/keys.rs) -->\n";
    const END: &str = "<!-- stored-items:end -->";
}
