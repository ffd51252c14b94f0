//! The consumer group's operations: members' polls, commits and leaves, and the admin's
//! describes, seeks and deletes.

use std::collections::BTreeSet;

use sluice_core::groups::{CommitOffset, Groups, PollRequest, ResetPolicy, SeekTarget, TopicPartition};
use sluice_core::{Clock, Code, Error};

use crate::model::CommitSeen;
use crate::world::{code, uncertain, Act, Done, Kind, Member, Res, World, GROUP, T0, TOPIC_A};

impl World {
    pub(crate) fn start_group_admin(&mut self, c: usize, groups: Groups) {
        match self.rng.weighted(&[6, 2, 1]) {
            0 => self.spawn(c, Act::GDescribe, None, async move { Res::GDescribe(groups.describe(GROUP).await) }),
            1 => {
                let target = match self.rng.below(3) {
                    0 => SeekTarget::Earliest,
                    1 => SeekTarget::Offset(self.rng.below(40)),
                    _ => SeekTarget::Timestamp(self.clock.now_ms() - self.rng.range(0, 60_000)),
                };
                self.group.touch += 1;
                self.group.seeks_in_flight += 1;
                self.spawn(c, Act::Seek { target }, None, async move {
                    Res::Seek(groups.seek(GROUP, TOPIC_A, None, target).await)
                })
            }
            _ => {
                self.group.touch += 1;
                self.group.deletes_in_flight += 1;
                self.spawn(c, Act::GDelete, None, async move { Res::Unit(groups.delete(GROUP).await) })
            }
        }
    }

    pub(crate) fn start_member(&mut self, c: usize, m: &mut Member, groups: Groups) {
        let choice = self.rng.weighted(&[70, 20, 4, 3]);
        match (choice, &m.id) {
            (1, Some(id)) => {
                let mut offsets: Vec<(u32, u64)> = m
                    .assignment
                    .iter()
                    .filter_map(|tp| m.delivered_max.get(&tp.partition).map(|o| (tp.partition, o + 1)))
                    .collect();
                let mut generation = m.generation;
                if self.rng.chance(0.1) && generation > 0 {
                    generation -= 1;
                }
                if self.rng.chance(0.1) {
                    // A partition it may not own (any more).
                    let p = self.rng.below(u64::from(self.topic_specs[TOPIC_A].partitions)) as u32;
                    if let Some(o) = m.delivered_max.get(&p) {
                        if offsets.iter().all(|(q, _)| *q != p) {
                            offsets.push((p, o + 1));
                        }
                    }
                }
                if offsets.is_empty() {
                    return self.poll(c, m, groups);
                }
                let commits: Vec<CommitOffset> = offsets
                    .iter()
                    .map(|&(partition, offset)| CommitOffset {
                        topic: TOPIC_A.into(),
                        partition,
                        offset,
                        metadata: None,
                    })
                    .collect();
                let member = id.clone();
                let act = Act::Commit { generation, offsets, member: member.clone() };
                let snap = self.group_snap(&member);
                self.commit_snaps.insert(self.seq + 1, snap);
                self.spawn(c, act, None, async move {
                    Res::Unit(groups.commit(GROUP, &member, generation, &commits).await)
                });
            }
            (2, Some(id)) => {
                let member = id.clone();
                self.spawn(c, Act::Leave { member: member.clone() }, None, async move {
                    Res::Unit(groups.leave(GROUP, &member).await)
                });
            }
            (3, Some(id)) => {
                // Dies: never heard from again; its session runs out.
                self.trace.line(format!("step {} c{c} member {id} dies", self.step));
                m.id = None;
                m.assignment.clear();
            }
            _ => self.poll(c, m, groups),
        }
    }

    pub(crate) fn poll(&mut self, c: usize, m: &mut Member, groups: Groups) {
        let auto_commit = m.auto && self.rng.chance(0.7);
        let req = PollRequest {
            group: GROUP.into(),
            member_id: m.id.clone(),
            topics: vec![TOPIC_A.into()],
            max_events: self.rng.range(1, 8) as usize,
            max_bytes: 1 << 20,
            wait_ms: self.long_wait(c, 0.3, 2000),
            reset: ResetPolicy::Earliest,
            session_timeout_ms: Some(m.session),
            auto_commit,
            instance_id: m.instance.clone(),
            positions: m.keeps_positions.then(|| {
                m.delivered_max
                    .iter()
                    .map(|(p, o)| (TopicPartition { topic: TOPIC_A.into(), partition: *p }, o + 1))
                    .collect()
            }),
        };
        self.spawn(c, Act::Poll { auto_commit }, None, async move { Res::Poll(groups.poll(&req).await) });
    }

    pub(crate) fn member_mut(&mut self, client: usize) -> &mut Member {
        match &mut self.clients[client].kind {
            Kind::Member(m) => m,
            _ => unreachable!("a member op of a non-member"),
        }
    }

    pub(crate) fn on_poll(&mut self, d: &Done, _auto_commit: bool) {
        let end_ms = d.end_ms;
        let partitions = self.topic_specs[TOPIC_A].partitions;
        let r = match &d.res {
            Res::Poll(r) => r,
            _ => {
                // Its heartbeat may have been written until now.
                let m = self.member_mut(d.client);
                m.last_poll_end_ms = end_ms;
                if !m.keeps_positions {
                    self.group.lossy_polls += 1;
                }
                return;
            }
        };
        match r {
            Ok(a) => {
                self.stat("polls");
                let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                for tp in &a.assignment {
                    if tp.topic != TOPIC_A || tp.partition >= partitions {
                        self.violate("poll-answer", format!("assigned {tp:?}"));
                    }
                }
                for e in &a.events {
                    if !a.assignment.iter().any(|tp| tp.partition == e.event.partition) {
                        self.violate(
                            "poll-owned",
                            format!("event of {}/{} not assigned to {}", e.topic, e.event.partition, a.member_id),
                        );
                    }
                    self.check_event(TOPIC_A, tid, e.event.partition, e.event.offset, &e.event.record, "poll");
                    self.group.delivered.entry(e.event.partition).or_default().insert(e.event.offset);
                }
                self.group.max_generation = self.group.max_generation.max(a.generation);
                self.group.max_generation_history.push((d.start_seq, d.end_seq, a.generation));
                // A stable instance id rejoins under the same member id after it left.
                self.group.left.remove(&a.member_id);
                self.group.assignments.insert((a.member_id.clone(), a.generation), a.assignment.clone());
                let m = self.member_mut(d.client);
                if m.id.as_ref() != Some(&a.member_id) {
                    m.delivered_max.clear();
                }
                m.id = Some(a.member_id.clone());
                m.generation = a.generation;
                m.assignment = a.assignment.clone();
                m.last_poll_end_ms = end_ms;
                for e in &a.events {
                    let x = m.delivered_max.entry(e.event.partition).or_insert(0);
                    *x = (*x).max(e.event.offset);
                }
            }
            Err(Error::Conflict { code: Code::UnknownMember, .. }) => {
                let m = self.member_mut(d.client);
                m.id = None;
                m.assignment.clear();
            }
            Err(Error::OffsetOutOfRange { offset, log_start_offset, high_watermark }) => {
                self.violate(
                    "transient-416",
                    format!("poll with reset earliest: 416 for {offset} ({log_start_offset}..={high_watermark})"),
                );
            }
            Err(e) if uncertain(e) => {
                let m = self.member_mut(d.client);
                m.last_poll_end_ms = end_ms;
                if !m.keeps_positions {
                    self.group.lossy_polls += 1;
                }
            }
            Err(e) => {
                let c = code(e);
                if !c.contains("busy") {
                    self.violate("poll-refused", c);
                }
            }
        }
    }

    pub(crate) fn on_commit(&mut self, d: &Done, generation: u64, offsets: &[(u32, u64)], member: &str) {
        self.check_commit_refusal(d, generation, offsets, member);
        let Res::Unit(r) = &d.res else { return };
        match r {
            Ok(()) => {
                self.stat("commits_ok");
                let mut problems = Vec::new();
                // Generations and leaves known before the commit began.
                let floor = self.group.max_generation_at(d.start_seq);
                let reset_during =
                    self.group.resets.iter().any(|r| *r > d.start_seq) || self.group.deletes_in_flight > 0;
                if generation < floor && !reset_during {
                    problems.push(format!("generation {generation} < {floor} answered before it"));
                }
                match self.group.assignments.get(&(member.to_owned(), generation)) {
                    Some(a) => {
                        for (p, _) in offsets {
                            if !a.iter().any(|tp| tp.partition == *p) {
                                problems.push(format!("partition {p} not assigned to {member} in {generation}"));
                            }
                        }
                    }
                    None => problems.push(format!("no answer gave {member} generation {generation}")),
                }
                if self.group.left.get(member).is_some_and(|s| *s < d.start_seq) {
                    problems.push(format!("{member} had left"));
                }
                let m = self.member_mut(d.client);
                let expired_at = m.last_poll_end_ms + m.session as i64;
                if d.start_ms > expired_at {
                    problems.push(format!("{member}'s session ended at {}", expired_at - T0));
                }
                if !problems.is_empty() {
                    self.violate("fenced-commit", format!("commit by {member}: {}", problems.join("; ")));
                }
                let durable = self.mem.durable_count();
                for &(p, v) in offsets {
                    self.check_coverage(p, v, &format!("commit by {member}"));
                    // A seek or delete that began after this commit did may have applied before it.
                    let seen =
                        CommitSeen { value: v, member: member.to_owned(), end: d.end_seq, touch: d.touch0, durable };
                    self.group.commits_ok.entry(p).or_default().push(seen);
                }
            }
            Err(e) if uncertain(e) => {}
            Err(Error::Conflict { .. } | Error::GroupNotFound(_)) => self.stat("commits_fenced"),
            Err(e) => self.violate("commit-refused", code(e)),
        }
    }

    pub(crate) fn on_leave(&mut self, d: &Done, member: &str) {
        if let Res::Unit(Ok(())) = &d.res {
            self.group.left.insert(member.to_owned(), d.end_seq);
        }
        let m = self.member_mut(d.client);
        if !matches!(&d.res, Res::Unit(Err(e)) if uncertain(e)) {
            m.id = None;
            m.assignment.clear();
        }
    }

    pub(crate) fn on_seek(&mut self, d: &Done) {
        self.group.touch += 1;
        self.group.seeks_in_flight -= 1;
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        match &d.res {
            Res::Seek(Ok(moved)) => {
                for (p, x) in moved {
                    let e = self.group.excused_below.entry(*p).or_insert(0);
                    *e = (*e).max(*x);
                }
            }
            _ => {
                // Perhaps moved, to somewhere below the head.
                for p in 0..self.topic_specs[TOPIC_A].partitions {
                    let next = self.head_now(tid, p).next;
                    let e = self.group.excused_below.entry(p).or_insert(0);
                    *e = (*e).max(next);
                }
            }
        }
    }

    pub(crate) fn on_gdescribe(&mut self, d: &Done) {
        let Res::GDescribe(Ok(g)) = &d.res else { return };
        let strict =
            d.touch0 == self.group.touch && self.group.seeks_in_flight == 0 && self.group.deletes_in_flight == 0;
        let parts: Vec<(u32, Option<u64>)> =
            g.partitions.iter().filter(|p| p.topic == TOPIC_A).map(|p| (p.partition, p.committed)).collect();
        for (p, committed) in parts {
            let c = committed.unwrap_or(0);
            if committed.is_some() {
                self.check_coverage(p, c, "describe");
            }
            if !strict {
                self.group.last_seen.remove(&p);
                continue;
            }
            if let Some(&(prev, touch)) = self.group.last_seen.get(&p) {
                if touch == self.group.touch && c < prev {
                    self.violate(
                        "commit-regressed",
                        format!("partition {p}: committed {c} after {prev}, no seek between"),
                    );
                }
            }
            self.group.last_seen.insert(p, (c, self.group.touch));
            let lost: Vec<(u64, String)> = self
                .group
                .commits_ok
                .get(&p)
                .into_iter()
                .flatten()
                .filter(|s| s.end < d.start_seq && s.touch == self.group.touch && s.value > c)
                .map(|s| (s.value, s.member.clone()))
                .collect();
            if let Some((v, m)) = lost.first() {
                self.violate(
                    "commit-lost",
                    format!("partition {p}: committed {c}, but {m}'s commit of {v} was answered ok"),
                );
            }
        }
    }

    pub(crate) fn on_gdelete(&mut self, d: &Done) {
        self.group.touch += 1;
        self.group.deletes_in_flight -= 1;
        if matches!(&d.res, Res::Crashed) || matches!(&d.res, Res::Unit(Err(e)) if uncertain(e)) {
            // Perhaps deleted: generations may start again.
            self.group.resets.push(d.end_seq);
        }
        if let Res::Unit(Ok(())) = &d.res {
            self.stat("group_deletes");
            self.group.resets.push(d.end_seq);
            // Commits answered while the delete ran, by members still live: they joined after the
            // delete took effect (it refuses a group with live members), so they must survive it.
            let now = self.clock.now_ms();
            let live: BTreeSet<String> = self
                .clients
                .iter()
                .filter_map(|c| match &c.kind {
                    Kind::Member(m) if m.last_poll_end_ms + m.session as i64 > now => m.id.clone(),
                    _ => None,
                })
                .collect();
            let touch = self.group.touch;
            let start = d.start_seq;
            for list in self.group.commits_ok.values_mut() {
                for c in list.iter_mut() {
                    if c.end > start && live.contains(&c.member) && !self.group.left.contains_key(&c.member) {
                        c.touch = touch;
                    }
                }
            }
            self.group.last_seen.clear();
        }
    }
}
