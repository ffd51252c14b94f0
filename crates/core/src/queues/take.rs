//! A take's decisions, apart from its reads and its write: which due leases and new
//! messages one receive delivers from one partition, which it parks or passes over, and
//! the one write that records it. Pure: the shell in `receive.rs` reads the state, the
//! log and the payloads, and writes what these functions answer.

use super::*;

/// A message a receive may deliver: from a due lease (`lease` is its index) or new from the log.
pub(super) struct Candidate {
    pub msg: LeaseMsg,
    pub lease: Option<usize>,
    pub receives: u32,
    /// A new message still within the subscription's delay: the time it becomes visible.
    pub waiting: Option<i64>,
    /// A new message the subscription's filter does not match: passed over, never delivered.
    pub filtered: bool,
    /// A new message scheduled (`crate::schedule`) for `waiting`: moved out of the log's
    /// order into a lease due then, never left to stop the cursor.
    pub scheduled: bool,
}

/// What one take chose, before its write.
#[derive(Default)]
pub(super) struct Pick {
    /// Indexes of the candidates to deliver, in candidate order.
    pub chosen: Vec<usize>,
    /// New messages parked behind their key: visible, never delivered.
    pub parked: Vec<LeaseMsg>,
    /// New messages parked until their delay ends, by that time.
    pub delayed: BTreeMap<i64, Vec<LeaseMsg>>,
    /// New scheduled messages, each moved into a lease due at its time, by that time.
    pub scheduled: BTreeMap<i64, Vec<LeaseMsg>>,
    /// Lease messages gone from the log.
    pub gone: HashSet<u64>,
    /// Due leases this write changes, and the receive counts of the leases it creates.
    pub touched: HashSet<usize>,
    pub groups: HashSet<u32>,
    pub cursor_next: u64,
}

impl Pick {
    fn parked_count(&self) -> usize {
        self.parked.len() + self.delayed.values().map(Vec::len).sum::<usize>()
    }

    /// Parks a message within its delay in the lease due at its time `at`, and the cursor
    /// past it: `false` if the take may park no more (`parked_before` were before it).
    fn delay(&mut self, msg: LeaseMsg, at: i64, parked_before: usize) -> bool {
        let new_lease = !self.delayed.contains_key(&at);
        if parked_before + self.parked_count() >= PARK_LIMIT || (new_lease && self.delayed.len() >= MAX_DELAY_LEASES) {
            return false;
        }
        self.delayed.entry(at).or_default().push(msg);
        self.cursor_next = msg.offset + 1;
        true
    }

    /// Moves a scheduled message not yet due into the lease due at its time `at`, holding
    /// back no key, and the cursor past it: `false` if this take moved all it may. A new
    /// lease takes one of the write's `ops_left`.
    fn schedule(&mut self, msg: LeaseMsg, at: i64, ops_left: &mut usize) -> bool {
        let new_lease = !self.scheduled.contains_key(&at);
        let moved: usize = self.scheduled.values().map(Vec::len).sum();
        let no_lease = new_lease && (self.scheduled.len() >= MAX_SCHEDULED_LEASES || *ops_left == 0);
        if moved >= MAX_SCHEDULED_PER_TAKE || no_lease {
            return false;
        }
        *ops_left -= usize::from(new_lease);
        self.scheduled.entry(at).or_default().push(msg);
        self.cursor_next = msg.offset + 1;
        true
    }
}

/// The leases due at `now` that ran out of deliveries: the DLQ's, before anything is taken.
/// A lease holding a message at or past the cursor is one too, whatever its receives: takes
/// lease only messages below the cursor, so it is a dead one a seek kept while it moved the
/// cursor back over it (`seek.rs`). Its messages come again from the log, as new; were a
/// PATCH raising `max_receive_count` to revive the lease, each would have two ways out, and
/// two holders at once.
pub(super) fn dead_leases(state: &QueueState, now: i64, max_receive_count: u32) -> Vec<usize> {
    (0..state.leases.len()).filter(|&i| is_dead(&state.leases[i], state.cursor.next, now, max_receive_count)).collect()
}

/// Whether `lease` is the DLQ's at `now` in a partition whose cursor is at `cursor_next`
/// (see [`dead_leases`]).
pub(super) fn is_dead(lease: &Lease, cursor_next: u64, now: i64, max_receive_count: u32) -> bool {
    let sought_over = lease.record.msgs.iter().any(|m| m.offset >= cursor_next);
    lease.due <= now && (lease.record.receives >= max_receive_count || sought_over)
}

/// One take's plan as it forms: the candidates in the order they are considered, the keys
/// that may not be delivered, and what the answer reports besides messages.
pub(super) struct Plan {
    pub candidates: Vec<Candidate>,
    blocked_keys: HashSet<u64>,
    /// Messages parked (visible, held back behind their key) before this take.
    parked_before: usize,
    pub wake_at: Option<i64>,
    pub blocked: bool,
    keyed: bool,
    /// A push subscription's retry: one lease taken whole, nothing read from the log.
    alone: bool,
    /// The subscription has a filter: the log is read further ahead, as some of what is
    /// read will not be delivered.
    pub filtering: bool,
    /// An earlier pass of this take moved scheduled messages out of the way: the log is
    /// read as far ahead as one take moves them, so a run of them is passed in a pass or two.
    pub scheduling: bool,
}

/// New messages a filtering take reads at least (it passes over those that do not match).
const FILTER_LOOKAHEAD: usize = 256;
/// Scheduled messages one take moves into leases at most, and the leases it puts for
/// them (one per due time): within a write's operations and an item's size.
pub(super) const MAX_SCHEDULED_PER_TAKE: usize = 1000;
pub(super) const MAX_SCHEDULED_LEASES: usize = 16;

impl Plan {
    /// Sorts the leases out at `now`: due ones (but `dead`) are candidates; keyed, a lease
    /// not yet due blocks its keys.
    pub fn new(state: &QueueState, now: i64, keyed: bool, dead: &[usize]) -> Self {
        let mut plan = Plan {
            candidates: Vec::new(),
            blocked_keys: HashSet::new(),
            parked_before: 0,
            wake_at: None,
            blocked: false,
            keyed,
            alone: false,
            filtering: false,
            scheduling: false,
        };
        for (i, lease) in state.leases.iter().enumerate() {
            let parked = lease.record.held_until.is_none() && lease.record.receives == 0;
            if parked && !lease.record.redriven && !lease.record.scheduled {
                plan.parked_before += lease.record.msgs.len();
            }
            if lease.due > now {
                plan.wake_at = min_time(plan.wake_at, lease.due);
                let holds_keys = !lease.record.scheduled;
                if keyed && holds_keys && !crate::mutation::skipped(crate::mutation::Mutation::KeyedLeaseBlocks) {
                    plan.blocked_keys.extend(lease.record.msgs.iter().filter_map(|m| m.key));
                }
            } else if !dead.contains(&i) {
                plan.candidates.extend(lease.record.msgs.iter().map(|m| Candidate {
                    msg: *m,
                    lease: Some(i),
                    receives: lease.record.receives,
                    waiting: None,
                    filtered: false,
                    scheduled: false,
                }));
            }
        }
        plan
    }

    /// A push subscription's batches (`webhook.rs`'s ids are theirs): the first due lease
    /// delivered before is a batch that failed or was never settled, retried alone and
    /// whole, so its retry carries the same messages (whose order is their offsets') and
    /// so the same `webhook-id`; none of those is mixed into a new batch. Called before
    /// anything is read from the log; without such a lease, nothing changes.
    pub fn retry_batches_alone(&mut self) {
        let Some(retry) = self.candidates.iter().find(|c| c.receives > 0).and_then(|c| c.lease) else { return };
        self.candidates.retain(|c| c.lease == Some(retry));
        self.alone = true;
    }

    /// How many new messages to read from the log: only as far as they will be delivered
    /// or parked. Keyed, a look-ahead past blocked keys, not the whole park.
    pub fn room(&self, want: usize) -> usize {
        if self.alone {
            return 0;
        }
        let room = if self.keyed {
            want + PARK_LIMIT.saturating_sub(self.parked_before).min(want * 3)
        } else {
            want.saturating_sub(self.candidates.len())
        };
        match room {
            0 => 0,
            _ if self.scheduling => room.max(MAX_SCHEDULED_PER_TAKE),
            _ if self.filtering => room.max(FILTER_LOOKAHEAD),
            _ => room,
        }
    }

    /// Adds the new messages read from the log (`events`, in offset order); those `filter`
    /// does not match are marked, to be passed over. Those still within their delay at the
    /// end of what was read stay in the log: the cursor stops at the first of them, and the
    /// filtered ones after it wait with them (timestamps growing with offsets, the common
    /// case, park nothing). A scheduled message not yet due never stays: a schedule is not
    /// monotonic, so one waiting in the log would hold back every message after it.
    pub fn add_new(&mut self, events: &[Event], spec: &SubscriptionSpec, filter: Option<&Filter>, now: i64) {
        for event in events {
            let filtered = filter.is_some_and(|f| !f.matches(&document(event)));
            let delayed = (spec.delay_ms > 0 && !filtered)
                // From its timestamp, or from now if the publisher's clock ran ahead.
                .then(|| event.record.timestamp_ms.min(now).saturating_add(spec.delay_ms as i64));
            let scheduled = crate::schedule::deliver_at(&event.record.headers)
                .filter(|at| *at > now && !filtered)
                .filter(|_| !crate::mutation::skipped(crate::mutation::Mutation::ScheduleIgnored));
            let waiting = delayed.max(scheduled).filter(|at| *at > now);
            let key = if self.keyed && !filtered { event.record.key.as_deref().map(key_hash) } else { None };
            self.candidates.push(Candidate {
                msg: LeaseMsg { offset: event.offset, first_ms: 0, key },
                lease: None,
                receives: 0,
                waiting,
                filtered,
                scheduled: scheduled.is_some(),
            });
        }
        // The tail of new messages that are all waiting or filtered; from its first waiting one.
        let tail = self
            .candidates
            .iter()
            .rposition(|c| c.lease.is_some() || c.scheduled || (c.waiting.is_none() && !c.filtered));
        let tail = tail.map_or(0, |i| i + 1);
        if let Some(first) = (tail..self.candidates.len()).find(|&i| self.candidates[i].waiting.is_some()) {
            for at in self.candidates.drain(first..).filter_map(|c| c.waiting) {
                self.wake_at = min_time(self.wake_at, at);
            }
        }
    }

    /// The filtered messages below `cursor`: what a write moving the cursor there passes over.
    pub fn filtered_below(&self, cursor: u64) -> u64 {
        self.candidates.iter().filter(|c| c.filtered && c.msg.offset < cursor).count() as u64
    }

    /// Chooses at most `want`; keyed, one per key and none of a blocked key (every candidate
    /// considered marks its key, so a later one of the key never overtakes it); within one
    /// write's operations. Lease messages below `log_start` are dropped, never delivered.
    /// (One loop over the candidates: each branch is one case of the rules above.)
    pub fn choose(&mut self, want: usize, log_start: u64, base: u64) -> Pick {
        if self.keyed {
            // Offsets in leases are all below the cursor: in offset order, a key's
            // earliest waiting message always comes first.
            self.candidates.sort_by_key(|c| c.msg.offset);
        }
        let mut pick = Pick::default();
        // The cursor, the parked lease, and two checks (a first write's, or `Sub::guards`).
        let mut ops_left = MAX_WRITE_OPS - 4 - MAX_DELAY_LEASES;
        for (ci, c) in self.candidates.iter().enumerate() {
            if c.filtered {
                pick.cursor_next = c.msg.offset + 1; // passed over, even once full
                continue;
            }
            let full = pick.chosen.len() >= want;
            if c.lease.is_none() && full {
                break; // the cursor stops here: the rest stay in the log
            }
            if let Some(at) = c.waiting {
                // Within its delay, but later messages are due: parked until its time, its
                // key (if ordered) held back behind it. Scheduled: moved, holding back no key.
                let moved = match c.scheduled {
                    true => pick.schedule(c.msg, at, &mut ops_left),
                    false => pick.delay(c.msg, at, self.parked_before),
                };
                if !moved {
                    break;
                }
                if let Some(k) = c.msg.key.filter(|_| !c.scheduled) {
                    self.blocked_keys.insert(k);
                }
                self.wake_at = min_time(self.wake_at, at);
                continue;
            }
            // Removed from the log by retention: dropped from its lease, never delivered.
            if let Some(i) = c.lease.filter(|_| c.msg.offset < log_start) {
                let cost = usize::from(!pick.touched.contains(&i));
                if cost <= ops_left {
                    ops_left -= cost;
                    pick.touched.insert(i);
                    pick.gone.insert(c.msg.offset);
                }
                continue;
            }
            let free = match c.msg.key {
                Some(k) if self.keyed => self.blocked_keys.insert(k),
                _ => true,
            };
            if free && !full {
                let cost = c.lease.map_or(0, |i| usize::from(!pick.touched.contains(&i)))
                    + usize::from(!pick.groups.contains(&(c.receives + 1)));
                if cost > ops_left {
                    if c.lease.is_none() {
                        break;
                    }
                    continue;
                }
                ops_left -= cost;
                if let Some(i) = c.lease {
                    pick.touched.insert(i);
                }
                pick.groups.insert(c.receives + 1);
                pick.chosen.push(ci);
            } else if c.lease.is_none() {
                if self.parked_before + pick.parked_count() >= PARK_LIMIT {
                    break;
                }
                pick.parked.push(c.msg);
            } else {
                self.blocked = true;
                continue;
            }
            if c.lease.is_none() {
                pick.cursor_next = c.msg.offset + 1;
            }
        }
        pick.cursor_next = pick.cursor_next.max(base);
        pick
    }

    /// The offsets of the chosen lease messages: their payloads must be read.
    pub fn lease_offsets(&self, pick: &Pick) -> Vec<u64> {
        pick.chosen
            .iter()
            .filter(|&&ci| self.candidates[ci].lease.is_some())
            .map(|&ci| self.candidates[ci].msg.offset)
            .collect()
    }

    /// What of the choice fits the answer's `bytes_left` (the first message whatever its
    /// size when `first`): what does not fit stays in its lease, or in the log (the cursor
    /// stops at the first new message cut, and nothing after it is parked). Answers the
    /// kept candidates and the bytes left after them.
    pub fn fit(
        &mut self,
        pick: &mut Pick,
        payloads: &HashMap<u64, Event>,
        bytes_left: usize,
        first: bool,
        base: u64,
    ) -> (Vec<usize>, usize) {
        let mut left = bytes_left;
        let mut cut: Option<u64> = None;
        let mut kept = Vec::with_capacity(pick.chosen.len());
        for &ci in &pick.chosen {
            let c = &self.candidates[ci];
            if c.lease.is_none() && cut.is_some() {
                continue;
            }
            let size = payloads.get(&c.msg.offset).map(|e| event_size(&e.record));
            match size {
                Some(size) if size <= left || (first && kept.is_empty()) => {
                    left = left.saturating_sub(size);
                    kept.push(ci);
                }
                _ if c.lease.is_none() => cut = Some(c.msg.offset),
                _ => {}
            }
        }
        if let Some(at) = cut {
            pick.cursor_next = at.max(base);
            pick.parked.retain(|m| m.offset < at);
            for msgs in pick.delayed.values_mut().chain(pick.scheduled.values_mut()) {
                msgs.retain(|m| m.offset < at);
            }
            pick.delayed.retain(|_, msgs| !msgs.is_empty());
            pick.scheduled.retain(|_, msgs| !msgs.is_empty());
        }
        self.blocked |= !pick.parked.is_empty();
        (kept, left)
    }
}

/// What a filter matches an event against: `{"partition", "key", "headers", "value"}`,
/// the value as JSON when it was published as JSON (bytes match on the rest only), keys and
/// header values as text (invalid UTF-8 replaced).
pub(super) fn document(event: &Event) -> serde_json::Value {
    let text = |b: &[u8]| serde_json::Value::String(String::from_utf8_lossy(b).into_owned());
    let mut doc = serde_json::Map::with_capacity(4);
    doc.insert("partition".into(), event.partition.into());
    if let Some(key) = &event.record.key {
        doc.insert("key".into(), text(key));
    }
    let headers = event.record.headers.iter().map(|(n, v)| (n.clone(), text(v))).collect();
    doc.insert("headers".into(), serde_json::Value::Object(headers));
    if event.record.value_is_json {
        if let Ok(value) = serde_json::from_slice(&event.record.value) {
            doc.insert("value".into(), value);
        }
    }
    serde_json::Value::Object(doc)
}

/// What a take writes, and what it answers once the write lands.
pub(super) struct Write {
    pub ops: Vec<WriteOp>,
    /// Per delivered message: its offset, receipt, receive count and first receive time.
    pub delivered: Vec<(u64, String, u32, i64)>,
    /// Whether the write's first op checks the subscription (the partition's first items).
    pub checks_sub: bool,
}

/// The one write of a take: the cursor past what was taken or parked (keyed, at least
/// rewritten: a lease moved while the leases were read shows as a new cursor version),
/// the due leases emptied of what was taken or gone, a new lease per receive count held
/// until `held_until`, and the parked messages. Expired messages (`skipped` passed over,
/// and those gone) are counted in the write that passes over them, conditional on the
/// cursor's and the leases' versions: exactly once. Held leases small enough go inline
/// (`inline.rs`). Nonces are drawn from `nonce`, in order.
#[allow(clippy::too_many_arguments)]
pub(super) fn write(
    at: &Target<'_>,
    state: &QueueState,
    plan: &Plan,
    pick: Pick,
    kept: &[usize],
    skipped: u64,
    now: i64,
    held_until: i64,
    mut nonce: impl FnMut() -> u64,
) -> Write {
    let (sub, partition) = (at.sub, at.partition);
    let mut ops = Vec::new();
    let checks_sub = state.cursor_version.is_none();
    if checks_sub {
        // The partition's first items (a subscription's create makes its cursors, so only
        // one created before that, or past the partitions its create wrote): created on
        // absence, so only while the subscription lives (a receive racing its delete would
        // otherwise leave items its purge missed). Later writes need no such check: they
        // name the cursor, which the delete fences and the purge removes.
        ops.push(WriteOp::Check {
            key: crate::keys::subscription_key(sub.topic.id, &sub.name),
            expect: Expect::Version(sub.version),
        });
    }
    let mut cursor = None;
    if pick.cursor_next > state.cursor.next || !pick.gone.is_empty() {
        let expired = state.cursor.expired + skipped + pick.gone.len() as u64;
        let filtered = state.cursor.filtered + plan.filtered_below(pick.cursor_next);
        cursor = Some(CursorRecord { next: pick.cursor_next, dead: state.cursor.dead, expired, filtered });
    } else if plan.keyed {
        // Rewritten, not only checked: a keyed receiver that read the leases while
        // this write moved some of them reads an older cursor, and fails.
        cursor = Some(state.cursor);
    }
    let mut removed: BTreeMap<usize, HashSet<u64>> = BTreeMap::new();
    for &ci in kept {
        if let Some(i) = plan.candidates[ci].lease {
            removed.entry(i).or_default().insert(plan.candidates[ci].msg.offset);
        }
    }
    for (i, lease) in state.leases.iter().enumerate() {
        let gone: Vec<u64> = lease.record.msgs.iter().map(|m| m.offset).filter(|o| pick.gone.contains(o)).collect();
        if !gone.is_empty() {
            removed.entry(i).or_default().extend(gone);
        }
    }
    for (i, offsets) in &removed {
        ops.push(shrink(&state.leases[*i], offsets));
    }
    let mut by_receives: BTreeMap<u32, Vec<LeaseMsg>> = BTreeMap::new();
    for &ci in kept {
        let c = &plan.candidates[ci];
        let first_ms = if c.msg.first_ms == 0 { now } else { c.msg.first_ms };
        by_receives.entry(c.receives + 1).or_default().push(LeaseMsg { first_ms, ..c.msg });
    }
    let (mut delivered, mut fresh) = (Vec::new(), Vec::new());
    for (receives, msgs) in by_receives {
        let nonce = nonce();
        let due = held_until.saturating_add(sub.record.spec.backoff_ms(receives));
        for m in &msgs {
            let receipt = Receipt { sub_id: sub.record.id, partition, offset: m.offset, nonce, due, receives };
            delivered.push((m.offset, receipt.encode(at.receipt_key), receives, m.first_ms));
        }
        let lease = LeaseRecord {
            nonce,
            receives,
            held_until: Some(held_until),
            delivered_ms: now,
            msgs,
            redriven: false,
            scheduled: false,
        };
        fresh.push((due, lease));
    }
    waiting_leases(at, pick.parked, pick.delayed, pick.scheduled, now, &mut nonce, &mut ops);
    let ops = inline::fold(state, sub.record.id, partition, cursor, ops, fresh);
    let ops = names_cursor(state, sub.record.id, partition, ops);
    Write { ops, delivered, checks_sub }
}

/// The puts of new leases never delivered: the parked messages (due now), those delayed
/// and those scheduled (each due at its time).
fn waiting_leases(
    at: &Target<'_>,
    parked: Vec<LeaseMsg>,
    delayed: BTreeMap<i64, Vec<LeaseMsg>>,
    scheduled: BTreeMap<i64, Vec<LeaseMsg>>,
    now: i64,
    nonce: &mut impl FnMut() -> u64,
    ops: &mut Vec<WriteOp>,
) {
    let parked = std::iter::once((now, parked)).chain(delayed).map(|(due, msgs)| (due, msgs, false));
    for (due, msgs, scheduled) in parked.chain(scheduled.into_iter().map(|(due, msgs)| (due, msgs, true))) {
        if !msgs.is_empty() {
            let lease = LeaseRecord {
                nonce: nonce(),
                receives: 0,
                held_until: None,
                delivered_ms: now,
                msgs,
                redriven: false,
                scheduled,
            };
            ops.push(new_lease(at.sub, at.partition, due, lease));
        }
    }
}

/// `ops`, naming the partition's cursor: every take does, as the cursor is a delete's
/// fence (`Queues::delete`), so a take that leaves it alone (redelivering leases kept as
/// items) checks its version.
fn names_cursor(state: &QueueState, sub_id: u64, partition: u32, mut ops: Vec<WriteOp>) -> Vec<WriteOp> {
    let key = cursor_key(sub_id, partition);
    if let Some(version) = state.cursor_version.filter(|_| ops.iter().all(|op| op.key() != &key)) {
        ops.push(WriteOp::Check { key, expect: Expect::Version(version) });
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(due: i64, receives: u32, held: bool, msgs: &[(u64, Option<u64>)]) -> Lease {
        Lease {
            key: lease_key(7, 0, due, 1),
            due,
            version: 1,
            record: LeaseRecord {
                nonce: 1,
                receives,
                held_until: held.then_some(due),
                delivered_ms: 0,
                msgs: msgs.iter().map(|&(offset, key)| LeaseMsg { offset, first_ms: 0, key }).collect(),
                redriven: false,
                scheduled: false,
            },
            inline: false,
        }
    }

    fn state(next: u64, leases: Vec<Lease>) -> QueueState {
        let cursor = CursorRecord { next, ..CursorRecord::default() };
        QueueState {
            cursor,
            cursor_version: Some(1),
            leases,
            inline_changed: false,
            keyed: false,
            written: Vec::new(),
            paused: false,
            marks: Default::default(),
        }
    }

    fn event(offset: u64, key: Option<&str>, timestamp_ms: i64) -> Event {
        Event {
            partition: 0,
            offset,
            record: crate::segment::Record {
                timestamp_ms,
                key: key.map(|k| bytes::Bytes::from(k.to_owned())),
                headers: Vec::new(),
                value: bytes::Bytes::from_static(b"v"),
                value_is_json: false,
            },
        }
    }

    fn offsets(plan: &Plan, pick: &Pick) -> Vec<u64> {
        pick.chosen.iter().map(|&ci| plan.candidates[ci].msg.offset).collect()
    }

    #[test]
    fn dead_leases_are_the_due_ones_out_of_receives() {
        let s = state(
            10,
            vec![lease(5, 3, true, &[(1, None)]), lease(5, 2, true, &[(2, None)]), lease(50, 3, true, &[(3, None)])],
        );
        assert_eq!(dead_leases(&s, 10, 3), vec![0]);
        assert_eq!(dead_leases(&s, 60, 3), vec![0, 2]);
    }

    /// Table: (what is due, what the log holds, want) → (delivered offsets, cursor after,
    /// parked offsets, blocked). Keyed cases use key hashes 1 and 2 directly in leases.
    #[test]
    fn choose_follows_want_key_order_and_blocked_keys() {
        struct Case {
            name: &'static str,
            keyed: bool,
            leases: Vec<Lease>,
            log: Vec<Event>,
            want: usize,
            delivered: Vec<u64>,
            cursor: u64,
            parked: Vec<u64>,
            blocked: bool,
        }
        let k = |s: &str| Some(key_hash(s.as_bytes()));
        let cases = vec![
            Case {
                name: "unordered: due leases first, then the log, up to want",
                keyed: false,
                leases: vec![lease(1, 1, true, &[(2, None), (3, None)])],
                log: vec![event(10, None, 0), event(11, None, 0), event(12, None, 0)],
                want: 4,
                delivered: vec![2, 3, 10, 11],
                cursor: 12,
                parked: vec![],
                blocked: false,
            },
            Case {
                name: "unordered: a lease not yet due is not a candidate",
                keyed: false,
                leases: vec![lease(100, 1, true, &[(2, None)])],
                log: vec![event(10, None, 0)],
                want: 5,
                delivered: vec![10],
                cursor: 11,
                parked: vec![],
                blocked: false,
            },
            Case {
                name: "keyed: one per key; a later message of a delivered key is parked",
                keyed: true,
                leases: vec![],
                log: vec![event(10, Some("a"), 0), event(11, Some("a"), 0), event(12, Some("b"), 0)],
                want: 5,
                delivered: vec![10, 12],
                cursor: 13,
                parked: vec![11],
                blocked: true,
            },
            Case {
                name: "keyed: a key held by a lease not yet due blocks the log's messages of it",
                keyed: true,
                leases: vec![lease(100, 1, true, &[(5, k("a"))])],
                log: vec![event(10, Some("a"), 0), event(11, Some("b"), 0)],
                want: 5,
                delivered: vec![11],
                cursor: 12,
                parked: vec![10],
                blocked: true,
            },
            Case {
                name: "keyed: a due lease's message goes before a newer one of its key",
                keyed: true,
                leases: vec![lease(1, 1, true, &[(5, k("a"))])],
                log: vec![event(10, Some("a"), 0)],
                want: 5,
                delivered: vec![5],
                cursor: 11,
                parked: vec![10],
                blocked: true,
            },
            Case {
                name: "want reached: the cursor stops where the log's messages stop being taken",
                keyed: false,
                leases: vec![],
                log: vec![event(10, None, 0), event(11, None, 0), event(12, None, 0)],
                want: 2,
                delivered: vec![10, 11],
                cursor: 12,
                parked: vec![],
                blocked: false,
            },
        ];
        for c in cases {
            let s = state(10, c.leases);
            let mut plan = Plan::new(&s, 50, c.keyed, &[]);
            plan.add_new(&c.log, &SubscriptionSpec::default(), None, 50);
            let pick = plan.choose(c.want, 0, 10);
            assert_eq!(offsets(&plan, &pick), c.delivered, "{}", c.name);
            assert_eq!(pick.cursor_next, c.cursor, "{}", c.name);
            assert_eq!(pick.parked.iter().map(|m| m.offset).collect::<Vec<_>>(), c.parked, "{}", c.name);
            let mut pick = pick;
            plan.fit(&mut pick, &c.log.iter().map(|e| (e.offset, e.clone())).collect(), usize::MAX, true, 10);
            assert_eq!(plan.blocked, c.blocked, "{}", c.name);
        }
    }

    #[test]
    fn a_lease_message_below_the_log_start_is_gone_not_delivered() {
        let s = state(10, vec![lease(1, 1, true, &[(2, None), (8, None)])]);
        let mut plan = Plan::new(&s, 50, false, &[]);
        let pick = plan.choose(5, 5, 10);
        assert_eq!(offsets(&plan, &pick), vec![8]);
        assert_eq!(pick.gone, HashSet::from([2]));
    }

    #[test]
    fn messages_within_their_delay_at_the_end_of_the_read_stay_in_the_log() {
        let spec = SubscriptionSpec { delay_ms: 1000, ..SubscriptionSpec::default() };
        let s = state(10, vec![]);
        let mut plan = Plan::new(&s, 5_000, false, &[]);
        // 10 is past its delay; 11 and 12 are not (published at 4,500 and 4,800).
        plan.add_new(&[event(10, None, 1_000), event(11, None, 4_500), event(12, None, 4_800)], &spec, None, 5_000);
        assert_eq!(plan.candidates.len(), 1);
        assert_eq!(plan.wake_at, Some(5_500));
        let pick = plan.choose(5, 0, 10);
        assert_eq!(pick.cursor_next, 11, "the cursor stops at the first message still delayed");
    }

    /// A scheduled message not yet due never stops the cursor (last of the read or not): it
    /// goes into a lease due at its time, holding back no key; one due is a message as any.
    #[test]
    fn scheduled_messages_not_yet_due_move_into_leases_at_their_time_and_stop_nothing() {
        let at = |e: &mut Event, ms: i64| {
            e.record.headers.push((crate::schedule::DELIVER_AT_HEADER.into(), ms.to_string().into()));
        };
        let mut log = vec![event(10, Some("a"), 0), event(11, Some("a"), 0), event(12, None, 0), event(13, None, 0)];
        at(&mut log[0], 900);
        at(&mut log[2], 40);
        at(&mut log[3], 700);
        let s = state(10, vec![]);
        let mut plan = Plan::new(&s, 50, true, &[]);
        plan.add_new(&log, &SubscriptionSpec::default(), None, 50);
        let pick = plan.choose(5, 0, 10);
        assert_eq!(offsets(&plan, &pick), vec![11, 12], "a's next is not held behind it; 12 is due");
        assert_eq!(pick.cursor_next, 14, "past the last, scheduled one");
        let leases: Vec<(i64, Vec<u64>)> =
            pick.scheduled.iter().map(|(due, msgs)| (*due, msgs.iter().map(|m| m.offset).collect())).collect();
        assert_eq!(leases, vec![(700, vec![13]), (900, vec![10])]);
        assert!(pick.parked.is_empty() && pick.delayed.is_empty());
        assert_eq!(plan.wake_at, Some(700));
    }

    #[test]
    fn fit_cuts_new_messages_at_the_first_that_does_not_fit_but_always_answers_one() {
        let s = state(10, vec![]);
        let log: Vec<Event> = (10..14).map(|o| event(o, None, 0)).collect();
        let payloads: HashMap<u64, Event> = log.iter().map(|e| (e.offset, e.clone())).collect();
        let one = event_size(&log[0].record);

        let mut plan = Plan::new(&s, 50, false, &[]);
        plan.add_new(&log, &SubscriptionSpec::default(), None, 50);
        let mut pick = plan.choose(4, 0, 10);
        let (kept, left) = plan.fit(&mut pick, &payloads, 2 * one + 1, false, 10);
        assert_eq!(kept.len(), 2);
        assert_eq!(left, 1);
        assert_eq!(pick.cursor_next, 12, "what did not fit stays in the log");

        let mut plan = Plan::new(&s, 50, false, &[]);
        plan.add_new(&log, &SubscriptionSpec::default(), None, 50);
        let mut pick = plan.choose(4, 0, 10);
        let (kept, _) = plan.fit(&mut pick, &payloads, 0, true, 10);
        assert_eq!(kept.len(), 1, "a receive's first message is taken whatever its size");
    }

    #[test]
    fn the_write_moves_the_cursor_shrinks_taken_leases_and_makes_one_lease_per_receive_count() {
        let sub = test_sub(3);
        let key = ReceiptKey::new(&[9u8; 32]);
        let at = Target { sub: &sub, partition: 0, receipt_key: &key };
        let kinds = |w: &Write| -> Vec<&'static str> {
            w.ops
                .iter()
                .map(|op| match op {
                    WriteOp::Put { key, .. } if key.sk == CURSOR_SK => "cursor",
                    WriteOp::Put { expect: Expect::Absent, .. } => "new lease",
                    WriteOp::Put { .. } => "shrunk lease",
                    WriteOp::Delete { .. } => "deleted lease",
                    WriteOp::Check { .. } => "check",
                })
                .collect()
        };
        // (case, the due lease's messages, the log, want, delivered (offset, receives), the
        // ops): the new leases, small and held, go inline in the cursor item.
        type Case = (&'static str, Vec<(u64, Option<u64>)>, Vec<Event>, usize, Vec<(u64, u32)>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "one of a lease's two: the lease shrinks",
                vec![(2, None), (3, None)],
                vec![],
                1,
                vec![(2, 2)],
                vec!["shrunk lease", "cursor"],
            ),
            (
                "a whole lease and a new message: one lease per receive count",
                vec![(2, None)],
                vec![event(10, None, 0)],
                2,
                vec![(10, 1), (2, 2)],
                vec!["deleted lease", "cursor"],
            ),
        ];
        for (name, msgs, log, want, delivered, ops) in cases {
            let s = state(10, vec![lease(1, 1, true, &msgs)]);
            let mut plan = Plan::new(&s, 50, false, &[]);
            plan.add_new(&log, &SubscriptionSpec::default(), None, 50);
            let pick = plan.choose(want, 0, 10);
            let kept = pick.chosen.clone();
            let mut nonces = 100..;
            let w = write(&at, &s, &plan, pick, &kept, 0, 50, 1_050, || nonces.next().unwrap_or(0));
            assert_eq!(w.delivered.iter().map(|d| (d.0, d.2)).collect::<Vec<_>>(), delivered, "{name}");
            assert_eq!(kinds(&w), ops, "{name}");
            let cursor = w.ops.iter().find_map(|op| match op {
                WriteOp::Put { key, value, .. } if key.sk == CURSOR_SK => layout::decode::<CursorItem>("c", value).ok(),
                _ => None,
            });
            let inline: Vec<u32> =
                cursor.map(|c| c.leases.iter().map(|l| l.record.receives).collect()).unwrap_or_default();
            assert_eq!(inline.len(), delivered.len().min(2), "{name}: one inline lease per receive count");
            assert!(!w.checks_sub, "{name}");
        }
    }

    /// Redelivering a lease kept as an item (too large for the cursor item) leaves the cursor
    /// alone, so the take checks its version: the cursor is what a delete fences, not the
    /// subscription's record, which no such take names.
    #[test]
    fn a_take_that_leaves_the_cursor_alone_checks_its_version_not_the_subscription() {
        let sub = test_sub(3);
        let msgs: Vec<(u64, Option<u64>)> = (0..60).map(|o| (o, None)).collect();
        let s = state(60, vec![lease(1, 1, true, &msgs)]);
        let mut plan = Plan::new(&s, 50, false, &[]);
        let pick = plan.choose(60, 0, 60);
        let kept = pick.chosen.clone();
        let key = ReceiptKey::new(&[9u8; 32]);
        let at = Target { sub: &sub, partition: 0, receipt_key: &key };
        let w = write(&at, &s, &plan, pick, &kept, 0, 50, 1_050, || 1);
        assert_eq!(w.delivered.len(), 60);
        let cursor = cursor_key(sub.record.id, 0);
        assert!(w.ops.iter().all(|op| !matches!(op, WriteOp::Put { key, .. } if *key == cursor)), "{:?}", w.ops);
        let checked =
            w.ops.iter().any(|op| matches!(op, WriteOp::Check { key, expect: Expect::Version(1) } if *key == cursor));
        assert!(checked, "the cursor's version is checked: {:?}", w.ops);
        let record = crate::keys::subscription_key(sub.topic.id, &sub.name);
        assert!(w.ops.iter().all(|op| op.key() != &record) && !w.checks_sub, "{:?}", w.ops);
    }

    #[test]
    fn a_partitions_first_write_checks_the_subscription() {
        let sub = test_sub(3);
        let mut s = state(0, vec![]);
        s.cursor_version = None;
        let mut plan = Plan::new(&s, 50, false, &[]);
        plan.add_new(&[event(0, None, 0)], &SubscriptionSpec::default(), None, 50);
        let pick = plan.choose(1, 0, 0);
        let kept = pick.chosen.clone();
        let key = ReceiptKey::new(&[9u8; 32]);
        let at = Target { sub: &sub, partition: 0, receipt_key: &key };
        let w = write(&at, &s, &plan, pick, &kept, 0, 50, 1_050, || 1);
        assert!(w.checks_sub);
        assert!(matches!(&w.ops[0], WriteOp::Check { expect: Expect::Version(3), .. }));
    }
}
