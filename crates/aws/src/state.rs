//! [`StateStore`] on one DynamoDB table (`pk` string hash key, `sk` string
//! range key, TTL on `expires_at`), read with strongly consistent reads only.
//!
//! # Item layout
//!
//! | attribute | type | holds |
//! |---|---|---|
//! | `pk`, `sk` | S | the [`Key`] |
//! | `d` | B | the value |
//! | `v` | N | the version |
//! | `exp_ms` | N | expiry, ms since the epoch (only on expiring items) |
//! | `expires_at` | N | the same in seconds, rounded up: what DynamoDB's TTL reads |
//!
//! DynamoDB's TTL deletes an expired item some time (up to days) after it
//! expires, so every read filters on `exp_ms` and every condition counts an
//! expired item as absent.
//!
//! # Requests
//!
//! | call | request |
//! |---|---|
//! | [`StateStore::get`] | one `GetItem` |
//! | [`StateStore::query`] | one `Query`, another for each page that expired items or the 1 MB response cap left short |
//! | [`StateStore::write`] of one put or delete | one `UpdateItem` or `DeleteItem` (1 WCU per KB) |
//! | [`StateStore::write`] of more operations | one `TransactWriteItems` (2 WCU per KB per item) |
//! | [`StateStore::delete_many`] | one `BatchWriteItem` per 25 keys (more if some come back unprocessed) |
//! | [`StateStore::purge_expired`] | none: TTL removes expired items |
//!
//! A put is an `UpdateItem` expression, not a `PutItem`, so that the new
//! version is computed by the same atomic write (`ADD v :one` under
//! [`Expect::Any`]). Check operations under [`Expect::Any`] constrain nothing
//! and are not sent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, DeleteRequest, TransactWriteItem, Update, WriteRequest,
};
use bytes::Bytes;
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, StateStore, WriteOp};
use sluice_core::{Clock, StorageError};

use crate::resend::{Resend, Sender};
use crate::{unexpected, Deadlines, RequestCounts};

/// Items per `BatchWriteItem` (DynamoDB's limit).
const BATCH_WRITE_ITEMS: usize = 25;
/// `BatchWriteItem` rounds that may leave items unprocessed before a delete gives up.
const BATCH_WRITE_ROUNDS: u32 = 8;

/// Absent, or expired but not yet removed by TTL.
const ABSENT: &str = "attribute_not_exists(pk) OR exp_ms <= :now";
/// Present at version `:expected`, and not expired.
const AT_VERSION: &str = "v = :expected AND (attribute_not_exists(exp_ms) OR exp_ms > :now)";

type Attributes = HashMap<String, AttributeValue>;

/// The state store's items in one DynamoDB table.
pub struct DynamoStateStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
    clock: Arc<dyn Clock>,
    sender: Sender,
}

/// One operation of a write as DynamoDB expressions.
#[derive(Debug)]
struct Expression {
    /// The update expression of a put.
    update: Option<String>,
    condition: Option<&'static str>,
    values: Attributes,
}

impl Expression {
    /// Expression attribute values, or none: DynamoDB refuses an empty map.
    fn values(&self) -> Option<Attributes> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }

    fn condition(&self) -> Option<String> {
        self.condition.map(str::to_owned)
    }
}

/// The expressions of `op`, whose conditions treat items expired at `now_ms` as absent.
fn expression(op: &WriteOp, now_ms: i64) -> Expression {
    let mut values = Attributes::new();
    let condition = match op.expect() {
        Expect::Any => None,
        Expect::Absent => Some(ABSENT),
        Expect::Version(n) => {
            values.insert(":expected".into(), n_attr(n));
            Some(AT_VERSION)
        }
    };
    if condition.is_some() {
        values.insert(":now".into(), n_attr(now_ms));
    }
    let update = match op {
        WriteOp::Put { value, expires_at_ms, expect, .. } => {
            values.insert(":d".into(), AttributeValue::B(value.to_vec().into()));
            let mut set = vec!["d = :d"];
            let mut tail = String::new();
            match expect {
                Expect::Absent => {
                    values.insert(":newv".into(), n_attr(1));
                    set.push("v = :newv");
                }
                Expect::Version(n) => {
                    values.insert(":newv".into(), n_attr(n + 1));
                    set.push("v = :newv");
                }
                Expect::Any => {
                    values.insert(":one".into(), n_attr(1));
                    tail.push_str(" ADD v :one");
                }
            }
            match expires_at_ms {
                Some(ms) => {
                    values.insert(":exp".into(), n_attr(ms));
                    values.insert(":ttl".into(), n_attr(ttl_seconds(*ms)));
                    set.extend(["exp_ms = :exp", "expires_at = :ttl"]);
                }
                None => tail.push_str(" REMOVE exp_ms, expires_at"),
            }
            Some(format!("SET {}{tail}", set.join(", ")))
        }
        WriteOp::Delete { .. } | WriteOp::Check { .. } => None,
    };
    Expression { update, condition, values }
}

/// The write's indices of every item whose condition failed, by the cancellation reasons
/// (one per item sent, in order); `None` if no condition failed.
fn failed_conditions(reasons: &[CancellationReason], ops: &[(usize, &WriteOp)]) -> Option<Vec<usize>> {
    let failed: Vec<usize> = (reasons.iter().zip(ops))
        .filter(|(r, _)| r.code() == Some("ConditionalCheckFailed"))
        .map(|(_, &(op, _))| op)
        .collect();
    (!failed.is_empty()).then_some(failed)
}

/// Epoch seconds for DynamoDB's TTL, rounded up so the item never goes before it expires.
fn ttl_seconds(ms: i64) -> i64 {
    ms.saturating_add(999).div_euclid(1000)
}

impl DynamoStateStore {
    /// A store on `table`; `clock` decides which items have expired; every request, its
    /// retries included, ends within `deadlines`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String, clock: Arc<dyn Clock>, deadlines: Deadlines) -> Self {
        Self { client, table, clock, sender: Sender::new(deadlines) }
    }

    /// The DynamoDB requests this store has sent, every attempt counted.
    pub fn requests(&self) -> &RequestCounts {
        &self.sender.counts
    }

    /// One put (`op` is the index of `put` in its write) as an `UpdateItem`.
    async fn update_one(&self, op: usize, put: &WriteOp, now_ms: i64) -> Result<(), StorageError> {
        let e = expression(put, now_ms);
        let sent = self
            .sender
            .send("dynamodb:UpdateItem", Resend::OnThrottling, || {
                self.client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key_attributes(put.key())))
                    .set_update_expression(e.update.clone())
                    .set_condition_expression(e.condition())
                    .set_expression_attribute_values(e.values())
                    .send()
            })
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Err(StorageError::condition_failed(vec![op]))
            }
            Err(e) => Err(unexpected("dynamodb:UpdateItem", e)),
        }
    }

    /// One delete (`op` is the index of `delete` in its write) as a `DeleteItem`.
    async fn delete_one(&self, op: usize, delete: &WriteOp, now_ms: i64) -> Result<(), StorageError> {
        let e = expression(delete, now_ms);
        // Deleting twice does what deleting once does; a condition would fail on the repeat.
        let resend = if e.condition.is_none() { Resend::OnTransient } else { Resend::OnThrottling };
        let sent = self
            .sender
            .send("dynamodb:DeleteItem", resend, || {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(key_attributes(delete.key())))
                    .set_condition_expression(e.condition())
                    .set_expression_attribute_values(e.values())
                    .send()
            })
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Err(StorageError::condition_failed(vec![op]))
            }
            Err(e) => Err(unexpected("dynamodb:DeleteItem", e)),
        }
    }

    /// Operations (each with its index in the write) as one `TransactWriteItems`, under a
    /// `ClientRequestToken` of its own: its attempts all carry it, so one that follows an
    /// attempt that landed (its answer lost) is answered as that one was, and writes nothing.
    async fn transact(&self, ops: &[(usize, &WriteOp)], now_ms: i64) -> Result<(), StorageError> {
        let items = ops.iter().map(|(_, op)| self.transact_item(op, now_ms)).collect::<Result<Vec<_>, _>>()?;
        let token = client_request_token();
        let sent = self
            .sender
            .send("dynamodb:TransactWriteItems", Resend::OnTransient, || {
                self.client
                    .transact_write_items()
                    .set_transact_items(Some(items.clone()))
                    .client_request_token(&token)
                    .send()
            })
            .await;
        let e = match sent {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let Some(TransactWriteItemsError::TransactionCanceledException(canceled)) = e.as_service_error() else {
            return Err(unexpected("dynamodb:TransactWriteItems", e));
        };
        let reasons = canceled.cancellation_reasons();
        if let Some(failed) = failed_conditions(reasons, ops) {
            return Err(StorageError::condition_failed(failed));
        }
        // Cancelled before writing anything: a conflicting transaction in flight, or throttling.
        let refused = reasons.iter().any(|r| {
            matches!(r.code(), Some("TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"))
        });
        if refused {
            let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).filter(|&c| c != "None").collect();
            return Err(StorageError::Throttled {
                message: format!("dynamodb:TransactWriteItems: cancelled ({})", codes.join(", ")),
                source: Some(Box::new(e)),
            });
        }
        Err(unexpected("dynamodb:TransactWriteItems", e))
    }

    fn transact_item(&self, op: &WriteOp, now_ms: i64) -> Result<TransactWriteItem, StorageError> {
        let e = expression(op, now_ms);
        let key = Some(key_attributes(op.key()));
        let invalid = |e: aws_sdk_dynamodb::error::BuildError| {
            StorageError::Invalid(format!("dynamodb:TransactWriteItems request: {e}"))
        };
        let item = match op {
            WriteOp::Put { .. } => TransactWriteItem::builder().update(
                Update::builder()
                    .table_name(&self.table)
                    .set_key(key)
                    .set_update_expression(e.update.clone())
                    .set_condition_expression(e.condition())
                    .set_expression_attribute_values(e.values())
                    .build()
                    .map_err(invalid)?,
            ),
            WriteOp::Delete { .. } => TransactWriteItem::builder().delete(
                Delete::builder()
                    .table_name(&self.table)
                    .set_key(key)
                    .set_condition_expression(e.condition())
                    .set_expression_attribute_values(e.values())
                    .build()
                    .map_err(invalid)?,
            ),
            WriteOp::Check { .. } => TransactWriteItem::builder().condition_check(
                ConditionCheck::builder()
                    .table_name(&self.table)
                    .set_key(key)
                    .set_condition_expression(e.condition())
                    .set_expression_attribute_values(e.values())
                    .build()
                    .map_err(invalid)?,
            ),
        };
        Ok(item.build())
    }

    /// Deletes up to 25 distinct keys with `BatchWriteItem`, resending what comes back unprocessed.
    async fn delete_batch(&self, keys: &[Key]) -> Result<(), StorageError> {
        let mut pending: Vec<WriteRequest> = keys
            .iter()
            .map(|key| {
                let delete = DeleteRequest::builder()
                    .set_key(Some(key_attributes(key)))
                    .build()
                    .map_err(|e| StorageError::Invalid(format!("dynamodb:BatchWriteItem request: {e}")))?;
                Ok(WriteRequest::builder().delete_request(delete).build())
            })
            .collect::<Result<_, StorageError>>()?;
        let mut rounds = 0;
        while !pending.is_empty() {
            let out = self
                .sender
                .send("dynamodb:BatchWriteItem", Resend::OnTransient, || {
                    self.client.batch_write_item().request_items(&self.table, pending.clone()).send()
                })
                .await
                .map_err(|e| unexpected("dynamodb:BatchWriteItem", e))?;
            pending = out.unprocessed_items().and_then(|u| u.get(&self.table)).cloned().unwrap_or_default();
            rounds += 1;
            if !pending.is_empty() {
                if rounds >= BATCH_WRITE_ROUNDS {
                    return Err(StorageError::Throttled {
                        message: "dynamodb:BatchWriteItem kept leaving items unprocessed".into(),
                        source: None,
                    });
                }
                tokio::time::sleep(crate::resend::backoff(rounds)).await;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl StateStore for DynamoStateStore {
    #[tracing::instrument(level = "debug", skip(self))]
    async fn get(&self, key: &Key) -> Result<Option<Item>, StorageError> {
        let out = self
            .sender
            .send("dynamodb:GetItem", Resend::OnTransient, || {
                self.client
                    .get_item()
                    .table_name(&self.table)
                    .set_key(Some(key_attributes(key)))
                    .consistent_read(true)
                    .send()
            })
            .await
            .map_err(|e| unexpected("dynamodb:GetItem", e))?;
        let now_ms = self.clock.now_ms();
        Ok(out.item().map(item_from_attributes).transpose()?.filter(|i| live(i, now_ms)))
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn query(&self, query: &Query) -> Result<Page, StorageError> {
        let limit = query.limit.max(1);
        let (from, to) = (query.from.as_deref(), query.to.as_deref());
        if from.zip(to).is_some_and(|(from, to)| from > to) {
            return Ok(Page::default());
        }
        // `after` outside the bounds: nothing left, or nothing skipped (DynamoDB
        // refuses a start key outside the key condition).
        let after = match query.after.as_deref() {
            Some(a) if query.forward && to.is_some_and(|to| a >= to) => return Ok(Page::default()),
            Some(a) if !query.forward && from.is_some_and(|from| a <= from) => return Ok(Page::default()),
            Some(a) if query.forward && from.is_some_and(|from| a < from) => None,
            Some(a) if !query.forward && to.is_some_and(|to| a > to) => None,
            after => after,
        };
        let mut values = Attributes::from([(":pk".to_owned(), s_attr(&query.pk))]);
        let condition = match (from, to) {
            (Some(_), Some(_)) => "pk = :pk AND sk BETWEEN :from AND :to",
            (Some(_), None) => "pk = :pk AND sk >= :from",
            (None, Some(_)) => "pk = :pk AND sk <= :to",
            (None, None) => "pk = :pk",
        };
        if let Some(from) = from {
            values.insert(":from".into(), s_attr(from));
        }
        if let Some(to) = to {
            values.insert(":to".into(), s_attr(to));
        }
        let mut start = after.map(|sk| key_attributes(&Key::new(query.pk.clone(), sk)));
        let mut page = Page::default();
        let now_ms = self.clock.now_ms();
        loop {
            let want = i32::try_from(limit - page.items.len()).unwrap_or(i32::MAX);
            let out = self
                .sender
                .send("dynamodb:Query", Resend::OnTransient, || {
                    self.client
                        .query()
                        .table_name(&self.table)
                        .key_condition_expression(condition)
                        .set_expression_attribute_values(Some(values.clone()))
                        .set_exclusive_start_key(start.clone())
                        .scan_index_forward(query.forward)
                        .limit(want)
                        .consistent_read(true)
                        .send()
                })
                .await
                .map_err(|e| unexpected("dynamodb:Query", e))?;
            for attributes in out.items() {
                let item = item_from_attributes(attributes)?;
                if live(&item, now_ms) {
                    page.items.push(item);
                }
            }
            let Some(last) = out.last_evaluated_key() else {
                page.next = None;
                return Ok(page);
            };
            page.next = Some(text(last, "sk")?.to_owned());
            // Short of the limit only because of expired items or the 1 MB cap: read on.
            if page.items.len() >= limit {
                return Ok(page);
            }
            start = Some(last.clone());
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ops = ops.len()))]
    async fn write(&self, ops: Vec<WriteOp>) -> Result<(), StorageError> {
        sluice_core::ports::state::validate(&ops)?;
        let now_ms = self.clock.now_ms();
        match shape(&ops) {
            Shape::Nothing => Ok(()),
            Shape::One((i, op @ WriteOp::Put { .. })) => self.update_one(i, op, now_ms).await,
            Shape::One((i, op)) => self.delete_one(i, op, now_ms).await,
            Shape::Transaction(sent) => self.transact(&sent, now_ms).await,
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(keys = keys.len()))]
    async fn delete_many(&self, keys: Vec<Key>) -> Result<(), StorageError> {
        // BatchWriteItem refuses a batch naming one key twice.
        let mut seen = HashSet::with_capacity(keys.len());
        let keys: Vec<Key> = keys.into_iter().filter(|k| seen.insert(k.clone())).collect();
        for chunk in keys.chunks(BATCH_WRITE_ITEMS) {
            self.delete_batch(chunk).await?;
        }
        Ok(())
    }

    /// DynamoDB's TTL removes expired items by itself.
    #[tracing::instrument(level = "debug", skip(self))]
    async fn purge_expired(&self, _limit: usize) -> Result<usize, StorageError> {
        Ok(0)
    }
}

/// How [`StateStore::write`] sends a write's operations.
pub(crate) enum Shape<'a> {
    /// Only checks under [`Expect::Any`]: nothing to send.
    Nothing,
    /// One put (an `UpdateItem`) or one delete (a `DeleteItem`), with its index in the write.
    One((usize, &'a WriteOp)),
    /// One `TransactWriteItems` of these operations, each with its index in the write.
    Transaction(Vec<(usize, &'a WriteOp)>),
}

pub(crate) fn shape(ops: &[WriteOp]) -> Shape<'_> {
    let sent: Vec<(usize, &WriteOp)> =
        ops.iter().enumerate().filter(|(_, op)| !matches!(op, WriteOp::Check { expect: Expect::Any, .. })).collect();
    match sent.as_slice() {
        [] => Shape::Nothing,
        [one @ (_, WriteOp::Put { .. } | WriteOp::Delete { .. })] => Shape::One(*one),
        _ => Shape::Transaction(sent),
    }
}

/// A token no other transaction shares: 128 random bits in hex (DynamoDB takes up to 36
/// characters), unique for far longer than its 10 minutes of idempotency.
fn client_request_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn live(item: &Item, now_ms: i64) -> bool {
    item.expires_at_ms.is_none_or(|e| e > now_ms)
}

fn key_attributes(key: &Key) -> Attributes {
    HashMap::from([("pk".to_owned(), s_attr(&key.pk)), ("sk".to_owned(), s_attr(&key.sk))])
}

fn item_from_attributes(item: &Attributes) -> Result<Item, StorageError> {
    let value = match item.get("d") {
        Some(AttributeValue::B(b)) => Bytes::from(b.clone().into_inner()),
        _ => return Err(corrupt("d")),
    };
    Ok(Item {
        key: Key::new(text(item, "pk")?, text(item, "sk")?),
        value,
        version: num(item, "v")?,
        expires_at_ms: item.get("exp_ms").map(|_| num(item, "exp_ms")).transpose()?,
    })
}

fn s_attr(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n_attr(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn corrupt(attribute: &str) -> StorageError {
    StorageError::Corrupt(format!("item attribute {attribute} is missing or malformed"))
}

fn text<'a>(item: &'a Attributes, name: &str) -> Result<&'a str, StorageError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        _ => Err(corrupt(name)),
    }
}

fn num<T: std::str::FromStr>(item: &Attributes, name: &str) -> Result<T, StorageError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().map_err(|_| corrupt(name)),
        _ => Err(corrupt(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::new("p", "s")
    }

    #[test]
    fn every_failed_condition_of_a_cancelled_transaction_is_named() {
        let reason = |code: &str| CancellationReason::builder().code(code).build();
        let check = WriteOp::Check { key: key(), expect: Expect::Absent };
        // Ops 0 and 2 were not sent (checks under `Expect::Any`): indices are the write's.
        let sent = [(1, &check), (3, &check), (4, &check), (5, &check)];
        let reasons = [
            reason("ConditionalCheckFailed"),
            reason("None"),
            reason("ConditionalCheckFailed"),
            reason("TransactionConflict"),
        ];
        assert_eq!(failed_conditions(&reasons, &sent), Some(vec![1, 4]));
        assert_eq!(failed_conditions(&reasons[1..2], &sent), None);
    }

    #[test]
    fn ttl_rounds_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(1_000), 1);
        assert_eq!(ttl_seconds(1_001), 2);
        assert_eq!(ttl_seconds(1_999), 2);
        assert_eq!(ttl_seconds(0), 0);
    }

    #[test]
    fn put_expressions_set_the_version_in_the_same_write() {
        let put = |expect, expires_at_ms| WriteOp::Put { key: key(), value: Bytes::new(), expires_at_ms, expect };
        let absent = expression(&put(Expect::Absent, None), 5);
        assert_eq!(absent.update.as_deref(), Some("SET d = :d, v = :newv REMOVE exp_ms, expires_at"));
        assert_eq!(absent.condition, Some(ABSENT));
        assert_eq!(absent.values[":newv"], n_attr(1));
        let version = expression(&put(Expect::Version(7), Some(2_500)), 5);
        assert_eq!(version.update.as_deref(), Some("SET d = :d, v = :newv, exp_ms = :exp, expires_at = :ttl"));
        assert_eq!(version.condition, Some(AT_VERSION));
        assert_eq!((&version.values[":newv"], &version.values[":expected"]), (&n_attr(8), &n_attr(7)));
        assert_eq!(version.values[":ttl"], n_attr(3));
        let any = expression(&put(Expect::Any, None), 5);
        assert_eq!(any.update.as_deref(), Some("SET d = :d ADD v :one REMOVE exp_ms, expires_at"));
        assert_eq!((any.condition, any.values.contains_key(":now")), (None, false));
    }

    #[test]
    fn unconditional_delete_sends_no_expression_values() {
        let delete = expression(&WriteOp::Delete { key: key(), expect: Expect::Any }, 5);
        assert_eq!((delete.values(), delete.update, delete.condition), (None, None, None));
    }
}
