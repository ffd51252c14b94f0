//! The end, once all is quiet and drained: every describe's counts equal the stored truth's,
//! and fresh group members read every offset.

use std::collections::BTreeMap;

use sluice_core::groups::{Groups, PollRequest, ResetPolicy, TopicPartition};
use sluice_core::queues::{Backlog, Queues};
use sluice_core::Log;

use crate::world::{code, World, GROUP, SUB_Q, SUB_QK, TOPIC_A, TOPIC_B};

/// A group used by nobody before the end.
const FRESH_GROUP: &str = "fresh";

impl World {
    /// Topic, subscription and group describes of a quiet world against the stored heads:
    /// the log start, high watermark and bytes of each partition, a drained queue's cursors,
    /// a group's lag.
    pub(crate) async fn check_quiet_describes(&mut self, log: &Log, queues: &Queues, groups: &Groups) {
        let mut problems = Vec::new();
        for name in [TOPIC_A, TOPIC_B] {
            let Some(tid) = self.live_topic_id(name) else { continue };
            match log.describe_topic(name).await {
                Ok((_, parts)) => {
                    for s in parts {
                        let head = self.head_now(tid, s.partition);
                        let got = (s.log_start_offset, s.high_watermark, s.bytes);
                        if got != (head.start, head.next, head.bytes) {
                            problems.push(format!("{name}/{}: described {got:?}, stored {head:?}", s.partition));
                        }
                    }
                }
                Err(e) => problems.push(format!("describe {name}: {}", code(&e))),
            }
        }
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        for sub in [SUB_Q, SUB_QK] {
            let Ok(d) = queues.describe(TOPIC_A, sub).await else { continue };
            let counts = |b: &Backlog| [b.visible, b.in_flight, b.delayed, b.dead, b.expired, b.filtered];
            let mut sum = [0u64; 6];
            for p in &d.partitions {
                let head = self.head_now(tid, p.partition);
                if (p.high_watermark, p.cursor) != (head.next, head.next) {
                    problems.push(format!(
                        "{sub}/{}: drained, described cursor {} and high watermark {}, stored head {}",
                        p.partition, p.cursor, p.high_watermark, head.next
                    ));
                }
                for (total, n) in sum.iter_mut().zip(counts(&p.backlog)) {
                    *total += n;
                }
            }
            if sum != counts(&d.backlog) {
                problems.push(format!(
                    "{sub}: partitions add up to {:?}, the total says {:?}",
                    sum,
                    counts(&d.backlog)
                ));
            }
        }
        if let Ok(g) = groups.describe(GROUP).await {
            for part in g.partitions.iter().filter(|p| p.topic == TOPIC_A) {
                let head = self.head_now(tid, part.partition);
                let lag = head.next - part.committed.unwrap_or(0).max(head.start);
                let got = (part.log_start_offset, part.high_watermark, part.lag);
                if got != (head.start, head.next, lag) {
                    problems.push(format!(
                        "group {}: described (start, high watermark, lag) {got:?}, stored {:?} committed {:?}",
                        part.partition,
                        (head.start, head.next, lag),
                        part.committed
                    ));
                }
            }
        }
        if !problems.is_empty() {
            problems.truncate(4);
            self.violate("describe-quiet", problems.join("; "));
        }
    }

    /// Once every member's session is over: a member of a group never used reads every offset
    /// from the log start, and a fresh member of GROUP every offset from its committed ones,
    /// each once, in order, up to the head.
    pub(crate) async fn check_fresh_members(&mut self, groups: &Groups) {
        let Some(tid) = self.live_topic_id(TOPIC_A) else { return };
        let committed: BTreeMap<u32, u64> = match groups.describe(GROUP).await {
            Ok(g) => g.partitions.iter().filter_map(|p| Some((p.partition, p.committed?))).collect(),
            Err(_) => BTreeMap::new(),
        };
        self.clock.advance(13_000);
        for group in [FRESH_GROUP, GROUP] {
            let from = |p: u32| if group == GROUP { committed.get(&p).copied() } else { None };
            let mut want: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            for p in 0..self.topic_specs[TOPIC_A].partitions {
                let head = self.head_now(tid, p);
                let first = from(p).unwrap_or(head.start).max(head.start);
                want.insert(p, (first..head.next).collect());
            }
            want.retain(|_, os| !os.is_empty());
            let got = self.read_all_as_fresh(groups, group, tid).await;
            if got != want {
                let differ: Vec<String> = want
                    .iter()
                    .filter(|(p, w)| got.get(p) != Some(w))
                    .map(|(p, w)| {
                        format!(
                            "{p}: wanted {} from {:?}, read {:?}",
                            w.len(),
                            w.first(),
                            got.get(p).map(|g| (g.len(), g.first()))
                        )
                    })
                    .collect();
                self.violate("fresh-member-reads-all", format!("group {group}: {}", differ.join("; ")));
            }
        }
    }

    /// The offsets a lone fresh member of `group` reads, by partition, polling until it
    /// reads nothing more.
    async fn read_all_as_fresh(&mut self, groups: &Groups, group: &str, tid: u64) -> BTreeMap<u32, Vec<u64>> {
        let mut got: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut member: Option<String> = None;
        for _ in 0..500 {
            let positions = got
                .iter()
                .filter_map(|(p, os)| Some((TopicPartition { topic: TOPIC_A.into(), partition: *p }, os.last()? + 1)))
                .collect();
            let req = PollRequest {
                group: group.into(),
                member_id: member.clone(),
                topics: vec![TOPIC_A.into()],
                max_events: 50,
                max_bytes: 1 << 20,
                wait_ms: 0,
                reset: ResetPolicy::Earliest,
                session_timeout_ms: Some(60_000),
                auto_commit: false,
                instance_id: None,
                positions: Some(positions),
            };
            match groups.poll(&req).await {
                Ok(a) => {
                    let joined = member.replace(a.member_id.clone()).is_none();
                    if a.events.is_empty() && !joined {
                        break;
                    }
                    for e in &a.events {
                        let (p, o) = (e.event.partition, e.event.offset);
                        self.check_event(TOPIC_A, tid, p, o, &e.event.record, "fresh member");
                        got.entry(p).or_default().push(o);
                    }
                }
                Err(e) => {
                    self.violate("fresh-member-reads-all", format!("group {group}: poll {}", code(&e)));
                    break;
                }
            }
        }
        got.retain(|_, os| !os.is_empty());
        got
    }
}
