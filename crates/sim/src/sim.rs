//! The simulation: a world of processes (each its own `Log`, committer, caches, `Groups`,
//! `Queues` and `Janitor` over a faulty view of the shared in-memory stores), logical clients
//! that call into them, a scheduler that picks who acts next from the seed, and a checker
//! that holds every answer against a model of the promises in docs/API.md and docs/DESIGN.md.
//!
//! One step: the scheduler either starts an operation of an idle client (a task on the
//! single-threaded runtime), advances the manual clock, or crashes a process; then it lets
//! the runtime run a fixed number of turns, and checks every answer that arrived. Operations
//! span steps, so many are in flight at once, interleaved by the fault layer's yields. Every
//! few steps the checker also reads the stores directly (the ground truth: no faults) and
//! checks the log's invariants there. At the end the faults stop, everything in flight is
//! drained, the janitor runs to completion, queues are drained, and the end-state promises
//! are checked.

use std::fmt::Write as _;

use sluice_core::Clock;

use crate::fault::Fault;
use crate::world::{Act, Done, Inflight, Kind, Member, Res, World, SUB_Q, SUB_QK, SUB_QO, T0, TOPIC_A, TOPIC_B};

pub use crate::world::{Options, Outcome, Violation};

/// Scheduler turns the runtime gets after each step.
const TURNS_PER_STEP: usize = 12;

/// Runs one seed on a fresh single-threaded runtime.
pub fn run_seed(seed: u64, options: &Options) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    let options = options.clone();
    rt.block_on(async move {
        let mut world = World::new(seed, options);
        world.run().await;
        world.finish()
    })
}

impl World {
    pub(crate) async fn run(&mut self) {
        self.setup().await;
        self.chaos.set_enabled(!self.options.no_faults);
        for step in 1..=self.options.steps {
            self.step = step;
            self.one_step();
            let turns = self.rng.range(1, TURNS_PER_STEP as i64) as usize;
            self.settle(turns).await;
            if step % 25 == 0 {
                self.check_truth();
            }
            if self.violation.is_some() {
                return;
            }
        }
        self.step = self.options.steps + 1;
        self.chaos.set_enabled(false);
        self.trace.line("quiesce: faults off".into());
        self.quiesce().await;
        if self.violation.is_none() {
            self.end_checks().await;
        }
        if self.violation.is_none() {
            self.push_end().await;
        }
    }

    pub(crate) fn finish(self) -> Outcome {
        let (objects, bytes, deleted) = self.objects.stats();
        let mut stats = self.stats.clone();
        stats.insert("objects", objects as u64);
        stats.insert("object_bytes", bytes);
        stats.insert("objects_deleted", deleted);
        stats.insert("items", self.mem.len() as u64);
        stats.insert("facts", self.facts.len() as u64);
        for (fault, n) in self.chaos.fired() {
            stats.insert(fault.name(), n);
        }
        Outcome {
            seed: self.seed,
            violation: self.violation,
            allowed: self.allowed,
            hash: self.trace.hash(),
            trace_lines: self.trace.count(),
            lines: self.trace.lines(),
            stats,
        }
    }

    /// Lets the runtime run `turns` turns, handling every answer as it arrives.
    pub(crate) async fn settle(&mut self, turns: usize) {
        for _ in 0..turns {
            tokio::task::yield_now().await;
            self.drain();
        }
    }

    pub(crate) fn drain(&mut self) {
        let done: Vec<(u64, Res)> = std::mem::take(&mut *self.done.lock().unwrap());
        for (id, res) in done {
            let Some(op) = self.inflight.remove(&id) else { continue };
            self.complete(op, res);
        }
        self.check_push_attempts();
    }

    pub(crate) fn complete(&mut self, op: Inflight, mut res: Res) {
        self.seq += 1;
        let faulty = !self.options.no_faults && self.step <= self.options.steps;
        if faulty && !matches!(res, Res::Crashed) && self.answers.chance(self.answers_lost) {
            self.trace.line(format!("step {} c{} ANSWER LOST {:?}", self.step, op.client, op.act));
            self.chaos.record(Fault::ClientAnswerLost);
            res = Res::Crashed;
        }
        let done = Done {
            client: op.client,
            act: op.act,
            start_seq: op.start_seq,
            end_seq: self.seq,
            start_ms: op.start_ms,
            end_ms: self.clock.now_ms(),
            topic0: op.topic0,
            touch0: op.touch0,
            res,
        };
        self.clients[done.client].busy = false;
        self.handle(done);
    }

    pub(crate) async fn setup(&mut self) {
        let p = &self.procs[0];
        let (log, queues) = (p.log.clone(), p.queues.clone());
        for name in [TOPIC_A, TOPIC_B] {
            let (t, _) = log.create_topic(name, self.topic_specs[name]).await.expect("create topic");
            self.topic_ids.entry(name).or_default().insert(t.id);
        }
        for sub in [SUB_Q, SUB_QK, SUB_QO] {
            queues.create(TOPIC_A, sub, self.sub_specs[sub].clone()).await.expect("create subscription");
            self.learn_sub(sub);
        }
        // The clients: who they are is drawn from the seed too.
        let r = &mut self.rng;
        let (pubs, replayers, members, workers) = (r.range(2, 4), r.range(1, 2), r.range(1, 3), r.range(2, 4));
        for i in 0..pubs {
            let style = (i % 3) as u8;
            self.add(Kind::Publisher { topic: TOPIC_A, style, retry: None });
        }
        self.add(Kind::Publisher { topic: TOPIC_B, style: 1, retry: None });
        for _ in 0..replayers {
            self.add(Kind::Replayer { topic: TOPIC_A, cursors: vec![0; 3] });
        }
        self.add(Kind::Replayer { topic: TOPIC_B, cursors: vec![0; 3] });
        self.add(Kind::Lookup { topic: TOPIC_A });
        self.add(Kind::Janitor);
        if self.rng.chance(0.5) {
            self.add(Kind::Janitor);
        }
        for _ in 0..members {
            let session = self.rng.range(6000, 12_000) as u64;
            let auto = self.rng.chance(0.5);
            let keeps_positions = self.rng.chance(0.8);
            let instance = self.rng.chance(0.5).then(|| format!("m{}", self.clients.len()));
            self.add(Kind::Member(Member { session, auto, keeps_positions, instance, ..Member::default() }));
        }
        self.add(Kind::GroupAdmin);
        // One to three on SUB_Q, two or three on the key-ordered SUB_QK (whose order holds
        // across workers).
        let keyed = self.rng.range(2, 3);
        for i in 0..workers + keyed - 1 {
            let sub = if i < keyed { SUB_QK } else { SUB_Q };
            let slow = self.rng.chance(0.3);
            self.add(Kind::Worker { sub, holding: Vec::new(), slow });
        }
        self.add(Kind::QueueAdmin);
        self.add(Kind::TopicAdmin);
        // SUB_QO: one or two workers, and its operator.
        for _ in 0..self.rng.range(1, 2) {
            let slow = self.rng.chance(0.3);
            self.add(Kind::Worker { sub: SUB_QO, holding: Vec::new(), slow });
        }
        self.add(Kind::Operator);
        self.setup_push(&queues).await;
        self.trace.line(format!("clients: {}", self.clients.len()));
    }

    pub(crate) fn one_step(&mut self) {
        match self.rng.weighted(&[70, 22, 1]) {
            0 => {
                let c = self.rng.below(self.clients.len() as u64) as usize;
                if !self.clients[c].busy {
                    self.start(c);
                }
            }
            1 => {
                let ms = match self.rng.weighted(&[60, 30, 10]) {
                    0 => self.rng.range(1, 200),
                    1 => self.rng.range(200, 2000),
                    _ => self.rng.range(2000, 15_000),
                };
                self.clock.advance(ms);
                self.trace.line(format!("step {} clock +{ms} = {}", self.step, self.clock.now_ms() - T0));
            }
            _ => self.crash(),
        }
    }

    pub(crate) fn crash(&mut self) {
        self.drain();
        // Half the crashes that come while deferred writes are at risk are power cuts.
        if self.mem.at_risk() > 0 && self.rng.chance(0.5) {
            return self.power_cut();
        }
        let pid = self.rng.below(self.procs.len() as u64) as usize;
        self.procs[pid].life.kill();
        let victims: Vec<u64> = self.inflight.iter().filter(|(_, op)| op.pid == pid).map(|(id, _)| *id).collect();
        self.trace.line(format!("step {} CRASH p{pid} ({} ops in flight)", self.step, victims.len()));
        self.chaos.record(Fault::Crash);
        for id in victims {
            let op = self.inflight.remove(&id).unwrap();
            op.handle.abort();
            self.complete(op, Res::Crashed);
        }
        let fresh = self.process(pid);
        self.procs[pid] = fresh;
    }

    /// A power cut: every process dies at once, and the store loses the deferred writes
    /// (acks, releases, heartbeats) no durable write has followed, or all but a prefix of
    /// them. What the contract allows then, the checker allows: an ack or a commit answered
    /// since the last durable write becomes unknown (its messages may come back, its offset
    /// may be lost), and a committed offset seen may go back (commits and the auto-commits
    /// riding on heartbeats are deferred). Nothing else: publishes, receives' leases,
    /// joins and seeks are durable.
    pub(crate) fn power_cut(&mut self) {
        let durable = self.mem.durable_count();
        let at_risk = self.mem.at_risk();
        for p in &self.procs {
            p.life.kill();
        }
        let victims: Vec<u64> = self.inflight.keys().copied().collect();
        for id in &victims {
            let op = self.inflight.remove(id).unwrap();
            op.handle.abort();
            self.complete(op, Res::Crashed);
        }
        let lost = self.mem.power_cut(self.rng.below(at_risk as u64 + 1) as usize);
        self.trace.line(format!(
            "step {} POWER CUT ({} ops in flight; {lost} of {at_risk} deferred writes lost)",
            self.step,
            victims.len()
        ));
        self.chaos.record(Fault::PowerCut);
        if lost > 0 {
            self.chaos.record(Fault::PowerCutLosingWrites);
        }
        // Nothing undone: every answer stands (the acks carried by durable writes too).
        if lost == 0 {
            self.restart_all();
            return;
        }
        for s in self.subs.values_mut() {
            for dl in s.msgs.values_mut().flat_map(|m| m.deliveries.iter_mut()) {
                if dl.acked_ok.is_some() && dl.ack_durable == durable {
                    dl.acked_ok = None;
                    dl.ack_maybe = true;
                }
            }
        }
        for list in self.group.commits_ok.values_mut() {
            list.retain(|c| c.durable != durable);
        }
        self.group.last_seen.clear();
        self.restart_all();
    }

    pub(crate) fn restart_all(&mut self) {
        for pid in 0..self.procs.len() {
            self.procs[pid] = self.process(pid);
        }
    }

    /// Starts the next operation of an idle client.
    pub(crate) fn start(&mut self, c: usize) {
        if self.rng.chance(0.1) {
            // Now and then a client moves to another process (a load balancer's choice).
            self.clients[c].pid = self.rng.below(self.procs.len() as u64) as usize;
        }
        let pid = self.clients[c].pid;
        let (log, groups, queues, janitor) = {
            let p = &self.procs[pid];
            (p.log.clone(), p.groups.clone(), p.queues.clone(), p.janitor.clone())
        };
        let dispatcher = self.procs[pid].dispatcher.clone();
        let kind = std::mem::replace(&mut self.clients[c].kind, Kind::Janitor);
        let kind = match kind {
            Kind::Publisher { topic, style, retry } => {
                let req = self.start_publish(c, topic, style, retry, log);
                Kind::Publisher { topic, style, retry: Some(req) }
            }
            Kind::Replayer { topic, mut cursors } => {
                self.start_read(c, topic, &mut cursors, log);
                Kind::Replayer { topic, cursors }
            }
            Kind::Lookup { topic } => {
                self.start_lookup(c, topic, log);
                Kind::Lookup { topic }
            }
            Kind::Janitor => {
                self.start_janitor(c, janitor);
                Kind::Janitor
            }
            Kind::Member(mut m) => {
                self.start_member(c, &mut m, groups);
                Kind::Member(m)
            }
            Kind::GroupAdmin => {
                self.start_group_admin(c, groups);
                Kind::GroupAdmin
            }
            Kind::Worker { sub, mut holding, slow } => {
                self.start_worker(c, sub, &mut holding, slow, queues);
                Kind::Worker { sub, holding, slow }
            }
            Kind::QueueAdmin => {
                self.start_queue_admin(c, queues);
                Kind::QueueAdmin
            }
            Kind::Operator => {
                self.start_operator(c, queues);
                Kind::Operator
            }
            Kind::TopicAdmin => {
                self.start_topic_admin(c, log, groups, queues);
                Kind::TopicAdmin
            }
            Kind::Pusher { sub } => {
                self.start_pusher(c, sub, dispatcher);
                Kind::Pusher { sub }
            }
        };
        self.clients[c].kind = kind;
    }

    pub(crate) fn handle(&mut self, d: Done) {
        let mut line = String::new();
        let _ = write!(line, "step {} t={} c{} done {:?}: ", self.step, d.end_ms - T0, d.client, d.act);
        d.res.write_answer(&mut line);
        self.trace.line(line);
        let Done { act, .. } = &d;
        match act.clone() {
            Act::Publish { topic, req } => self.on_publish(&d, topic, req),
            Act::Read { topic, partition, offset } => self.on_read(&d, topic, partition, offset),
            Act::Lookup { topic, partition, ts, head0 } => self.on_lookup(&d, topic, partition, ts, head0),
            Act::Janitor => self.on_janitor(),
            Act::Poll { auto_commit } => self.on_poll(&d, auto_commit),
            Act::Commit { generation, offsets, member } => self.on_commit(&d, generation, &offsets, &member),
            Act::Leave { member } => self.on_leave(&d, &member),
            Act::Seek { .. } => self.on_seek(&d),
            Act::GDescribe => self.on_gdescribe(&d),
            Act::GDelete => self.on_gdelete(&d),
            Act::Receive { sub, visibility } => self.on_receive(&d, sub, visibility),
            Act::Settle { sub, how, held } => self.on_settle(&d, sub, how, &held),
            Act::AckNext { sub, visibility, held } => self.on_ack_next(d, sub, visibility, &held),
            Act::QDescribe { .. } => {}
            Act::Redrive { sub } => self.on_redrive(sub),
            Act::DeadLetters { sub } => self.on_dead_letters(&d, sub),
            Act::DlqPurge { sub } => self.on_dlq_removal(&d, sub, None),
            Act::DlqDelete { sub, partition, offset } => self.on_dlq_removal(&d, sub, Some((partition, offset))),
            Act::SubDelete { .. } => {}
            Act::SubCreate { sub } => self.on_sub_create(&d, sub),
            Act::TopicDelete { .. } => {}
            Act::TopicCreate { topic } => self.on_topic_create(&d, topic),
            Act::BusyDelete => self.on_busy_delete(&d),
            Act::Push { sub } => self.on_push(&d, sub),
            Act::PushDrain { .. } => self.on_push_drain(),
            Act::Pause { .. } | Act::Resume { .. } | Act::Patch { .. } | Act::QSeek { .. } => self.on_operated(&d),
        }
    }

    pub(crate) async fn quiesce(&mut self) {
        for _ in 0..2000 {
            if self.inflight.is_empty() {
                break;
            }
            self.clock.advance(100);
            self.settle(20).await;
        }
        if !self.inflight.is_empty() {
            let stuck: Vec<String> = self
                .inflight
                .values()
                .map(|op| format!("c{} {:?} since step {}", op.client, op.act, op.start_step))
                .collect();
            self.violate("liveness", format!("ops still in flight after the drain: {}", stuck.join("; ")));
        }
    }
}
