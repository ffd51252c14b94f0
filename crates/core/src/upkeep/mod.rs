//! Upkeep in bounded, resumable steps. [`step`] removes the items of deleted
//! topics and subscriptions and expired records; a [`Janitor`] step does that,
//! then applies retention and compaction to every partition of every topic (a
//! pass that resumes where the last step stopped), then runs the collector
//! ([`crate::upkeep::collect`]). The janitor Lambda function runs steps on a schedule; `serve`
//! runs them in a background task. Each step is bounded and keeps its progress in
//! the store, so a step cut short (a timeout, a crash) is continued by the next.

mod cadence;
pub mod collect;
pub mod compaction;
pub mod pace;
pub mod retention;

use std::sync::Arc;

use serde::Serialize;

use crate::keys::{self, IDEMPOTENCY_SHARDS};
use crate::layout::{self, Cursor, PurgeRecord, UpkeepRecord};
use crate::log::index::decode_segments;
use crate::log::topics;
use crate::ports::drain::drain;
use crate::ports::objects::ObjectStore;
use crate::ports::state::{Expect, Query, StateStore, WriteOp};
use crate::upkeep::compaction::{compact, Rewriting};
use crate::upkeep::pace::Pacer;
use crate::upkeep::retention::{remove_segments, retain, SEGMENTS_PER_WRITE};
use crate::{Clock, StorageError, TopicConfig};

/// Purge orders looked at per step.
const ORDERS_PER_STEP: usize = 16;

/// What one step did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct JanitorReport {
    /// Deleted topics whose items are now all gone.
    pub topics_purged: usize,
    /// Items of deleted topics removed.
    pub items_deleted: usize,
    /// Expired records removed (0 on stores that expire items themselves).
    pub expired_removed: usize,
    /// Whether work is left for another step.
    pub more: bool,
}

/// Runs one bounded step of at most about `budget` deletions.
pub async fn step(store: &dyn StateStore, budget: usize, now_ms: i64) -> Result<JanitorReport, StorageError> {
    let budget = budget.max(1);
    let mut report =
        JanitorReport { expired_removed: store.purge_expired(budget / 4 + 1).await?, ..Default::default() };
    let mut left = budget;
    let (deleted, more) = crate::queues::purge_step(store, budget).await?;
    report.items_deleted += deleted;
    left = left.saturating_sub(deleted);
    if more {
        report.more = true;
        return Ok(report);
    }
    let orders = store.query(&Query::all(keys::purge_pk(), ORDERS_PER_STEP)).await?;
    report.more = orders.next.is_some();
    for item in orders.items {
        let mut order: PurgeRecord = layout::decode("purge", &item.value)?;
        let id = u64::from_str_radix(&item.key.sk, 16)
            .map_err(|_| StorageError::Corrupt(format!("purge order key {:?}", item.key.sk)))?;
        let mut version = item.version;
        // The index, one partition at a time, recording progress after each.
        // The index, one partition at a time, lowering the objects' counts and recording progress after each.
        while order.done_partitions < order.partitions {
            if left == 0 {
                report.more = true;
                return Ok(report);
            }
            let p = order.done_partitions;
            let page = store.query(&Query::all(keys::segments_pk(id, p), (SEGMENTS_PER_WRITE * 4).min(left))).await?;
            left = left.saturating_sub(page.items.len().max(1));
            if page.items.is_empty() {
                order.done_partitions += 1;
                store.write(vec![WriteOp::replace(item.key.clone(), layout::encode(&order), Some(version))]).await?;
                version += 1;
                continue;
            }
            report.items_deleted += remove_segments(store, id, p, decode_segments(page.items)?, now_ms).await?;
        }
        // Its subscriptions become purge orders of their own; then the heads and
        // idempotency records go, each collection small or bounded by its TTL.
        if crate::queues::purge_topic_subscriptions(store, id, order.partitions).await? > 0 {
            report.more = true;
        }
        let mut rest = vec![keys::heads_pk(id), keys::upkeep_record_key(id).pk, keys::time_cursors_pk(id)];
        rest.extend((0..order.partitions).map(|p| keys::time_entries_pk(id, p)));
        rest.extend((0..IDEMPOTENCY_SHARDS).map(|shard| keys::idempotency_pk_shard(id, shard)));
        for pk in rest {
            let (deleted, emptied) = drain(store, &pk, left).await?;
            report.items_deleted += deleted;
            left = left.saturating_sub(deleted);
            if !emptied {
                report.more = true;
                return Ok(report);
            }
        }
        store.write(vec![WriteOp::Delete { key: item.key, expect: Expect::Version(version) }]).await?;
        tracing::info!(topic = %order.name, topic_id = id, "deleted topic purged");
        report.topics_purged += 1;
    }
    Ok(report)
}

/// Adds what a pass did to a topic to its [`UpkeepRecord`] (statistics: a lost race loses them, nothing else).
async fn record_upkeep(
    store: &dyn StateStore,
    topic: &TopicConfig,
    done: UpkeepRecord,
    now: i64,
) -> Result<(), StorageError> {
    let key = keys::upkeep_record_key(topic.id);
    let (mut total, version) = match store.get(&key).await? {
        Some(item) => (layout::decode::<UpkeepRecord>("upkeep", &item.value)?, Some(item.version)),
        None => (UpkeepRecord::default(), None),
    };
    total.segments_expired += done.segments_expired;
    total.bytes_expired += done.bytes_expired;
    total.segments_merged += done.segments_merged;
    total.segments_written += done.segments_written;
    total.last_change_ms = now;
    let mut ops = vec![WriteOp::replace(key, layout::encode(&total), version)];
    if version.is_none() {
        // Created only while the topic lives: its purge may have removed the record already.
        ops.push(layout::topic_check(topic));
    }
    match store.write(ops).await {
        Ok(()) | Err(StorageError::ConditionFailed { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletions per step when running continuously.
pub const STEP_BUDGET: usize = 5_000;
/// Topics a janitor step applies retention and compaction to.
const TOPICS_PER_STEP: usize = 16;
/// Retention steps and merges per partition per janitor step.
const PARTITION_STEPS: usize = 8;
/// Steps in one round of [`Janitor::run`], so a busy log cannot keep a round going forever.
const MAX_STEPS_PER_ROUND: usize = 200;

/// How the janitor keeps the log.
#[derive(Debug, Clone)]
pub struct JanitorConfig {
    /// Retention of topics that set no `retention_ms`.
    pub default_retention_ms: i64,
    /// The size compaction merges small segments up to.
    pub compaction_target_bytes: u64,
    /// Bytes of a part of a merged segment ([`crate::segment::PART_BYTES`]; smaller in the
    /// simulation, so that its small worlds have segments in parts).
    pub part_bytes: usize,
    /// How long an object stays after its last segment went (readers in flight) or, never
    /// indexed, after it was written (commits in flight).
    pub grace_ms: i64,
    /// How long a consumer group without members keeps its committed offsets.
    pub offsets_retention_ms: i64,
    /// Whether compaction moves every segment a commit wrote to a blob, that no run merges,
    /// alone into a blob of its own, a partition's newest too ([`compaction::compact`]): on
    /// the embedded backend, whose commits share blob files among partitions and whose
    /// janitor writes each blob to a file of its own, so that the disk follows retention.
    pub settle_commit_segments: bool,
}

impl Default for JanitorConfig {
    fn default() -> Self {
        Self {
            default_retention_ms: 7 * 24 * 3600 * 1000,
            compaction_target_bytes: 8 << 20,
            part_bytes: crate::segment::PART_BYTES,
            grace_ms: 10 * 60 * 1000,
            offsets_retention_ms: crate::groups::DEFAULT_OFFSETS_RETENTION_MS,
            settle_commit_segments: false,
        }
    }
}

/// What a janitor step (or a round of them) did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct UpkeepReport {
    #[serde(flatten)]
    pub purge: JanitorReport,
    pub partitions_visited: usize,
    /// Partitions whose upkeep failed (logged; the next pass tries again).
    pub partitions_failed: usize,
    pub segments_expired: usize,
    pub bytes_expired: u64,
    pub index_items_removed: usize,
    pub segments_merged: usize,
    pub segments_written: usize,
    /// Items of consumer groups whose offsets expired.
    pub group_items_expired: usize,
    #[serde(flatten)]
    pub gc: collect::GcReport,
    /// Some partition had more to expire or merge than one step does.
    #[serde(skip)]
    pub partitions_left: bool,
}

impl UpkeepReport {
    /// Counts this run in the janitor's metrics ([`crate::metrics`]): its work, and its
    /// outcome (`failed` when a partition's upkeep failed, though the others went on).
    pub fn record(&self) {
        let outcome = if self.partitions_failed > 0 { "failed" } else { "ok" };
        metrics::counter!(crate::metrics::JANITOR_RUNS, "outcome" => outcome).increment(1);
        self.record_work();
    }

    /// Counts this run's work alone (a retention pass between rounds is no run).
    fn record_work(&self) {
        use crate::metrics as m;
        metrics::counter!(m::JANITOR_SEGMENTS_EXPIRED).increment(self.segments_expired as u64);
        metrics::counter!(m::JANITOR_SEGMENTS_MERGED).increment(self.segments_merged as u64);
        metrics::counter!(m::JANITOR_BYTES_FREED).increment(self.bytes_expired + self.gc.bytes_deleted);
        let objects = self.gc.objects_deleted + self.gc.orphans_deleted;
        metrics::counter!(m::JANITOR_OBJECTS_COLLECTED).increment(objects as u64);
    }

    /// Counts a run that failed as a whole.
    pub fn record_failure() {
        metrics::counter!(crate::metrics::JANITOR_RUNS, "outcome" => "failed").increment(1);
    }

    /// Adds what another step did.
    pub fn add(&mut self, o: &UpkeepReport) {
        let (p, q) = (&mut self.purge, &o.purge);
        p.topics_purged += q.topics_purged;
        p.items_deleted += q.items_deleted;
        p.expired_removed += q.expired_removed;
        self.partitions_visited += o.partitions_visited;
        self.partitions_failed += o.partitions_failed;
        self.segments_expired += o.segments_expired;
        self.bytes_expired += o.bytes_expired;
        self.index_items_removed += o.index_items_removed;
        self.segments_merged += o.segments_merged;
        self.segments_written += o.segments_written;
        self.group_items_expired += o.group_items_expired;
        self.gc.objects_deleted += o.gc.objects_deleted;
        self.gc.orphans_deleted += o.gc.orphans_deleted;
        self.gc.bytes_deleted += o.gc.bytes_deleted;
        self.gc.more = o.gc.more;
        self.purge.more = o.purge.more;
        self.partitions_left = o.partitions_left;
    }

    /// Whether work is left for another step.
    pub fn more(&self) -> bool {
        self.purge.more || self.gc.more || self.partitions_left
    }

    fn did_something(&self) -> bool {
        *self != UpkeepReport { partitions_visited: self.partitions_visited, ..Default::default() }
    }
}

/// Where a pass over the topics keeps its cursor: in the store (steps of successive runs),
/// or in memory (one round).
enum Pass {
    Stored,
    Local(Cursor),
}

/// Purges, retention, compaction and collection, over one backend's two stores.
#[derive(Clone)]
pub struct Janitor {
    store: Arc<dyn StateStore>,
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    config: JanitorConfig,
    pacer: Option<Arc<dyn Pacer>>,
}

impl Janitor {
    pub fn new(
        store: Arc<dyn StateStore>,
        objects: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
        config: JanitorConfig,
    ) -> Self {
        Self { store, objects, clock, config, pacer: None }
    }

    /// This janitor with each compaction rewrite held back by `pacer` (`serve`: while live
    /// requests keep coming; see [`pace`]).
    pub fn with_pacer(self, pacer: Arc<dyn Pacer>) -> Self {
        Self { pacer: Some(pacer), ..self }
    }

    /// One bounded step: purges first; then retention and compaction of up to
    /// `TOPICS_PER_STEP` topics from where the last step left off; then the collector.
    /// The pass resumes from a cursor kept in the store, so steps of successive runs (each
    /// cut short by its deadline) cover every topic in turn.
    pub async fn step(&self, budget: usize) -> Result<UpkeepReport, StorageError> {
        self.step_from(&mut Pass::Stored, budget).await
    }

    /// [`Janitor::step`] with the pass where `pass` says. A failure of one chore (a purge, an
    /// expiry, the collector) is logged and left for the next step; it never stops the others.
    async fn step_from(&self, pass: &mut Pass, budget: usize) -> Result<UpkeepReport, StorageError> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        let mut report = UpkeepReport::default();
        match step(store, budget, now).await {
            Ok(purge) if purge.more => return Ok(UpkeepReport { purge, ..report }),
            Ok(purge) => report.purge = purge,
            Err(e) => tracing::warn!(error = %e, "purge step failed"),
        }
        match crate::groups::expire_step(store, now, self.config.offsets_retention_ms, budget).await {
            Ok(n) => report.group_items_expired = n,
            Err(e) => tracing::warn!(error = %e, "group offsets expiry failed"),
        }
        let pass_done = self.pass(&mut report, now, pass).await?;
        match collect::step(store, self.objects.as_ref(), self.clock.now_ms(), self.config.grace_ms, budget).await {
            Ok(gc) => report.gc = gc,
            Err(e) => tracing::warn!(error = %e, "collector step failed"),
        }
        report.purge.more = !pass_done;
        Ok(report)
    }

    /// Retention and compaction of the next topics of the pass, moving its cursor after each
    /// (a step cut short resumes after the last topic done); answers whether the pass is done.
    async fn pass(&self, report: &mut UpkeepReport, now: i64, pass: &mut Pass) -> Result<bool, StorageError> {
        let store = self.store.as_ref();
        let key = keys::pass_cursor_key();
        let (mut cursor, mut version) = match pass {
            Pass::Stored => match store.get(&key).await? {
                Some(item) => (layout::decode::<Cursor>("cursor", &item.value)?, Some(item.version)),
                None => (Cursor::default(), None),
            },
            Pass::Local(cursor) => (cursor.clone(), None),
        };
        let all = topics::list(store).await?;
        let mut todo: Vec<_> =
            all.iter().filter(|t| cursor.after.as_ref().is_none_or(|after| t.name > *after)).cloned().collect();
        if todo.is_empty() {
            // The topics after the cursor were deleted since: the pass starts over.
            todo = all;
        }
        let done = todo.len() <= TOPICS_PER_STEP;
        let count = todo.len().min(TOPICS_PER_STEP);
        for (i, topic) in todo.into_iter().take(TOPICS_PER_STEP).enumerate() {
            let mut changed = UpkeepRecord::default();
            for partition in 0..topic.spec.partitions {
                report.partitions_visited += 1;
                // One partition's failure (storage down, a corrupt segment) is logged and left
                // for the next pass; it never stops the upkeep of the others.
                if let Err(e) = self.keep(&topic, partition, now, &mut changed, report).await {
                    tracing::warn!(topic = %topic.name, partition, error = %e, "partition upkeep failed");
                    report.partitions_failed += 1;
                }
            }
            self.account(&topic, changed, report, now).await;
            cursor.after = if done && i + 1 == count { None } else { Some(topic.name.clone()) };
            match pass {
                Pass::Stored => {
                    let op = WriteOp::replace(key.clone(), layout::encode(&cursor), version);
                    match store.write(vec![op]).await {
                        Ok(()) => version = Some(version.unwrap_or(0) + 1),
                        // Another janitor moved it: both did their topics; nothing is lost.
                        Err(StorageError::ConditionFailed { .. }) => {
                            version = store.get(&key).await?.map(|i| i.version);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Pass::Local(c) => *c = cursor.clone(),
            }
        }
        if done {
            if let Pass::Local(c) = pass {
                c.after = None;
            }
        }
        Ok(done)
    }

    /// Adds what a pass did to `topic` to `report` and, if it did anything, to the topic's
    /// upkeep record.
    async fn account(&self, topic: &TopicConfig, changed: UpkeepRecord, report: &mut UpkeepReport, now: i64) {
        report.segments_expired += changed.segments_expired as usize;
        report.bytes_expired += changed.bytes_expired;
        report.segments_merged += changed.segments_merged as usize;
        report.segments_written += changed.segments_written as usize;
        if changed != UpkeepRecord::default() {
            tracing::info!(topic = %topic.name, ?changed, "janitor changed the topic");
            if let Err(e) = record_upkeep(self.store.as_ref(), topic, changed, now).await {
                tracing::warn!(topic = %topic.name, error = %e, "recording the topic's upkeep failed");
            }
        }
    }

    /// Retention of one partition, in up to [`PARTITION_STEPS`] steps while one leaves more;
    /// then the time index trimmed to the log start. Answers the log start.
    async fn retain_partition(
        &self,
        topic: &crate::TopicConfig,
        partition: u32,
        now: i64,
        done: &mut UpkeepRecord,
        report: &mut UpkeepReport,
    ) -> Result<u64, StorageError> {
        let store = self.store.as_ref();
        let mut left = true;
        let (mut log_start, mut trimmed) = (0, false);
        for _ in 0..PARTITION_STEPS {
            let r = retain(store, topic, partition, now, self.config.default_retention_ms).await?;
            done.segments_expired += r.segments_expired as u64;
            done.bytes_expired += r.bytes_expired;
            report.index_items_removed += r.items_removed;
            log_start = r.log_start;
            trimmed |= r.items_removed > 0;
            if !r.more {
                left = false;
                break;
            }
        }
        if trimmed {
            crate::log::timeindex::trim(store, topic.id, partition, log_start).await?;
        }
        report.partitions_left |= left;
        Ok(log_start)
    }

    /// Retention, then compaction, of one partition, within [`PARTITION_STEPS`] each.
    async fn keep(
        &self,
        topic: &crate::TopicConfig,
        partition: u32,
        now: i64,
        done: &mut UpkeepRecord,
        report: &mut UpkeepReport,
    ) -> Result<(), StorageError> {
        let store = self.store.as_ref();
        let log_start = self.retain_partition(topic, partition, now, done, report).await?;
        let mut left = true;
        let how = Rewriting {
            target_bytes: self.config.compaction_target_bytes,
            part_bytes: self.config.part_bytes,
            settle: self.config.settle_commit_segments,
            pacer: self.pacer.as_deref(),
        };
        for _ in 0..PARTITION_STEPS {
            let c = compact(store, self.objects.as_ref(), topic, partition, now, how).await?;
            done.segments_merged += c.segments_merged as u64;
            done.segments_written += c.segments_written as u64;
            if !c.more {
                left = false;
                break;
            }
        }
        report.partitions_left |= left;
        // Settled segments (compaction will not merge them again) join the time index.
        let settled = self.config.compaction_target_bytes / 2;
        crate::log::timeindex::extend(store, topic, partition, log_start, settled).await?;
        Ok(())
    }

    /// A round: steps through one whole pass over every topic, and until nothing is left
    /// (or `MAX_STEPS_PER_ROUND`); answers what they did together.
    pub async fn run(&self, budget: usize) -> Result<UpkeepReport, StorageError> {
        let mut total = UpkeepReport::default();
        let mut pass = Pass::Local(Cursor::default());
        for _ in 0..MAX_STEPS_PER_ROUND {
            let report = self.step_from(&mut pass, budget).await?;
            total.add(&report);
            if !report.more() {
                break;
            }
        }
        Ok(total)
    }

    /// Steps (resuming the stored pass, as [`Janitor::step`]) until nothing is left to do or
    /// the clock reaches `deadline_ms`: a scheduled run that must end in time (the janitor
    /// function). Whatever is left, the next run continues.
    pub async fn run_until(&self, deadline_ms: i64, budget: usize) -> Result<UpkeepReport, StorageError> {
        let mut total = UpkeepReport::default();
        loop {
            let report = self.step(budget).await?;
            total.add(&report);
            if !report.more() || self.clock.now_ms() >= deadline_ms {
                return Ok(total);
            }
        }
    }
}
