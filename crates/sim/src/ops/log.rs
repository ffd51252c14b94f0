//! The log's operations: publish, replay, offset by time, and the topic admin.

use std::collections::BTreeMap;

use bytes::Bytes;
use sluice_core::groups::Groups;
use sluice_core::layout::HeadRecord;
use sluice_core::queues::Queues;
use sluice_core::{Clock, Error, IdempotencyKey, Log, NewEvent, OffsetQuery, Position, ReadRequest};

use crate::model::{EventInfo, Request};
use crate::world::{code, uncertain, Act, Done, Kind, Res, World, TOPIC_B};

impl World {
    /// A publisher's next request (or its retry), with the model's events stamped for it.
    pub(crate) fn start_publish(
        &mut self,
        c: usize,
        topic: &'static str,
        style: u8,
        retry: Option<u64>,
        log: Log,
    ) -> u64 {
        let req = match retry {
            Some(req) => req,
            None => self.new_request(topic, style),
        };
        let now = self.clock.now_ms();
        let mut events = Vec::new();
        for e in self.requests[&req].events.clone() {
            let i = &self.events[&e];
            let mut event = NewEvent {
                key: i.key.clone(),
                headers: Vec::new(),
                value: i.value.clone(),
                value_is_json: true,
                timestamp_ms: i.ts.filter(|_| i.ts_window.0 == i64::MIN),
                partition: i.partition.filter(|_| i.key.is_none()),
            };
            self.stamp_sched(e, &mut event, now);
            events.push(event);
        }
        let r = &self.requests[&req];
        let idem = r.idem.clone().map(|key| IdempotencyKey { fingerprint: key.as_bytes().to_vec(), key });
        for e in &r.events.clone() {
            let info = self.events.get_mut(e).unwrap();
            if info.ts_window.0 != i64::MIN {
                // Stamped by the log at publish: somewhere in this attempt's window.
                info.ts_window.0 = info.ts_window.0.min(now);
                info.ts_window.1 = i64::MAX;
            }
        }
        let floor = self.acked_max.clone();
        self.requests.get_mut(&req).unwrap().floor = floor;
        self.spawn(c, Act::Publish { topic, req }, Some(topic), async move {
            Res::Publish(log.publish(topic, events, idem).await)
        });
        req
    }

    pub(crate) fn start_read(&mut self, c: usize, topic: &'static str, cursors: &mut [u64], log: Log) {
        let partition = self.rng.below(u64::from(self.topic_specs[topic].partitions)) as u32;
        if self.rng.chance(0.05) {
            cursors[partition as usize] = 0;
        }
        let offset = cursors[partition as usize];
        let wait_ms = self.long_wait(c, 0.2, 1000);
        let req = ReadRequest {
            topic: topic.to_owned(),
            partition,
            offset,
            max_events: self.rng.range(1, 20) as usize,
            max_bytes: if self.rng.chance(0.2) { self.rng.range(1, 2000) as usize } else { 1 << 20 },
            wait_ms,
        };
        self.spawn(
            c,
            Act::Read { topic, partition, offset },
            Some(topic),
            async move { Res::Read(log.read(&req).await) },
        );
    }

    pub(crate) fn start_lookup(&mut self, c: usize, topic: &'static str, log: Log) {
        let partition = self.rng.below(u64::from(self.topic_specs[topic].partitions)) as u32;
        let tid = self.live_topic_id(topic).unwrap_or(0);
        let known: Vec<i64> = self
            .facts
            .range((tid, partition, 0)..(tid, partition, u64::MAX))
            .filter_map(|(_, e)| self.event_ts(*e))
            .collect();
        let ts = if known.is_empty() || self.rng.chance(0.2) {
            self.clock.now_ms() - self.rng.range(-2000, 60_000)
        } else {
            *self.rng.pick(&known) + self.rng.range(-1, 1)
        };
        let head0 = self.head_now(tid, partition);
        self.spawn(c, Act::Lookup { topic, partition, ts, head0 }, Some(topic), async move {
            Res::Lookup(log.offset(topic, partition, OffsetQuery::Timestamp(ts)).await)
        });
    }

    pub(crate) fn start_topic_admin(&mut self, c: usize, log: Log, groups: Groups, queues: Queues) {
        if self.rng.chance(0.25) {
            self.start_busy_delete(c, log, groups, queues)
        } else if self.rng.chance(0.5) {
            self.spawn(c, Act::TopicDelete { topic: TOPIC_B }, Some(TOPIC_B), async move {
                Res::Unit(log.delete_topic(TOPIC_B).await)
            })
        } else {
            let spec = self.topic_specs[TOPIC_B];
            self.spawn(c, Act::TopicCreate { topic: TOPIC_B }, Some(TOPIC_B), async move {
                Res::TopicCreate(log.create_topic(TOPIC_B, spec).await)
            })
        }
    }

    pub(crate) fn on_topic_create(&mut self, d: &Done, topic: &'static str) {
        if let Res::TopicCreate(Ok((t, _))) = &d.res {
            self.topic_ids.entry(topic).or_default().insert(t.id);
        }
    }

    pub(crate) fn new_request(&mut self, topic: &'static str, style: u8) -> u64 {
        self.next_req += 1;
        let req = self.next_req;
        let n = self.rng.range(1, 4);
        let (plan, bulk) = self.draw_plan(topic);
        let n = bulk.map_or(n, |b| b as i64);
        let partitions = self.topic_specs[topic].partitions;
        let mut ids = Vec::new();
        let explicit = self.rng.chance(0.1).then(|| self.rng.below(u64::from(partitions)) as u32);
        for _ in 0..n {
            self.next_event += 1;
            let e = self.next_event;
            let keyed = match style {
                0 => false,
                1 => true,
                _ => self.rng.chance(0.5),
            };
            let key = keyed.then(|| Bytes::from(format!("k{}", self.rng.below(5))));
            let partition = match &key {
                Some(k) => Some(sluice_core::partitioner::partition_for_key(k, partitions)),
                None => explicit,
            };
            let pad = "x".repeat(self.rng.below(200) as usize);
            let value = Bytes::from(format!("{{\"e\":{e},\"pad\":\"{pad}\"}}"));
            let explicit_ts = self.rng.chance(0.3).then(|| self.clock.now_ms() + self.rng.range(-20_000, 5000));
            let ts_window = if explicit_ts.is_some() { (i64::MIN, i64::MIN) } else { (i64::MAX, i64::MAX) };
            let sched = self.draw_sched(plan, explicit_ts.is_some());
            self.events.insert(
                e,
                EventInfo {
                    topic,
                    key,
                    ts: explicit_ts,
                    ts_window,
                    value,
                    partition,
                    idempotent: style == 2,
                    refused: false,
                    sched,
                },
            );
            ids.push(e);
        }
        // Unkeyed events of one request share a partition, whichever it is.
        let idem = (style == 2).then(|| format!("r{req}"));
        self.requests
            .insert(req, Request { events: ids, idem, first_answer: None, uncertain: false, floor: BTreeMap::new() });
        req
    }

    pub(crate) fn on_publish(&mut self, d: &Done, topic: &'static str, req: u64) {
        let tid = self.known_topic(d, topic);
        let r = match &d.res {
            Res::Publish(r) => r,
            _ => return self.publish_uncertain(d.client, req, d.end_ms),
        };
        match r {
            Ok(positions) => self.on_publish_ok(d, topic, req, tid, positions),
            Err(e) if uncertain(e) => self.publish_uncertain(d.client, req, d.end_ms),
            Err(Error::TopicNotFound(_)) if topic == TOPIC_B => {
                self.stat("publishes_404");
                self.refuse(req);
                self.finish_request(d.client, req, d.end_ms);
            }
            Err(e) => {
                self.violate("publish-refused", format!("request {req}: {}", code(e)));
                self.refuse(req);
                self.finish_request(d.client, req, d.end_ms);
            }
        }
    }

    /// A publish answered ok: as many positions as events, the same as any earlier answer of
    /// the request, where its events may land, and in the model from now on.
    fn on_publish_ok(&mut self, d: &Done, topic: &'static str, req: u64, tid: Option<u64>, positions: &[Position]) {
        self.stat("publishes_acked");
        let request = &self.requests[&req];
        let events = request.events.clone();
        if positions.len() != events.len() {
            return self.violate(
                "publish-answer",
                format!("request {req}: {} results for {} events", positions.len(), events.len()),
            );
        }
        if let Some((first_tid, first)) = &request.first_answer {
            if Some(*first_tid) == tid && first != positions {
                self.violate("idempotent-once", format!("request {req} answered {positions:?}, first {first:?}"));
            }
        }
        let last = self.check_landing(req, &events, positions);
        self.record_acked(topic, req, tid, &events, positions, &last);
        self.finish_request(d.client, req, d.end_ms);
    }

    /// Where the events landed: per partition consecutive, in request order, after every
    /// offset acknowledged before this request began.
    fn check_landing(&mut self, req: u64, events: &[u64], positions: &[Position]) -> BTreeMap<u32, u64> {
        let mut last: BTreeMap<u32, u64> = BTreeMap::new();
        let mut unkeyed: Option<u32> = None;
        for (e, pos) in events.iter().zip(positions) {
            let info = &self.events[e];
            if let Some(want) = info.partition {
                if want != pos.partition {
                    self.violate("publish-answer", format!("event {e} landed on {} not {want}", pos.partition));
                }
            } else if info.key.is_none() {
                if unkeyed.is_some_and(|u| u != pos.partition) {
                    self.violate("publish-answer", format!("request {req}: unkeyed events on two partitions"));
                }
                unkeyed = Some(pos.partition);
            }
            if let Some(prev) = last.get(&pos.partition) {
                if pos.offset != prev + 1 {
                    self.violate(
                        "publish-answer",
                        format!("request {req}: offsets {prev} then {} on {}", pos.offset, pos.partition),
                    );
                }
            }
            last.insert(pos.partition, pos.offset);
        }
        last
    }

    /// The acked events into the model (facts, placements, the highest offsets acked), checked
    /// against what it knew: a fresh request lands after every offset acked before it began.
    fn record_acked(
        &mut self,
        topic: &'static str,
        req: u64,
        tid: Option<u64>,
        events: &[u64],
        positions: &[Position],
        last: &BTreeMap<u32, u64>,
    ) {
        let fresh = self.requests[&req].first_answer.is_none() && !self.requests[&req].uncertain;
        if let Some(tid) = tid {
            if fresh {
                for (p, o) in positions.iter().map(|p| (p.partition, p.offset)) {
                    // Commit order: after every offset acknowledged before this request began.
                    if let Some(&max) = self.requests[&req].floor.get(&(tid, p)) {
                        if o <= max {
                            self.violate(
                                "commit-order",
                                format!("{topic}/{p}: request {req} got {o}, after {max} was acked"),
                            );
                        }
                    }
                }
            }
            for (e, pos) in events.iter().zip(positions) {
                self.acked.insert((tid, pos.partition, pos.offset), *e);
                match self.facts.get(&(tid, pos.partition, pos.offset)) {
                    Some(other) if other != e => self.violate(
                        "offset-unique",
                        format!("{topic}/{}@{}: acked for event {e}, held {other}", pos.partition, pos.offset),
                    ),
                    _ => {
                        self.facts.insert((tid, pos.partition, pos.offset), *e);
                    }
                }
                match self.placed.get(&(tid, *e)) {
                    Some(&(p2, o2)) if (p2, o2) != (pos.partition, pos.offset) => {
                        let property = if self.events[e].idempotent { "idempotent-once" } else { "event-once" };
                        self.violate(
                            property,
                            format!("event {e} acked at {}@{}, seen at {p2}@{o2}", pos.partition, pos.offset),
                        );
                    }
                    _ => {
                        self.placed.insert((tid, *e), (pos.partition, pos.offset));
                    }
                }
            }
            for (p, o) in last {
                let m = self.acked_max.entry((tid, *p)).or_insert(0);
                *m = (*m).max(*o);
            }
            let request = self.requests.get_mut(&req).unwrap();
            request.first_answer.get_or_insert((tid, positions.to_vec()));
        }
    }

    pub(crate) fn refuse(&mut self, req: u64) {
        // A refusal is final only for a request no attempt of which may have landed before.
        let request = &self.requests[&req];
        if request.first_answer.is_some() || request.uncertain {
            return;
        }
        for e in request.events.clone() {
            self.events.get_mut(&e).unwrap().refused = true;
        }
    }

    pub(crate) fn finish_request(&mut self, client: usize, req: u64, end_ms: i64) {
        for e in self.requests[&req].events.clone() {
            let i = self.events.get_mut(&e).unwrap();
            if i.ts_window.0 != i64::MIN {
                i.ts_window.1 = end_ms;
            }
        }
        if let Kind::Publisher { retry, .. } = &mut self.clients[client].kind {
            *retry = None;
        }
    }

    /// A publish that may or may not have landed: an idempotent one is retried with the same
    /// key (it must then land once); any other is given up (its events may appear, once).
    pub(crate) fn publish_uncertain(&mut self, client: usize, req: u64, end_ms: i64) {
        self.stat("publishes_uncertain");
        self.requests.get_mut(&req).unwrap().uncertain = true;
        for e in self.requests[&req].events.clone() {
            let i = self.events.get_mut(&e).unwrap();
            if i.ts_window.0 != i64::MIN {
                i.ts_window.1 = end_ms;
            }
        }
        if self.requests[&req].idem.is_none() {
            if let Kind::Publisher { retry, .. } = &mut self.clients[client].kind {
                *retry = None;
            }
        }
    }

    pub(crate) fn on_read(&mut self, d: &Done, topic: &'static str, partition: u32, offset: u64) {
        let Res::Read(r) = &d.res else { return };
        let tid = self.known_topic(d, topic);
        let mut cursor = offset;
        match r {
            Ok(batch) => {
                self.stat("reads");
                for (i, e) in batch.events.iter().enumerate() {
                    if e.offset != offset + i as u64 || e.partition != partition {
                        return self.violate(
                            "replay-dense",
                            format!("{topic}/{partition} from {offset}: event {i} at {}/{}", e.partition, e.offset),
                        );
                    }
                }
                if let Some(tid) = tid {
                    for e in &batch.events {
                        self.check_event(topic, tid, partition, e.offset, &e.record, "replay");
                    }
                }
                if batch.next_offset < offset + batch.events.len() as u64 {
                    self.violate(
                        "replay-dense",
                        format!(
                            "{topic}/{partition}: next {} after {} events from {offset}",
                            batch.next_offset,
                            batch.events.len()
                        ),
                    );
                }
                cursor = batch.next_offset;
            }
            Err(Error::OffsetOutOfRange { offset: o, log_start_offset, high_watermark }) => {
                if (*log_start_offset..=*high_watermark).contains(o) {
                    self.violate(
                        "transient-416",
                        format!("replay {topic}/{partition}@{o}: 416 naming {log_start_offset}..={high_watermark}"),
                    );
                }
                cursor = if offset < *log_start_offset { *log_start_offset } else { 0 };
            }
            Err(Error::Corrupt(m)) => self.violate("replay-corrupt", format!("{topic}/{partition}@{offset}: {m}")),
            Err(e) if uncertain(e) => {}
            Err(Error::TopicNotFound(_)) if topic == TOPIC_B => cursor = 0,
            Err(e) => self.violate("replay-refused", format!("{topic}/{partition}@{offset}: {}", code(e))),
        }
        if let Kind::Replayer { cursors, .. } = &mut self.clients[d.client].kind {
            cursors[partition as usize] = cursor;
        }
    }

    pub(crate) fn on_lookup(&mut self, d: &Done, topic: &'static str, partition: u32, ts: i64, head0: HeadRecord) {
        let Res::Lookup(r) = &d.res else { return };
        let Some(tid) = self.known_topic(d, topic) else { return };
        let answer = match r {
            Ok(o) => *o,
            Err(e) if uncertain(e) => return,
            Err(e) => return self.violate("offset-by-time", format!("{topic}/{partition} ts {ts}: {}", code(e))),
        };
        self.stat("lookups");
        let (head1, log) = self.true_log(tid, partition);
        let mut problems = Vec::new();
        if answer < head0.start {
            problems.push(format!("answer {answer} below the log start {}", head0.start));
        }
        if answer > head1.next {
            problems.push(format!("answer {answer} past the head {}", head1.next));
        }
        // Offsets present all along (at or above the start at the end, below the head at the start).
        let upto = answer.min(head0.next).max(head1.start);
        if let Some((o, r)) = log.range(head1.start..upto).find(|(_, r)| r.timestamp_ms >= ts) {
            problems.push(format!("skipped offset {o} (ts {}) on the way to {answer}", r.timestamp_ms));
        }
        if answer < head0.next && answer >= head1.start {
            if let Some(r) = log.get(&answer).filter(|r| r.timestamp_ms < ts) {
                problems.push(format!("answer {answer} has ts {} < {ts}", r.timestamp_ms));
            }
        }
        if !problems.is_empty() {
            self.violate(
                "offset-by-time",
                format!(
                    "{topic}/{partition} ts {ts} (head {}..{} then {}..{}): {}",
                    head0.start,
                    head0.next,
                    head1.start,
                    head1.next,
                    problems.join("; ")
                ),
            );
        }
    }
}
