//! `serve`'s schedule: a round every interval, and size retention on a cadence of its own.
//!
//! A round does everything (purges, retention, compaction, collection) and, under sustained
//! intake, most of its time goes to compaction's rewrites, now also held back while requests
//! keep coming ([`super::pace`]). Size retention cannot wait for it: at 20 MiB a second into
//! a partition bounded at 2 MiB, a partition visited once per round stood 25–40 × over its
//! bound (docs/PERFORMANCE.md, "Upkeep that yields to live traffic"). So between and during
//! rounds, [`Janitor::retain_bounds`] visits only the partitions whose head counts more than
//! their bound, and runs again at once while it removes something. Its writes are retention's
//! own (the head's conditional write, then the items'), so racing a round's retention or
//! compaction is the race two janitors already run safely (docs/DESIGN.md).

use crate::layout::UpkeepRecord;
use crate::log::topics;
use crate::upkeep::{Janitor, UpkeepReport, STEP_BUDGET};
use crate::StorageError;

/// Passes of [`Janitor::retain_bounds`] in a row that remove nothing while a partition stays
/// over its bound before the next waits for its interval.
const FRUITLESS_PASSES: u32 = 16;

impl Janitor {
    /// Retention, by both policies, of every partition whose head counts more bytes than its
    /// topic's `retention_bytes`, each in the bounded steps a round takes: one query of the
    /// topics, one of each bounded topic's heads, and nothing more for a partition within its
    /// bound. Partitions of topics without `retention_bytes` are left to the rounds.
    pub async fn retain_bounds(&self) -> Result<UpkeepReport, StorageError> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        let mut report = UpkeepReport::default();
        for topic in topics::list(store).await? {
            let Some(limit) = topic.spec.retention_bytes.map(|b| b.max(0) as u64) else { continue };
            let heads = topics::heads(store, &topic).await?;
            let mut changed = UpkeepRecord::default();
            for (partition, (head, _)) in (0u32..).zip(heads) {
                if head.bytes <= limit {
                    continue;
                }
                report.partitions_visited += 1;
                if let Err(e) = self.retain_partition(&topic, partition, now, &mut changed, &mut report).await {
                    tracing::warn!(topic = %topic.name, partition, error = %e, "retention failed");
                    report.partitions_failed += 1;
                }
            }
            self.account(&topic, changed, &mut report, now).await;
        }
        Ok(report)
    }

    /// `serve`'s background upkeep, forever: a round every `interval_ms` of the clock's time
    /// and, every `retention_interval_ms` (0: only in rounds), [`Janitor::retain_bounds`],
    /// again at once while it removes something. A failure is logged and retried at the next.
    pub async fn run_forever(self, interval_ms: u64, retention_interval_ms: u64) {
        if retention_interval_ms == 0 {
            self.rounds(interval_ms).await;
        } else {
            futures_util::future::join(self.rounds(interval_ms), self.hold_bounds(retention_interval_ms)).await;
        }
    }

    async fn rounds(&self, interval_ms: u64) {
        loop {
            self.clock.sleep(interval_ms).await;
            match self.run(STEP_BUDGET).await {
                Ok(report) => {
                    report.record();
                    if report.did_something() {
                        tracing::info!(?report, "janitor round");
                    }
                }
                Err(e) => {
                    UpkeepReport::record_failure();
                    tracing::warn!(error = %e, "janitor round failed; retrying next round");
                }
            }
        }
    }

    async fn hold_bounds(&self, interval_ms: u64) {
        loop {
            self.clock.sleep(interval_ms).await;
            let mut fruitless = 0;
            loop {
                match self.retain_bounds().await {
                    Ok(report) => {
                        report.record_work();
                        // Again at once while it removes something (intake may have passed the
                        // bound meanwhile); and while a partition is left with more to do, most
                        // often because commits moved its head between retention's read and its
                        // write, a bounded number of passes that remove nothing.
                        fruitless = if report.segments_expired > 0 { 0 } else { fruitless + 1 };
                        if fruitless > 0 && (!report.partitions_left || fruitless >= FRUITLESS_PASSES) {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "size retention failed; retrying at its next interval");
                        break;
                    }
                }
            }
        }
    }
}
