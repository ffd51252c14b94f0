//! The world the simulation runs in: processes over a faulty view of the shared stores, the
//! clients, the operations in flight and the model, with what every capability shares.

mod act;
mod clients;
mod push;
mod receiver;
mod truth;

pub(crate) use act::*;
pub(crate) use clients::*;
pub(crate) use push::*;
pub(crate) use receiver::{poison, stored_queue, Attempt, Script, Target};
pub(crate) use truth::*;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use sluice_core::groups::Groups;
use sluice_core::ports::state::StateStore;
use sluice_core::push::Dispatcher;
use sluice_core::queues::{Backoff, Ordering as KeyOrdering, Queues, Rate, StartAt, SubscriptionSpec};
use sluice_core::upkeep::{Janitor, JanitorConfig};
use sluice_core::{Clock, Log, LogConfig, ObjectStore, SeededRandom, TopicSpec};
use sluice_testkit::{Layered, LayeredObjects, MemObjects, MemStore, SimClock};

use crate::fault::{Chaos, FaultConfig, FaultyObjects, FaultyStore, Life};
use crate::model::{Delivery, EventInfo, GroupModel, GroupSnap, OpsModel, Request, SimFilter, SubModel};
use crate::rng::Rng;
use crate::trace::Trace;

/// The clock's start (2026-01-01); the topics, the group and the subscriptions every run uses.
pub(crate) const T0: i64 = 1_767_225_600_000;
pub(crate) const TOPIC_A: &str = "a";
pub(crate) const TOPIC_B: &str = "b";
pub(crate) const GROUP: &str = "g";
pub(crate) const SUB_Q: &str = "q";
pub(crate) const SUB_QK: &str = "qk";
/// A subscription the operator changes, pauses, seeks and purges (`ops/subops.rs`).
pub(crate) const SUB_QO: &str = "qo";

/// How a run is made.
#[derive(Debug, Clone)]
pub struct Options {
    pub steps: u64,
    /// Keep every trace line (for `--trace` and the determinism test).
    pub keep_trace: bool,
    /// Properties not checked (their violations are counted but do not fail the seed).
    pub allow: BTreeSet<String>,
    /// No faults at all (a baseline: failures then are the core's, not the faults').
    pub no_faults: bool,
}

impl Default for Options {
    fn default() -> Self {
        // A member that keeps no fetch positions skips a lost answer's events: documented (API.md).
        // One index item a stale committer wrote out after its topic's purge (see the check):
        // known, storage only, not yet fixed in core.
        let allow = ["group-skip-documented", "purge-index-residue"].into_iter().map(str::to_owned).collect();
        Self { steps: 2000, keep_trace: false, allow, no_faults: false }
    }
}

/// A broken promise, where it was seen.
#[derive(Debug, Clone)]
pub struct Violation {
    pub step: u64,
    pub property: &'static str,
    pub detail: String,
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seed: u64,
    pub violation: Option<Violation>,
    /// Violations of allowed properties (not failing the seed).
    pub allowed: Vec<Violation>,
    pub hash: u64,
    pub trace_lines: u64,
    pub lines: Vec<String>,
    pub stats: BTreeMap<&'static str, u64>,
}

pub(crate) struct World {
    pub(crate) seed: u64,
    pub(crate) options: Options,
    pub(crate) rng: Rng,
    pub(crate) trace: Trace,
    pub(crate) clock: Arc<SimClock>,
    pub(crate) mem: MemStore,
    pub(crate) objects: MemObjects,
    pub(crate) chaos: Arc<Chaos>,
    pub(crate) procs: Vec<Process>,
    pub(crate) incarnations: u64,
    pub(crate) clients: Vec<Client>,
    pub(crate) inflight: BTreeMap<u64, Inflight>,
    pub(crate) done: Arc<Mutex<Vec<(u64, Res)>>>,
    pub(crate) next_op: u64,
    pub(crate) seq: u64,
    pub(crate) step: u64,
    pub(crate) jconfig: JanitorConfig,
    pub(crate) topic_specs: BTreeMap<&'static str, TopicSpec>,
    pub(crate) sub_specs: BTreeMap<&'static str, SubscriptionSpec>,
    /// SUB_Q's content filter; SUB_QK has none.
    pub(crate) q_filter: SimFilter,
    // model
    pub(crate) events: BTreeMap<u64, EventInfo>,
    pub(crate) requests: BTreeMap<u64, Request>,
    pub(crate) facts: BTreeMap<(u64, u32, u64), u64>,
    pub(crate) placed: BTreeMap<(u64, u64), (u32, u64)>,
    pub(crate) acked_max: BTreeMap<(u64, u32), u64>,
    /// Acked events: (topic id, partition, offset) → event, for the never-lost check.
    pub(crate) acked: BTreeMap<(u64, u32, u64), u64>,
    pub(crate) topic_ids: BTreeMap<&'static str, BTreeSet<u64>>,
    pub(crate) group: GroupModel,
    pub(crate) subs: BTreeMap<u64, SubModel>,
    pub(crate) violation: Option<Violation>,
    pub(crate) allowed: Vec<Violation>,
    pub(crate) stats: BTreeMap<&'static str, u64>,
    pub(crate) next_event: u64,
    pub(crate) next_req: u64,
    /// The op about to be spawned is a long poll.
    pub(crate) long_next: bool,
    /// Chance that an answer is lost on its way back to the client (an HTTP timeout: the
    /// operation applied, the client cannot tell), drawn from a generator of its own so the
    /// rest of a seed's schedule is the same with and without it.
    pub(crate) answers_lost: f64,
    pub(crate) answers: Rng,
    /// Which publishes carry a schedule, and what (`ops/schedule.rs`): a generator of its own.
    pub(crate) sched_rng: Rng,
    /// The stored group as each commit in flight began (by its start seq).
    pub(crate) commit_snaps: BTreeMap<u64, GroupSnap>,
    /// The first segment of each partition (its next offset, length and newest timestamp)
    /// when the checker last read it from the stores, and as of the check before that (size
    /// retention's check).
    pub(crate) first_segments: BTreeMap<(u64, u32), (u64, u64, i64)>,
    pub(crate) last_first_segments: BTreeMap<(u64, u32), (u64, u64, i64)>,
    pub(crate) push: PushModel,
    /// What the operator did to SUB_QO.
    pub(crate) ops: OpsModel,
}

impl World {
    pub(crate) fn new(seed: u64, options: Options) -> Self {
        let mut rng = Rng::new(seed);
        let trace = Trace::new(options.keep_trace);
        let clock = Arc::new(SimClock::new(T0));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let mem = MemStore::new(dyn_clock.clone());
        let objects = MemObjects::new(dyn_clock);
        let (chaos, intensity) = draw_chaos(&mut rng, &trace);
        let jconfig = draw_janitor(&mut rng);
        let (a, b) = draw_topics(&mut rng);
        let (q_filter, q, qk) = draw_subscriptions(seed, &mut rng);
        let push = PushModel::new(seed, clock.clone(), mem.clone(), trace.clone());
        let qo = draw_operated(seed);
        let ops = OpsModel::new(qo.visibility_timeout_ms, qo.rate, qo.max_receive_count);
        let mut world = Self {
            seed,
            options,
            rng,
            trace,
            clock,
            mem,
            objects,
            chaos,
            procs: Vec::new(),
            incarnations: 0,
            clients: Vec::new(),
            inflight: BTreeMap::new(),
            done: Arc::default(),
            next_op: 0,
            seq: 0,
            step: 0,
            jconfig,
            topic_specs: [(TOPIC_A, a), (TOPIC_B, b)].into_iter().collect(),
            sub_specs: [(SUB_Q, q), (SUB_QK, qk), (SUB_QO, qo)].into_iter().collect(),
            q_filter,
            events: BTreeMap::new(),
            requests: BTreeMap::new(),
            facts: BTreeMap::new(),
            placed: BTreeMap::new(),
            acked_max: BTreeMap::new(),
            acked: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            group: GroupModel::default(),
            subs: BTreeMap::new(),
            violation: None,
            allowed: Vec::new(),
            stats: BTreeMap::new(),
            next_event: 0,
            next_req: 0,
            long_next: false,
            answers_lost: 0.03 * intensity,
            answers: Rng::new(seed.rotate_left(17) ^ 0xa45e_0f1a_5717),
            sched_rng: Rng::new(seed.rotate_left(53) ^ 0x5c4e_d01e_0de1),
            commit_snaps: BTreeMap::new(),
            first_segments: BTreeMap::new(),
            last_first_segments: BTreeMap::new(),
            push,
            ops,
        };
        let nprocs = world.rng.range(2, 3) as usize;
        for pid in 0..nprocs {
            let p = world.process(pid);
            world.procs.push(p);
        }
        world.trace.line(format!(
            "seed {seed}: {nprocs} processes, a={:?}, b={:?}, janitor target {} grace {}, faults {:?}, q={:?} ({:?}), qk={:?}, qo={:?}",
            world.topic_specs[TOPIC_A],
            world.topic_specs[TOPIC_B],
            world.jconfig.compaction_target_bytes,
            world.jconfig.grace_ms,
            world.chaos.config(),
            world.sub_specs[SUB_Q],
            world.q_filter,
            world.sub_specs[SUB_QK],
            world.sub_specs[SUB_QO],
        ));
        world
    }

    pub(crate) fn process(&mut self, pid: usize) -> Process {
        self.incarnations += 1;
        let life = Life::new(pid, self.incarnations);
        let clock: Arc<dyn Clock> = self.clock.clone();
        let inner_store: Arc<dyn StateStore> = Arc::new(self.mem.handle(clock.clone()));
        let inner_objects: Arc<dyn ObjectStore> = Arc::new(self.objects.handle(clock.clone()));
        let faults = FaultyStore::new(self.chaos.clone(), life.clone());
        let store: Arc<dyn StateStore> = Arc::new(Layered::new(inner_store, faults));
        let faults = FaultyObjects::new(self.chaos.clone(), life.clone());
        let objects: Arc<dyn ObjectStore> = Arc::new(LayeredObjects::new(inner_objects, faults));
        let random = Arc::new(SeededRandom::new(self.rng.next_u64()));
        // Half the processes keep small groups' segments inline (a low bound, so that they
        // write blobs too), half always write blobs; a quarter commit small ones with a single
        // write of the head, as the AWS functions do, beside the others' transactions.
        let config = LogConfig {
            poll_interval: std::time::Duration::from_millis(50),
            inline_segment_bytes: if pid % 4 < 2 { 4 << 10 } else { 0 },
            single_write_commits: pid.is_multiple_of(4),
            part_bytes: self.jconfig.part_bytes,
            ..LogConfig::default()
        };
        let log = Log::with_random(store.clone(), objects.clone(), clock.clone(), random, config);
        let groups = Groups::new(log.clone());
        // Half the processes cache subscriptions as `serve` does, half read them as the functions do.
        let queues =
            if pid.is_multiple_of(2) { Queues::caching_subscriptions(log.clone()) } else { Queues::new(log.clone()) };
        let janitor = Janitor::new(store, objects, clock, self.jconfig.clone());
        let dispatcher = Dispatcher::new(queues.clone(), self.push.receiver.clone());
        Process { life, log, groups, queues, janitor, dispatcher }
    }

    pub(crate) fn add(&mut self, kind: Kind) {
        let pid = self.rng.below(self.procs.len() as u64) as usize;
        self.clients.push(Client { kind, busy: false, pid });
    }

    /// This seed gave SUB_Q a visibility timeout of 0: its workers' and the drain's
    /// receives sometimes ask for a window of 0 too.
    pub(crate) fn zero_windows(&self) -> bool {
        self.sub_specs[SUB_Q].visibility_timeout_ms == 0
    }

    pub(crate) fn stat(&mut self, name: &'static str) {
        *self.stats.entry(name).or_insert(0) += 1;
    }

    pub(crate) fn violate(&mut self, property: &'static str, detail: String) {
        let v = Violation { step: self.step, property, detail };
        self.trace.line(format!("VIOLATION {} at step {}: {}", v.property, v.step, v.detail));
        if self.options.allow.contains(property) {
            if self.allowed.iter().all(|a| a.property != property) {
                self.allowed.push(v);
            }
            return;
        }
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    pub(crate) fn spawn<F>(&mut self, client: usize, act: Act, topic: Option<&str>, fut: F)
    where
        F: std::future::Future<Output = Res> + Send + 'static,
    {
        self.next_op += 1;
        self.seq += 1;
        let id = self.next_op;
        let done = self.done.clone();
        let pid = self.clients[client].pid;
        let topic0 = topic.and_then(|t| self.topic_now(t));
        let long = std::mem::take(&mut self.long_next);
        self.trace.line(format!(
            "step {} t={} c{client}@p{pid} start #{id} {act:?}",
            self.step,
            self.clock.now_ms() - T0
        ));
        let handle = tokio::spawn(async move {
            let res = fut.await;
            done.lock().unwrap().push((id, res));
        });
        self.clients[client].busy = true;
        let op = Inflight {
            client,
            pid,
            act,
            start_seq: self.seq,
            start_ms: self.clock.now_ms(),
            start_step: self.step,
            long,
            topic0,
            touch0: self.group.touch,
            handle,
        };
        self.inflight.insert(id, op);
    }

    /// A wait for a long poll, if none is in flight on the client's process: tasks waiting on one
    /// process's commit notifications (a `tokio::sync::watch`) wake in a random order, so at most
    /// one may wait at a time for the history to be reproducible.
    pub(crate) fn long_wait(&mut self, c: usize, chance: f64, max: i64) -> u64 {
        let pid = self.clients[c].pid;
        if !self.rng.chance(chance) || self.inflight.values().any(|op| op.long && op.pid == pid) {
            return 0;
        }
        self.long_next = true;
        self.rng.range(1, max) as u64
    }

    pub(crate) fn learn_sub(&mut self, name: &'static str) -> Option<u64> {
        let record = self.sub_now(TOPIC_A, name)?;
        let id = record.id;
        self.subs.entry(id).or_insert_with(|| SubModel {
            name,
            record,
            msgs: BTreeMap::new(),
            redrive_seqs: Vec::new(),
            listed_dead: (0, BTreeSet::new()),
            removed_dead: BTreeMap::new(),
            removed_count: 0,
            removed_unknown: false,
            redrives_in_flight: 0,
            lost_receives: Vec::new(),
        });
        Some(id)
    }

    pub(crate) fn delivery_mut(&mut self, h: &Held) -> Option<&mut Delivery> {
        self.subs
            .get_mut(&h.sub_id)?
            .msgs
            .get_mut(&(h.partition, h.offset))?
            .deliveries
            .iter_mut()
            .find(|d| d.nonce == h.nonce)
    }
}

/// The fault layer of a seed, from a generator forked off the seed's, and its intensity.
fn draw_chaos(rng: &mut Rng, trace: &Trace) -> (Arc<Chaos>, f64) {
    let mut frng = rng.fork();
    let intensity = frng.below(4) as f64 / 3.0;
    let faults = FaultConfig {
        enabled: false,
        fail_before: 0.03 * intensity,
        throttle: 0.02 * intensity,
        lost_answer: 0.04 * intensity,
        torn_query: 0.1 + 0.4 * intensity,
        object_read: 0.03 * intensity,
        max_yields: frng.below(5) as u32,
    };
    let chaos = Arc::new(Chaos::new(frng.next_u64(), faults, trace.clone()));
    chaos.set_verbose(std::env::var_os("SLUICE_SIM_CALLS").is_some());
    (chaos, intensity)
}

fn draw_janitor(rng: &mut Rng) -> JanitorConfig {
    JanitorConfig {
        default_retention_ms: 7 * 24 * 3600 * 1000,
        compaction_target_bytes: rng.range(600, 4000) as u64,
        grace_ms: rng.range(1000, 20_000),
        offsets_retention_ms: 7 * 24 * 3600 * 1000,
        // Parts of a few events, so that commits and merges write segments in parts.
        part_bytes: rng.range(300, 3000) as usize,
        settle_commit_segments: false,
    }
}

/// TOPIC_A's spec (retention by time, sometimes by bytes too) and TOPIC_B's (none).
fn draw_topics(rng: &mut Rng) -> (TopicSpec, TopicSpec) {
    let a = TopicSpec {
        partitions: rng.range(1, 3) as u32,
        retention_ms: Some(rng.range(30_000, 300_000)),
        retention_bytes: rng.chance(0.3).then(|| rng.range(2000, 8000)),
    };
    let b = TopicSpec { partitions: rng.range(1, 2) as u32, retention_ms: None, retention_bytes: None };
    (a, b)
}

/// SUB_Q's filter (from a generator of its own), SUB_Q's spec and SUB_QK's (key-ordered).
/// On a few seeds (decided by a generator of their own, so other seeds' histories stay as
/// they were) SUB_Q's visibility timeout is 0: every receive delivers, visible again at once.
fn draw_subscriptions(seed: u64, rng: &mut Rng) -> (SimFilter, SubscriptionSpec, SubscriptionSpec) {
    let backoff = rng.chance(0.3).then(|| Backoff::Steps(vec![300, 1000]));
    let q_filter = SimFilter::draw(&mut Rng::new(seed.rotate_left(29) ^ 0x51f7_e12a_0b1d));
    let zero_window = Rng::new(seed.rotate_left(41) ^ 0x2e70_0a11_d0e5).chance(0.1);
    let q = SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: Some(rng.range(1000, 6000) as u64).filter(|_| !zero_window).unwrap_or(0),
        max_receive_count: rng.range(1, 4) as u32,
        ordering: KeyOrdering::None,
        delay_ms: if rng.chance(0.2) { rng.range(200, 2000) as u64 } else { 0 },
        redelivery_backoff: backoff,
        filter: q_filter.pattern(),
        push: None,
        rate: None,
    };
    let qk = SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: rng.range(1000, 5000) as u64,
        max_receive_count: rng.range(2, 4) as u32,
        ordering: KeyOrdering::Key,
        delay_ms: 0,
        redelivery_backoff: None,
        filter: None,
        push: None,
        rate: None,
    };
    (q_filter, q, qk)
}

/// SUB_QO's spec, from a generator of its own: no filter and no delay to begin with, a
/// rate or none (the operator changes its window, filter, rate and receive limit as it runs).
fn draw_operated(seed: u64) -> SubscriptionSpec {
    let mut rng = Rng::new(seed.rotate_left(7) ^ 0x0be7_a7ed_5ee4);
    SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: rng.range(1000, 6000) as u64,
        max_receive_count: rng.range(2, 4) as u32,
        rate: rng.chance(0.5).then(|| draw_rate(&mut rng)),
        ..SubscriptionSpec::default()
    }
}

/// A rate for SUB_QO: low enough that its workers wait for it.
pub(crate) fn draw_rate(rng: &mut Rng) -> Rate {
    Rate { per_second: rng.range(1, 20) as u32, burst: rng.range(1, 8) as u32 }
}
