//! Compact encodings of the per-partition maps in group records, so a group reading
//! thousands of partitions stays far inside DynamoDB's 400 KB item: a topic's name is
//! written once, not once per partition. Each decoder also reads the older, one entry
//! per partition form, so records written before still load.
//!
//! - an assignment `{member: [{"topic", "partition"}…]}` is stored as `{member: {topic: [partition…]}}`;
//! - a map keyed `topic#partition` (zero-padded) is stored as `{topic: [[partition, value]…]}`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::groups::TopicPartition;

use crate::keys::{split_tp_key, tp_key};

pub(crate) mod assignment {
    use super::*;

    pub fn serialize<S: Serializer>(members: &BTreeMap<String, Vec<TopicPartition>>, s: S) -> Result<S::Ok, S::Error> {
        let mut out: BTreeMap<&str, BTreeMap<&str, Vec<u32>>> = BTreeMap::new();
        for (member, parts) in members {
            let topics = out.entry(member).or_default();
            for tp in parts {
                topics.entry(&tp.topic).or_default().push(tp.partition);
            }
        }
        out.serialize(s)
    }

    /// A member's entry: `{topic: [partition…]}` (compact) or `[{"topic", "partition"}…]`.
    enum Stored {
        Compact(BTreeMap<String, Vec<u32>>),
        PerPartition(Vec<TopicPartition>),
    }

    impl<'de> Deserialize<'de> for Stored {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Either;
            impl<'de> Visitor<'de> for Either {
                type Value = Stored;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a map of topics to partitions, or a list of topic partitions")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Stored, A::Error> {
                    Deserialize::deserialize(MapAccessDeserializer::new(map)).map(Stored::Compact)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Stored, A::Error> {
                    Deserialize::deserialize(SeqAccessDeserializer::new(seq)).map(Stored::PerPartition)
                }
            }
            d.deserialize_any(Either)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Vec<TopicPartition>>, D::Error> {
        let members: BTreeMap<String, Stored> = Deserialize::deserialize(d)?;
        Ok(members
            .into_iter()
            .map(|(member, stored)| {
                let parts = match stored {
                    Stored::PerPartition(parts) => parts,
                    Stored::Compact(topics) => {
                        let mut parts: Vec<TopicPartition> = topics
                            .into_iter()
                            .flat_map(|(topic, ps)| ps.into_iter().map(move |partition| (topic.clone(), partition)))
                            .map(|(topic, partition)| TopicPartition { topic, partition })
                            .collect();
                        parts.sort();
                        parts
                    }
                };
                (member, parts)
            })
            .collect())
    }
}

pub(crate) mod by_partition {
    use super::*;

    pub fn serialize<S: Serializer>(map: &BTreeMap<String, u64>, s: S) -> Result<S::Ok, S::Error> {
        let mut out: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
        for (key, value) in map {
            // Keys are always written by `tp_key`. One that is not (never the case in practice)
            // is stored as partition 0 of a topic named by the whole key, and reads back as
            // `<key>#0000000000`: it is not kept exactly.
            let (topic, partition) = split_tp_key(key).unwrap_or((key.as_str(), 0));
            out.entry(topic).or_default().push((partition, *value));
        }
        out.serialize(s)
    }

    /// Reads either form as it goes, without buffering the record (as serde's untagged
    /// enums do): a topic's entries `[[partition, value]…]`, or one `topic#partition`'s value.
    struct Either;

    impl<'de> Visitor<'de> for Either {
        type Value = BTreeMap<String, u64>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of topics to [partition, value] pairs, or of topic#partition keys to values")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                match map.next_value::<Entry>()? {
                    Entry::One(value) => {
                        out.insert(key, value);
                    }
                    Entry::Many(entries) => {
                        out.extend(entries.into_iter().map(|(p, value)| (tp_key(&key, p), value)));
                    }
                }
            }
            Ok(out)
        }
    }

    enum Entry {
        One(u64),
        Many(Vec<(u32, u64)>),
    }

    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Value;
            impl<'de> Visitor<'de> for Value {
                type Value = Entry;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a value, or a list of [partition, value] pairs")
                }
                fn visit_u64<E: de::Error>(self, value: u64) -> Result<Entry, E> {
                    Ok(Entry::One(value))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Entry, A::Error> {
                    Deserialize::deserialize(SeqAccessDeserializer::new(seq)).map(Entry::Many)
                }
            }
            d.deserialize_any(Value)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u64>, D::Error> {
        d.deserialize_map(Either)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::{GroupRecord, MemberRecord};

    fn group() -> GroupRecord {
        let parts = |t: &str, ps: &[u32]| -> Vec<TopicPartition> {
            ps.iter().map(|&partition| TopicPartition { topic: t.to_owned(), partition }).collect()
        };
        let mut a = parts("orders", &[0, 2, 11]);
        a.extend(parts("refunds#eu", &[1]));
        GroupRecord {
            generation: 7,
            members: BTreeMap::from([("m1".to_owned(), a), ("m2".to_owned(), parts("orders", &[1, 3]))]),
            topics: BTreeMap::from([("orders".to_owned(), 4), ("refunds#eu".to_owned(), 9)]),
            since: BTreeMap::from([(tp_key("orders", 11), 5), (tp_key("refunds#eu", 1), 6)]),
            offsets_from: 0,
            left_topics: Default::default(),
        }
    }

    #[test]
    fn group_and_member_records_round_trip_and_read_the_per_partition_form() {
        let record = group();
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains(r#""m1":{"orders":[0,2,11],"refunds#eu":[1]}"#), "{json}");
        assert_eq!(serde_json::from_str::<GroupRecord>(&json).unwrap(), record);
        let old = r#"{"generation":7,"members":{"m1":[{"topic":"orders","partition":0},{"topic":"orders","partition":2},
            {"topic":"orders","partition":11},{"topic":"refunds#eu","partition":1}],
            "m2":[{"topic":"orders","partition":1},{"topic":"orders","partition":3}]},
            "topics":{"orders":4,"refunds#eu":9},"since":{"orders#0000000011":5,"refunds#eu#0000000001":6}}"#;
        assert_eq!(serde_json::from_str::<GroupRecord>(old).unwrap(), record);
        let member = MemberRecord {
            topics: vec!["orders".into()],
            session_timeout_ms: 45_000,
            positions: BTreeMap::from([(tp_key("orders", 3), u64::MAX), (tp_key("orders", 1), 0)]),
            positions_version: 3,
        };
        let json = serde_json::to_string(&member).unwrap();
        assert!(json.contains(r#""positions":{"orders":[[1,0],[3,18446744073709551615]]}"#), "{json}");
        assert_eq!(serde_json::from_str::<MemberRecord>(&json).unwrap(), member);
    }

    #[test]
    fn keys_are_zero_padded_and_bad_records_are_errors_not_panics() {
        for p in [0, 7, 1_000, u32::MAX] {
            assert_eq!(tp_key("t#1", p), format!("t#1#{p:010}"));
        }
        for bad in [
            r#"{"generation":1,"members":{},"topics":{},"since":{"orders":"x"}}"#,
            r#"{"generation":1,"members":{},"topics":{},"since":{"orders":[[1]]}}"#,
            r#"{"generation":1,"members":{},"topics":{},"since":[]}"#,
            r#"{"generation":1,"members":{"m1":7},"topics":{},"since":{}}"#,
            r#"{"generation":1,"members":{"m1":{"orders":[-1]}},"topics":{},"since":{}}"#,
        ] {
            assert!(serde_json::from_str::<GroupRecord>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_group_over_ten_thousand_partitions_stays_far_below_dynamodbs_item_limit() {
        let topics: Vec<String> = (0..10).map(|i| format!("{}-{i}", "t".repeat(200))).collect();
        let mut members: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
        let mut since = BTreeMap::new();
        for (i, topic) in topics.iter().enumerate() {
            for p in 0..1000u32 {
                let member = format!("{:016x}", (p as usize + i) % 7);
                members.entry(member).or_default().push(TopicPartition { topic: topic.clone(), partition: p });
                since.insert(tp_key(topic, p), 1_000_000 + u64::from(p));
            }
        }
        let record = GroupRecord {
            generation: 1,
            members,
            topics: topics.iter().map(|t| (t.clone(), u64::MAX)).collect(),
            since,
            offsets_from: u64::MAX,
            left_topics: Default::default(),
        };
        let size = serde_json::to_vec(&record).unwrap().len();
        // A quarter below DynamoDB's 400 KB, with 200-character topic names.
        assert!(size < 300_000, "a group record of {size} bytes");
        let positions = record.since.keys().map(|k| (k.clone(), u64::MAX)).collect();
        let member = MemberRecord { topics, session_timeout_ms: 45_000, positions, positions_version: 1 };
        let size = serde_json::to_vec(&member).unwrap().len();
        assert!(size < 300_000, "a member record of {size} bytes (one member holding all 10,000)");
    }
}
