//! [`MetaStore`] on one DynamoDB table (`pk` string hash key, `sk` string range
//! key, TTL on `expires_at`), read with strongly consistent reads only.
//!
//! # Item layout
//!
//! | item | `pk` | `sk` | other attributes |
//! |---|---|---|---|
//! | topic | `topics` | topic name | `id`, `partitions`, `retention_ms`?, `retention_bytes`?, `created_ms` |
//! | segment | `log#<topic>#<partition>` | base offset, 20 digits, zero-padded | `topic_id`, `next`, `object`, `pos`, `len`, `max_ts`, `bytes` (partition bytes up to and including this segment) |
//! | idempotency record | `idem#<topic>#<shard 00..15>` | the key | `fp` (fingerprint), `results` (JSON), `created_ms`, `expires_at` |
//!
//! Every partition's index is an item collection of its own (one partition key),
//! so partitions never share a hot key; a topic's idempotency records are spread
//! over [`IDEMPOTENCY_SHARDS`] keys by a hash of the key, and still found
//! without a scan when the topic is deleted. The topic list is one small
//! collection: topics are created rarely.
//!
//! # Why offsets stay dense under concurrent publishers
//!
//! There is no separate "head" item: a partition's high watermark is the `next`
//! of its last segment item (one `Query`, descending, `Limit 1`). A commit puts
//! the segment item at `sk = base offset` with `attribute_not_exists(pk)`.
//! Two publishers that read the same head race for the same key; DynamoDB
//! accepts exactly one, the other gets `ConditionalCheckFailed`
//! ([`StorageError::Precondition`]), re-reads the head and retries after the
//! winner. A base is never beyond the head: the commit checks it against the
//! head it last saw for this partition (from [`MetaStore::partition`] or its own
//! previous commit) and otherwise reads the head first, so no item can land past
//! a hole. Items are only ever added at the end, so a head once seen stays a
//! segment boundary. The per-partition byte count travels in each item for the
//! same reason: computed from the predecessor the conditional put proves is last.
//!
//! Cost: a single-partition commit without an idempotency key is one
//! `PutItem` (1 WCU). A commit touching several partitions, or carrying an
//! idempotency record, is one `TransactWriteItems` of conditional puts (2 WCU
//! per item), because only a transaction makes several items all-or-nothing;
//! DynamoDB caps that at 100 items per commit.
//!
//! Alternatives considered: a per-partition head item updated with
//! `next = :base` beside a segment put needs a transaction on every publish
//! (double the write units, and two items); one growing item per partition runs
//! into the 400 KB item limit.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, Put, ReturnValue, TransactWriteItem, WriteRequest};
use sluice_core::storage::{CommitBatch, IdempotencyRecord, SegmentEntry};
use sluice_core::{MetaStore, PartitionState, Position, StorageError, TopicConfig, TopicSpec};

use crate::{send_counted, unexpected, RequestCounts};

/// Keys a topic's idempotency records are spread over.
pub const IDEMPOTENCY_SHARDS: u32 = 16;
/// How long an idempotency record is kept (DynamoDB's TTL deletes it some time after).
pub const IDEMPOTENCY_TTL_SECS: i64 = 48 * 3600;
/// DynamoDB's limit on the items of one `TransactWriteItems`.
const MAX_TRANSACTION_ITEMS: usize = 100;
/// Items per `BatchWriteItem`.
const BATCH_WRITE_ITEMS: usize = 25;
const TOPICS_PK: &str = "topics";
const ABSENT: &str = "attribute_not_exists(pk)";

type Item = HashMap<String, AttributeValue>;

/// The end of a partition's log as this process last saw it: a hint the
/// conditional put verifies, never trusted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    topic_id: u64,
    next: u64,
    bytes: u64,
}

/// Topics, the segment index and idempotency records in one DynamoDB table.
pub struct DynamoMetaStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
    requests: RequestCounts,
    heads: Mutex<HashMap<(String, u32), Head>>,
}

/// Where a page of a partition's index starts.
enum Seek {
    /// Segments whose base offset is at least this one, ascending.
    From(u64),
    /// Segments whose base offset is below this one, descending.
    Before(u64),
    /// The partition's segments from the last one, descending.
    Last,
}

impl DynamoMetaStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: String) -> Self {
        Self { client, table, requests: RequestCounts::default(), heads: Mutex::default() }
    }

    /// The DynamoDB requests this store has sent.
    pub fn requests(&self) -> &RequestCounts {
        &self.requests
    }

    fn head_hint(&self, topic: &str, partition: u32) -> Option<Head> {
        self.heads.lock().unwrap_or_else(|p| p.into_inner()).get(&(topic.to_owned(), partition)).copied()
    }

    fn remember(&self, topic: &str, partition: u32, head: Option<Head>) {
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        match head {
            Some(h) => heads.insert((topic.to_owned(), partition), h),
            None => heads.remove(&(topic.to_owned(), partition)),
        };
    }

    async fn get_topic(&self, name: &str) -> Result<Option<TopicConfig>, StorageError> {
        let out = send_counted(&self.requests, "dynamodb:GetItem", || {
            self.client
                .get_item()
                .table_name(&self.table)
                .key("pk", s(TOPICS_PK))
                .key("sk", s(name))
                .consistent_read(true)
                .send()
        })
        .await
        .map_err(|e| unexpected("dynamodb:GetItem", e))?;
        out.item().map(topic_from_item).transpose()
    }

    /// The last segment item of a partition, if it has any.
    async fn last_segment(&self, topic: &str, partition: u32) -> Result<Option<Item>, StorageError> {
        Ok(self.log_items(topic, partition, Seek::Last, 1).await?.pop())
    }

    /// One consistent page of a partition's segments, in the direction `seek` gives.
    async fn index_page(
        &self,
        topic: &str,
        partition: u32,
        seek: Seek,
        limit: i32,
    ) -> Result<Vec<SegmentEntry>, StorageError> {
        let items = self.log_items(topic, partition, seek, limit).await?;
        items.iter().map(|i| segment_from_item(topic, partition, i)).collect()
    }

    /// One consistent page of a partition's segment items, in the direction `seek` gives.
    async fn log_items(&self, topic: &str, partition: u32, seek: Seek, limit: i32) -> Result<Vec<Item>, StorageError> {
        let (condition, from, forward) = match seek {
            Seek::From(offset) => ("pk = :pk AND sk >= :sk", Some(offset), true),
            Seek::Before(offset) => ("pk = :pk AND sk < :sk", Some(offset), false),
            Seek::Last => ("pk = :pk", None, false),
        };
        let mut values = Item::from([(":pk".to_owned(), s(&log_pk(topic, partition)))]);
        if let Some(offset) = from {
            values.insert(":sk".to_owned(), s(&offset_key(offset)));
        }
        let out = send_counted(&self.requests, "dynamodb:Query", || {
            self.client
                .query()
                .table_name(&self.table)
                .key_condition_expression(condition)
                .set_expression_attribute_values(Some(values.clone()))
                .scan_index_forward(forward)
                .limit(limit)
                .consistent_read(true)
                .send()
        })
        .await
        .map_err(|e| unexpected("dynamodb:Query", e))?;
        Ok(out.items.unwrap_or_default())
    }

    /// The head of a partition read from the table; `NotFound` if the topic or partition is absent.
    async fn read_head(&self, topic: &str, partition: u32) -> Result<Head, StorageError> {
        let head = match self.last_segment(topic, partition).await? {
            Some(item) => {
                Head { topic_id: num(&item, "topic_id")?, next: num(&item, "next")?, bytes: num(&item, "bytes")? }
            }
            None => match self.get_topic(topic).await? {
                Some(t) if partition < t.spec.partitions => Head { topic_id: t.id, next: 0, bytes: 0 },
                _ => return Err(StorageError::NotFound(format!("partition {topic}/{partition}"))),
            },
        };
        self.remember(topic, partition, Some(head));
        Ok(head)
    }

    /// The head an entry commits onto, or why it cannot.
    async fn head_for(&self, e: &SegmentEntry) -> Result<Head, StorageError> {
        let head = match self.head_hint(&e.topic, e.partition) {
            Some(h) if h.topic_id == e.topic_id && h.next == e.base_offset => h,
            _ => self.read_head(&e.topic, e.partition).await?,
        };
        if head.topic_id != e.topic_id {
            return Err(StorageError::NotFound(format!("partition {}/{}", e.topic, e.partition)));
        }
        if head.next != e.base_offset {
            return Err(StorageError::Precondition(format!(
                "{}/{} is at offset {}, not {}",
                e.topic, e.partition, head.next, e.base_offset
            )));
        }
        Ok(head)
    }

    /// Every item of a collection, in `sk` order; only `projection`'s attributes if given.
    async fn collection(&self, pk: &str, projection: Option<&str>) -> Result<Vec<Item>, StorageError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = send_counted(&self.requests, "dynamodb:Query", || {
                self.client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("pk = :pk")
                    .expression_attribute_values(":pk", s(pk))
                    .set_projection_expression(projection.map(str::to_owned))
                    .set_exclusive_start_key(start.clone())
                    .consistent_read(true)
                    .send()
            })
            .await
            .map_err(|e| unexpected("dynamodb:Query", e))?;
            items.extend(out.items().iter().cloned());
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => return Ok(items),
            }
        }
    }

    async fn delete_all(&self, keys: Vec<Item>) -> Result<(), StorageError> {
        for chunk in keys.chunks(BATCH_WRITE_ITEMS) {
            let mut pending: Vec<WriteRequest> = chunk
                .iter()
                .map(|key| {
                    let delete = DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map_err(|e| StorageError::unavailable("dynamodb:BatchWriteItem request", e))?;
                    Ok(WriteRequest::builder().delete_request(delete).build())
                })
                .collect::<Result<_, StorageError>>()?;
            let mut rounds = 0;
            while !pending.is_empty() {
                let out = send_counted(&self.requests, "dynamodb:BatchWriteItem", || {
                    self.client.batch_write_item().request_items(&self.table, pending.clone()).send()
                })
                .await
                .map_err(|e| unexpected("dynamodb:BatchWriteItem", e))?;
                pending = out.unprocessed_items().and_then(|u| u.get(&self.table)).cloned().unwrap_or_default();
                rounds += 1;
                if !pending.is_empty() {
                    if rounds >= 8 {
                        return Err(StorageError::Throttled {
                            message: "dynamodb:BatchWriteItem kept leaving items unprocessed".into(),
                            source: None,
                        });
                    }
                    tokio::time::sleep(crate::backoff(rounds)).await;
                }
            }
        }
        Ok(())
    }

    async fn put_one(&self, item: Item, entry: &SegmentEntry) -> Result<(), StorageError> {
        self.put_if_absent(item, || {
            StorageError::Precondition(format!(
                "{}/{} moved past offset {}",
                entry.topic, entry.partition, entry.base_offset
            ))
        })
        .await
    }

    /// One conditional `PutItem` that creates `item` only if its key is absent; `taken` says what it means if not.
    async fn put_if_absent(&self, item: Item, taken: impl FnOnce() -> StorageError) -> Result<(), StorageError> {
        let sent = send_counted(&self.requests, "dynamodb:PutItem", || {
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .condition_expression(ABSENT)
                .send()
        })
        .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Err(taken()),
            Err(e) => Err(unexpected("dynamodb:PutItem", e)),
        }
    }

    async fn put_all(&self, items: Vec<Item>, batch: &CommitBatch) -> Result<(), StorageError> {
        let puts = items
            .into_iter()
            .map(|item| {
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .condition_expression(ABSENT)
                    .build()
                    .map_err(|e| StorageError::unavailable("dynamodb:TransactWriteItems request", e))?;
                Ok(TransactWriteItem::builder().put(put).build())
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        let sent = send_counted(&self.requests, "dynamodb:TransactWriteItems", || {
            self.client.transact_write_items().set_transact_items(Some(puts.clone())).send()
        })
        .await;
        let e = match sent {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let Some(canceled) = e.as_service_error().and_then(|s| {
            match s {
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
                c,
            ) => Some(c),
            _ => None,
        }
        }) else {
            return Err(unexpected("dynamodb:TransactWriteItems", e));
        };
        let failed: Vec<usize> = canceled
            .cancellation_reasons()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.code() == Some("ConditionalCheckFailed"))
            .map(|(i, _)| i)
            .collect();
        let entries = batch.entries.len();
        if let Some(&i) = failed.iter().find(|&&i| i >= entries) {
            return Err(StorageError::AlreadyExists(format!("idempotency key {}", batch.idempotency[i - entries].key)));
        }
        if let Some(&i) = failed.first() {
            let entry = &batch.entries[i];
            return Err(StorageError::Precondition(format!(
                "{}/{} moved past offset {}",
                entry.topic, entry.partition, entry.base_offset
            )));
        }
        // Cancelled for another reason (a conflicting transaction in flight): nothing was written.
        let conflict = canceled.cancellation_reasons().iter().any(|r| r.code() == Some("TransactionConflict"));
        if conflict {
            return Err(StorageError::Throttled {
                message: "dynamodb:TransactWriteItems: TransactionConflict".into(),
                source: Some(Box::new(e)),
            });
        }
        Err(unexpected("dynamodb:TransactWriteItems", e))
    }
}

#[async_trait]
impl MetaStore for DynamoMetaStore {
    #[tracing::instrument(skip_all, fields(topic = %topic.name))]
    async fn create_topic(&self, topic: &TopicConfig) -> Result<(), StorageError> {
        let mut item = Item::new();
        item.insert("pk".into(), s(TOPICS_PK));
        item.insert("sk".into(), s(&topic.name));
        item.insert("id".into(), n(topic.id));
        item.insert("partitions".into(), n(topic.spec.partitions));
        item.insert("created_ms".into(), n(topic.created_ms));
        if let Some(v) = topic.spec.retention_ms {
            item.insert("retention_ms".into(), n(v));
        }
        if let Some(v) = topic.spec.retention_bytes {
            item.insert("retention_bytes".into(), n(v));
        }
        self.put_if_absent(item, || StorageError::AlreadyExists(format!("topic {}", topic.name))).await
    }

    #[tracing::instrument(skip(self))]
    async fn topic(&self, name: &str) -> Result<Option<TopicConfig>, StorageError> {
        self.get_topic(name).await
    }

    #[tracing::instrument(skip(self))]
    async fn list_topics(&self) -> Result<Vec<TopicConfig>, StorageError> {
        self.collection(TOPICS_PK, None).await?.iter().map(topic_from_item).collect()
    }

    /// Deletes the topic item first, so readers stop finding the topic at once,
    /// then its index and idempotency records (not atomic: a crash part-way
    /// leaves items of a topic nobody can name; a later delete of a topic of that name removes them).
    #[tracing::instrument(skip(self))]
    async fn delete_topic(&self, name: &str) -> Result<(), StorageError> {
        let sent = send_counted(&self.requests, "dynamodb:DeleteItem", || {
            self.client
                .delete_item()
                .table_name(&self.table)
                .key("pk", s(TOPICS_PK))
                .key("sk", s(name))
                .condition_expression("attribute_exists(pk)")
                .return_values(ReturnValue::AllOld)
                .send()
        })
        .await;
        let old = match sent {
            Ok(out) => out.attributes().map(topic_from_item).transpose()?,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                return Err(StorageError::NotFound(format!("topic {name}")));
            }
            Err(e) => return Err(unexpected("dynamodb:DeleteItem", e)),
        };
        let partitions = old.map_or(0, |t| t.spec.partitions);
        for p in 0..partitions {
            self.remember(name, p, None);
            let keys = self.collection(&log_pk(name, p), Some("pk, sk")).await?;
            self.delete_all(keys).await?;
        }
        for shard in 0..IDEMPOTENCY_SHARDS {
            let keys = self.collection(&idem_pk_shard(name, shard), Some("pk, sk")).await?;
            self.delete_all(keys).await?;
        }
        Ok(())
    }

    #[tracing::instrument(skip(self))]
    async fn partitions(&self, topic: &str) -> Result<Vec<PartitionState>, StorageError> {
        let t = self.get_topic(topic).await?.ok_or_else(|| StorageError::NotFound(format!("topic {topic}")))?;
        let mut states = Vec::with_capacity(t.spec.partitions as usize);
        for p in 0..t.spec.partitions {
            states.push(self.partition(topic, p).await?);
        }
        Ok(states)
    }

    #[tracing::instrument(skip(self))]
    async fn partition(&self, topic: &str, partition: u32) -> Result<PartitionState, StorageError> {
        let head = self.read_head(topic, partition).await?;
        Ok(PartitionState { partition, log_start_offset: 0, high_watermark: head.next, bytes: head.bytes })
    }

    #[tracing::instrument(skip_all, fields(entries = batch.entries.len(), idempotency = batch.idempotency.len()))]
    async fn commit(&self, batch: &CommitBatch) -> Result<(), StorageError> {
        let items_count = batch.entries.len() + batch.idempotency.len();
        if items_count > MAX_TRANSACTION_ITEMS {
            return Err(StorageError::Unavailable {
                message: format!(
                    "a commit of {items_count} items (partitions plus idempotency keys) exceeds DynamoDB's \
                     {MAX_TRANSACTION_ITEMS}-item transactions"
                ),
                source: None,
            });
        }
        let mut items = Vec::with_capacity(items_count);
        let mut heads = Vec::with_capacity(batch.entries.len());
        for e in &batch.entries {
            let head = self.head_for(e).await?;
            let after = Head { topic_id: e.topic_id, next: e.next_offset, bytes: head.bytes + e.len };
            items.push(segment_item(e, after.bytes));
            heads.push(after);
        }
        for r in &batch.idempotency {
            items.push(idempotency_item(r)?);
        }
        let result = match (items.len(), batch.entries.first()) {
            (1, Some(entry)) => self.put_one(items.remove(0), entry).await,
            _ => self.put_all(items, batch).await,
        };
        for (e, head) in batch.entries.iter().zip(heads) {
            self.remember(&e.topic, e.partition, result.is_ok().then_some(head));
        }
        result
    }

    #[tracing::instrument(skip(self))]
    async fn segments(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<SegmentEntry>, StorageError> {
        let limit = i32::try_from(limit.max(1)).unwrap_or(i32::MAX);
        let mut found = self.index_page(topic, partition, Seek::From(offset), limit).await?;
        if found.first().is_some_and(|f| f.base_offset == offset) {
            return Ok(found);
        }
        // `offset` falls inside a segment (or past the last): the one holding it starts before it.
        if let Some(holder) = self.index_page(topic, partition, Seek::Before(offset), 1).await?.pop() {
            if holder.next_offset > offset {
                found.insert(0, holder);
                found.truncate(limit as usize);
            }
        }
        Ok(found)
    }

    /// Reads the partition's index in order until a segment qualifies: a lookup
    /// by time is rare, and an index by time would cost a write per commit.
    #[tracing::instrument(skip(self))]
    async fn segment_at_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<SegmentEntry>, StorageError> {
        let pk = log_pk(topic, partition);
        let mut start: Option<Item> = None;
        loop {
            let out = send_counted(&self.requests, "dynamodb:Query", || {
                self.client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("pk = :pk")
                    .filter_expression("max_ts >= :ts")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":ts", n(timestamp_ms))
                    .set_exclusive_start_key(start.clone())
                    .consistent_read(true)
                    .send()
            })
            .await
            .map_err(|e| unexpected("dynamodb:Query", e))?;
            if let Some(item) = out.items().first() {
                return segment_from_item(topic, partition, item).map(Some);
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => return Ok(None),
            }
        }
    }

    #[tracing::instrument(skip(self))]
    async fn idempotency(&self, topic: &str, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        let out = send_counted(&self.requests, "dynamodb:GetItem", || {
            self.client
                .get_item()
                .table_name(&self.table)
                .key("pk", s(&idem_pk(topic, key)))
                .key("sk", s(key))
                .consistent_read(true)
                .send()
        })
        .await
        .map_err(|e| unexpected("dynamodb:GetItem", e))?;
        let Some(item) = out.item() else { return Ok(None) };
        let fingerprint = match item.get("fp") {
            Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
            _ => return Err(corrupt("fp")),
        };
        let results: Vec<Position> =
            serde_json::from_str(text(item, "results")?).map_err(|e| StorageError::Corrupt(e.to_string()))?;
        Ok(Some(IdempotencyRecord {
            topic: topic.to_owned(),
            key: key.to_owned(),
            fingerprint,
            results,
            created_ms: num(item, "created_ms")?,
        }))
    }
}

fn log_pk(topic: &str, partition: u32) -> String {
    format!("log#{topic}#{partition}")
}

/// Zero-padded so that string order is offset order.
fn offset_key(offset: u64) -> String {
    format!("{offset:020}")
}

fn idem_pk(topic: &str, key: &str) -> String {
    idem_pk_shard(topic, fnv1a(key.as_bytes()) % IDEMPOTENCY_SHARDS)
}

fn idem_pk_shard(topic: &str, shard: u32) -> String {
    format!("idem#{topic}#{shard:02}")
}

/// A stable hash (the standard library's is seeded per process).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

fn segment_item(e: &SegmentEntry, bytes: u64) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(&log_pk(&e.topic, e.partition))),
        ("sk".to_owned(), s(&offset_key(e.base_offset))),
        ("topic_id".to_owned(), n(e.topic_id)),
        ("next".to_owned(), n(e.next_offset)),
        ("object".to_owned(), s(&e.object)),
        ("pos".to_owned(), n(e.position)),
        ("len".to_owned(), n(e.len)),
        ("max_ts".to_owned(), n(e.max_timestamp_ms)),
        ("bytes".to_owned(), n(bytes)),
    ])
}

fn idempotency_item(r: &IdempotencyRecord) -> Result<Item, StorageError> {
    let results =
        serde_json::to_string(&r.results).map_err(|e| StorageError::unavailable("encode idempotency results", e))?;
    Ok(HashMap::from([
        ("pk".to_owned(), s(&idem_pk(&r.topic, &r.key))),
        ("sk".to_owned(), s(&r.key)),
        ("fp".to_owned(), AttributeValue::B(r.fingerprint.clone().into())),
        ("results".to_owned(), s(&results)),
        ("created_ms".to_owned(), n(r.created_ms)),
        ("expires_at".to_owned(), n(r.created_ms / 1000 + IDEMPOTENCY_TTL_SECS)),
    ]))
}

fn segment_from_item(topic: &str, partition: u32, item: &Item) -> Result<SegmentEntry, StorageError> {
    let base_offset = text(item, "sk")?.parse().map_err(|_| corrupt("sk"))?;
    Ok(SegmentEntry {
        topic: topic.to_owned(),
        topic_id: 0,
        partition,
        base_offset,
        next_offset: num(item, "next")?,
        object: text(item, "object")?.to_owned(),
        position: num(item, "pos")?,
        len: num(item, "len")?,
        max_timestamp_ms: num(item, "max_ts")?,
    })
}

fn topic_from_item(item: &Item) -> Result<TopicConfig, StorageError> {
    let optional = |name: &str| item.get(name).map(|_| num::<i64>(item, name)).transpose();
    Ok(TopicConfig {
        name: text(item, "sk")?.to_owned(),
        id: num(item, "id")?,
        spec: TopicSpec {
            partitions: num(item, "partitions")?,
            retention_ms: optional("retention_ms")?,
            retention_bytes: optional("retention_bytes")?,
        },
        created_ms: num(item, "created_ms")?,
    })
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn corrupt(attribute: &str) -> StorageError {
    StorageError::Corrupt(format!("item attribute {attribute} is missing or malformed"))
}

fn text<'a>(item: &'a Item, name: &str) -> Result<&'a str, StorageError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        _ => Err(corrupt(name)),
    }
}

fn num<T: std::str::FromStr>(item: &Item, name: &str) -> Result<T, StorageError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().map_err(|_| corrupt(name)),
        _ => Err(corrupt(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_keys_sort_as_offsets() {
        let mut offsets = [0u64, 9, 10, 99, 100, 12_345, u64::MAX];
        let mut keys: Vec<String> = offsets.iter().map(|&o| offset_key(o)).collect();
        keys.sort();
        offsets.sort_unstable();
        assert_eq!(keys, offsets.iter().map(|&o| offset_key(o)).collect::<Vec<_>>());
    }

    #[test]
    fn idempotency_shards_are_stable_and_spread() {
        assert_eq!(idem_pk("t", "abc"), idem_pk("t", "abc"));
        let shards: std::collections::HashSet<String> = (0..200).map(|i| idem_pk("t", &format!("key-{i}"))).collect();
        assert_eq!(shards.len(), IDEMPOTENCY_SHARDS as usize);
    }
}
