//! Receiving: visiting partitions, taking due leases and new messages under conditional
//! writes, burying what exhausted its receives, and answering only live windows.

use super::cache::LookHeads;
use super::rate::Gate;
use super::state::{load_limit, Start};
use super::take::{self, Plan};
use super::turns::Idle;
use super::*;
use crate::log::read::Lookup;
use crate::metrics;
use crate::Code;

/// What a receive answers: the messages whose visibility window has not ended by the time
/// it answers. A receive slow to answer (its later partitions' reads took longer than an
/// earlier one's window) would otherwise hand out messages another receive may hold by then;
/// those are left as a lost answer leaves them, held by nobody, due again. A window of 0
/// (SQS's) asked for exactly that: the messages are answered, and visible to others at once.
fn answerable(sub: &Sub, messages: Vec<Message>, held: &[(usize, i64)], now: i64, visibility: u64) -> Vec<Message> {
    if visibility == 0 || held.iter().all(|(_, until)| *until > now) {
        return messages;
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(messages.len());
    let mut messages = messages.into_iter();
    for &(end, until) in held {
        let take = messages.by_ref().take(end - start);
        if until > now {
            out.extend(take);
        } else {
            let dropped = take.count();
            let (topic, subscription) = (&sub.topic.name, &sub.name);
            let why = "receive answered after its visibility window ended; those messages are due again";
            tracing::warn!(%topic, %subscription, dropped, "{why}");
        }
        start = end;
    }
    out
}

/// Writes one take makes that only pass over expired or filtered messages before it
/// answers (nothing yet, look again soon).
const MAX_PASSES: usize = 8;

impl Queues {
    /// Receives up to `max_messages`, waiting up to `wait_ms` for the first. Partitions are
    /// visited from a random one, so concurrent receivers mostly work on different partitions.
    pub async fn receive(&self, topic: &str, name: &str, req: &ReceiveRequest) -> Result<Vec<Message>, Error> {
        Self::check_receive(req)?;
        let mut sub = self.hot_sub(topic, name).await?;
        on_fresh_sub!(self, sub, pull, self.receive_on(&sub, req).await)
    }

    pub(super) fn check_receive(req: &ReceiveRequest) -> Result<(), Error> {
        if !(1..=MAX_RECEIVE_MESSAGES).contains(&req.max_messages) {
            return Err(Error::invalid(
                Code::InvalidMaxMessages,
                format!("max_messages must be between 1 and {MAX_RECEIVE_MESSAGES}"),
            ));
        }
        if req.wait_ms > MAX_RECEIVE_WAIT_MS {
            return Err(Error::invalid(Code::InvalidWait, format!("wait_ms must be at most {MAX_RECEIVE_WAIT_MS}")));
        }
        if req.visibility_timeout_ms.is_some_and(|v| v > MAX_VISIBILITY_TIMEOUT_MS) {
            return Err(Error::invalid(
                Code::InvalidVisibilityTimeout,
                format!("visibility_timeout_ms must be at most {MAX_VISIBILITY_TIMEOUT_MS} (12 h)"),
            ));
        }
        Ok(())
    }

    /// Receives for a pull or a push subscription, counted in [`metrics::RECEIVED`].
    pub(super) async fn receive_on(&self, sub: &Sub, req: &ReceiveRequest) -> Result<Vec<Message>, Error> {
        self.receive_until(sub, req, None).await
    }

    /// As [`Self::receive_on`], its wait ended early once `stop` turns true: only while it
    /// waits, never while it takes (a take cut off after its write would hold messages
    /// for no one and spend a delivery of each).
    pub(super) async fn receive_until(
        &self,
        sub: &Sub,
        req: &ReceiveRequest,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        let messages = self.take_messages(sub, req, None, stop).await?;
        sub.count(metrics::RECEIVED, messages.len() as u64);
        Ok(messages)
    }

    pub(super) async fn take_messages(
        &self,
        sub: &Sub,
        req: &ReceiveRequest,
        mut riding: Option<&mut Riding>,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
    ) -> Result<Vec<Message>, Error> {
        let visibility = req.visibility_timeout_ms.unwrap_or(sub.record.spec.visibility_timeout_ms);
        let receipt_key = self.receipt_key().await?;
        let deadline = self.now() + req.wait_ms as i64;
        // A pull receive's first look reads the head of the partition it takes from with
        // that partition's queue state (`LookHeads`); a push receive's may take heads this
        // process read a moment ago.
        let mut recent = sub.record.spec.push.is_some();
        let mut first = !recent;
        loop {
            // With a rate, tokens first: a receive that finds none visits no partition.
            let (want, tokens) = match self.rate_gate(sub, req.max_messages).await? {
                Gate::Open(want, tokens) => (want, tokens),
                Gate::Shut(next_token) => {
                    self.settle_unridden(sub, riding.as_deref_mut(), receipt_key).await?;
                    let now = self.now();
                    if now >= deadline || stop.is_some_and(|s| *s.borrow()) {
                        return Ok(Vec::new());
                    }
                    self.nap_unless(stop, now, deadline, (Some(next_token), false), &[]).await?;
                    continue;
                }
            };
            let mut heads = match std::mem::take(&mut first) {
                true => LookHeads::First,
                false => LookHeads::All(self.heads_of(&sub.topic, std::mem::take(&mut recent)).await?),
            };
            let visited = self.visit(sub, &mut heads, (want, visibility), receipt_key, riding.as_deref_mut()).await;
            if let Some((rate, taken, at)) = tokens {
                let used = visited.as_ref().map_or(0, |v| v.messages.len());
                self.give_back_tokens(sub, rate, taken.saturating_sub(used), at).await;
            }
            let Visit { messages, held, wake_at, idle, blocked } = visited?;
            self.settle_unridden(sub, riding.as_deref_mut(), receipt_key).await?;
            let now = self.now();
            if !messages.is_empty() {
                return Ok(answerable(sub, messages, &held, now, visibility));
            }
            if now >= deadline || stop.is_some_and(|s| *s.borrow()) {
                return Ok(messages);
            }
            self.nap_unless(stop, now, deadline, (wake_at, blocked), &idle).await?;
        }
    }

    /// One look at the partitions for up to `max_messages`, from a random one (or the acks'
    /// riding): what it took, and what to wait for if nothing.
    async fn visit(
        &self,
        sub: &Sub,
        heads: &mut LookHeads,
        (max_messages, visibility): (usize, u64),
        receipt_key: &ReceiptKey,
        mut riding: Option<&mut Riding>,
    ) -> Result<Visit, Error> {
        let partitions = sub.topic.spec.partitions;
        let one_partition = sub.record.spec.push.is_some();
        let mut v = Visit::default();
        let mut bytes_left = self.log.limits().max_response_bytes;
        // From the partition of the acks riding, if any: they ride on its write.
        let random = || (self.nonce() % u64::from(partitions.max(1))) as u32;
        let start = riding.as_ref().filter(|r| r.results.is_none()).map_or_else(random, |r| r.partition);
        // First the partitions nobody in this process has a turn on, then, if more is
        // wanted, the busy ones, each once its turn comes.
        let mut visits: VecDeque<(u32, bool)> = (0..partitions).map(|i| ((start + i) % partitions, true)).collect();
        let turns = &self.local.turns;
        while let Some((p, first_pass)) = visits.pop_front() {
            let messages = &mut v.messages;
            // A push batch is one partition's (one lease: retried as it was, `take.rs`).
            if messages.len() >= max_messages || bytes_left == 0 || (one_partition && !messages.is_empty()) {
                break;
            }
            let acks = riding.as_deref_mut().filter(|r| r.partition == p && r.results.is_none());
            // A partition this process saw idle, its head not moved since: not read.
            let hint = if acks.is_some() { Ok(None) } else { self.idle_hint(heads, sub, p).await };
            match hint {
                Ok(Some(hint)) => {
                    waiting((&mut v.wake_at, &mut v.idle), &sub.topic, p, hint.wake_at, Some(hint.cursor));
                    continue;
                }
                Ok(None) => {}
                Err(e) if !messages.is_empty() => {
                    receive_stopped(sub, p, &e);
                    break;
                }
                Err(e) => return Err(e),
            }
            let turn =
                if first_pass { turns.try_now(sub.record.id, p) } else { Some(turns.wait(sub.record.id, p).await) };
            let Some(turn) = turn else {
                visits.push_back((p, false));
                continue;
            };
            let want = max_messages - messages.len();
            let first = messages.is_empty();
            let took = match self.take_start(heads, sub, p, want).await {
                Ok(start) => {
                    self.take(sub, &turn, start, want, visibility, receipt_key, &mut bytes_left, first, acks).await
                }
                Err(e) => Err(e),
            };
            let taken = match took {
                Ok(taken) => taken,
                // Messages already taken from other partitions are answered, not stranded.
                Err(e) if !messages.is_empty() => {
                    receive_stopped(sub, p, &e);
                    break;
                }
                Err(e) => return Err(e),
            };
            turns.note(&turn, taken.idle(self.now()));
            drop(turn);
            if !taken.messages.is_empty() {
                v.held.push((messages.len() + taken.messages.len(), taken.held_until));
            }
            messages.extend(taken.messages);
            v.blocked |= taken.blocked;
            waiting((&mut v.wake_at, &mut v.idle), &sub.topic, p, taken.wake_at, taken.idle_at);
        }
        Ok(v)
    }

    /// Partition `p`'s idle hint if it serves this look, its head not moved since: then the
    /// look passes over it unread. Only a hinted partition's head is needed here, but
    /// passing over it means going on to another: every head is read.
    async fn idle_hint(&self, heads: &mut LookHeads, sub: &Sub, p: u32) -> Result<Option<Idle>, Error> {
        let turns = &self.local.turns;
        if turns.idle(sub.record.id, p, 0, self.now()).is_none() {
            return Ok(None);
        }
        let head = self.head_in(heads, &sub.topic, p).await?;
        Ok(turns.idle(sub.record.id, p, head.next, self.now()))
    }

    /// Acks that found no write to ride on are written before the answer or a wait; if
    /// that fails, so does the receive (what it took comes back when its window ends).
    async fn settle_unridden(
        &self,
        sub: &Sub,
        riding: Option<&mut Riding>,
        receipt_key: &ReceiptKey,
    ) -> Result<(), Error> {
        if let Some(r) = riding.filter(|r| r.results.is_none()) {
            let turn = self.local.turns.wait(sub.record.id, r.partition).await;
            self.settle_riding(sub, &turn, r, receipt_key).await?;
        }
        Ok(())
    }

    /// As [`Self::nap`], cut short once `stop` (if any) turns true.
    async fn nap_unless(
        &self,
        stop: Option<&tokio::sync::watch::Receiver<bool>>,
        now: i64,
        deadline: i64,
        (wake_at, blocked): (Option<i64>, bool),
        idle: &[(TopicConfig, u32, u64)],
    ) -> Result<(), Error> {
        let napping = self.nap(now, deadline, wake_at, blocked, idle);
        match stop.cloned() {
            Some(mut stop) => tokio::select! {
                napped = napping => napped,
                _ = stop.wait_for(|s| *s) => Ok(()),
            },
            None => napping.await,
        }
    }

    /// Waits until `deadline`, a lease's due time (`wake_at`), the next look at a blocked
    /// partition, or a commit on an `idle` partition, whichever comes first.
    async fn nap(
        &self,
        now: i64,
        deadline: i64,
        wake_at: Option<i64>,
        blocked: bool,
        idle: &[(TopicConfig, u32, u64)],
    ) -> Result<(), Error> {
        let mut until = deadline;
        if let Some(t) = wake_at {
            until = until.min(t);
        }
        if blocked {
            until = until.min(now + self.log.poll_interval_ms() as i64);
        }
        let nap = (until - now).max(1) as u64;
        // A resume in this process ends the nap (`pause.rs`); others' within a poll interval.
        let resumed = self.local.resumed.notified();
        let napping = async {
            if idle.is_empty() {
                self.log.clock().sleep(nap).await;
                Ok(())
            } else {
                self.log.wait_for_any(idle, nap).await
            }
        };
        tokio::select! {
            biased; // the clock's wake first: a simulation's schedule stays as it was
            napped = napping => napped,
            _ = resumed => Ok(()),
        }
    }

    /// Takes up to `want` messages of the partition `turn` is on: due leases first (dead ones go to the
    /// DLQ), then new messages from the log; one atomic write, retried on contention.
    /// `bytes_left` is what the receive's answer may still grow by; `first` says nothing
    /// has been taken yet (the first message is taken whatever its size). The decisions
    /// are `take.rs`'s; this reads what they need and writes what they answer. `riding`:
    /// acks of this partition, written with the take's write (or alone if it writes nothing).
    /// A paused partition (`pause.rs`), or one whose settings changed since `sub` was read
    /// (`patch.rs`), gives nothing (`QueueState::held_back`).
    #[allow(clippy::too_many_arguments)]
    async fn take(
        &self,
        sub: &Sub,
        turn: &Turn,
        mut start: Start,
        want: usize,
        visibility: u64,
        receipt_key: &ReceiptKey,
        bytes_left: &mut usize,
        first: bool,
        mut riding: Option<&mut Riding>,
    ) -> Result<Taken, Error> {
        let (spec, filter) = (&sub.record.spec, sub.filter()?);
        let (partition, mut attempt, mut burials, mut passes, mut scheduling) = (turn.partition(), 0, 0, 0, false);
        while attempt < MAX_ATTEMPTS {
            let now = self.now();
            let read = self.read_take(sub, turn, want, &mut start, &mut riding, receipt_key).await?;
            let Some((state, carried)) = read else { continue };
            if state.paused || state.marks.config > sub.record.config {
                if !carried || self.acks_alone(sub, partition, &state, &mut riding, &mut attempt).await? {
                    return state.held_back(sub);
                }
                continue;
            }
            let dead = take::dead_leases(&state, now, spec.max_receive_count);
            if !dead.is_empty() && burials < MAX_BURIALS {
                burials += 1;
                match self.bury(sub, partition, &state, &dead, now).await? {
                    Ok(()) => written(&mut riding, carried),
                    Err(e) => self.lost_race(e, &mut attempt).await?,
                }
                continue;
            }
            let (at, passing) = (Target { sub, partition, receipt_key }, (&dead[..], filter.as_ref(), scheduling));
            let Some(choice) = self
                .choose(&at, &state, passing, &mut start.head, (want, *bytes_left, first), now, &mut attempt)
                .await?
            else {
                continue;
            };
            let Choice { plan, pick, kept, left, payloads, skipped, filtered } = choice;
            // Only expired or filtered messages to pass over, or scheduled ones to move: written,
            // then the partition is looked at again (a few times: a long run is left to the next receive).
            let only_expired = kept.is_empty() && pick.parked.is_empty() && pick.delayed.is_empty();
            let nothing = only_expired && pick.gone.is_empty() && pick.scheduled.is_empty() && skipped + filtered == 0;
            // Nothing to take: the acks are written alone (or, on a lost race, read again).
            let alone = carried && (nothing || (only_expired && passes == MAX_PASSES));
            if alone && !self.acks_alone(sub, partition, &state, &mut riding, &mut attempt).await? {
                continue;
            }
            if nothing {
                return Ok(nothing_taken(&plan, &state, &dead, start.head, now));
            }
            if only_expired && passes == MAX_PASSES {
                return Ok(Taken { blocked: true, ..Taken::default() });
            }
            // The window counts from the write, not from the reads before it: a slow read
            // must not shorten it.
            let held_until = self.now().max(now).saturating_add(visibility as i64);
            scheduling |= !pick.scheduled.is_empty(); // the next pass reads ahead past the rest
            let write = take::write(&at, &state, &plan, pick, &kept, skipped, now, held_until, || self.nonce());
            if let Err(e) = self.write_on(sub, write.ops).await? {
                if write.checks_sub && matches!(e, StorageError::ConditionFailed { op: 0, .. }) {
                    return Err(sub.not_found());
                }
                // An unknown outcome may have leased messages to no one: they come back
                // when that visibility window ends, so nothing is lost or held twice.
                self.lost_race(e, &mut attempt).await?;
                continue;
            }
            written(&mut riding, carried);
            if only_expired {
                passes += 1;
                continue;
            }
            *bytes_left = left;
            return Ok(taken(plan, write.delivered, payloads, held_until));
        }
        Ok(Taken { blocked: true, ..Taken::default() })
    }

    /// A take's read of the partition `turn` is on ([`load_limit`]), unless `start` holds
    /// it (a first look's, for the first attempt). With the acks `riding` applied to it
    /// (`true`) if their leases are inline; if not, they are settled on their own and `None`
    /// says read again. The head is read again if another receiver took events published
    /// after it was read.
    async fn read_take(
        &self,
        sub: &Sub,
        turn: &Turn,
        want: usize,
        start: &mut Start,
        riding: &mut Option<&mut Riding>,
        receipt_key: &ReceiptKey,
    ) -> Result<Option<(QueueState, bool)>, Error> {
        let partition = turn.partition();
        let mut state = match start.state.take() {
            Some(state) => state,
            None => self.load(sub, partition, load_limit(sub, want)).await?,
        };
        let carried = riding.as_deref().is_some_and(|acks| super::inline::ack(&mut state, &acks.receipts));
        if let Some(acks) = riding.take_if(|_| !carried) {
            self.settle_riding(sub, turn, acks, receipt_key).await?;
            return Ok(None);
        }
        if state.cursor.next > start.head.next {
            start.head = topics::head(self.store(), sub.topic.id, partition).await?.0;
        }
        Ok(Some((state, carried)))
    }

    /// What one attempt of a take would take, from the state read (with `dead` leases left
    /// out; messages not passing `filter` passed over): the plan, its pick fitted to the answer's room (`want`, the bytes left, whether
    /// it is the first), the payloads, what `left` of the room, and the expired and filtered
    /// messages passed over. `None`: retention moved the log start meanwhile (an attempt
    /// counted); look again.
    #[allow(clippy::too_many_arguments)]
    async fn choose(
        &self,
        at: &Target<'_>,
        state: &QueueState,
        (dead, filter, lookahead): (&[usize], Option<&Filter>, bool),
        head: &mut HeadRecord,
        (want, bytes_left, first): (usize, usize, bool),
        now: i64,
        attempt: &mut usize,
    ) -> Result<Option<Choice>, Error> {
        let (sub, partition) = (at.sub, at.partition);
        let spec = &sub.record.spec;
        let mut plan = Plan::new(state, now, spec.ordering == Ordering::Key, dead);
        if spec.push.is_some() {
            plan.retry_batches_alone();
        }
        plan.filtering = filter.is_some();
        plan.scheduling = lookahead;
        // Where new messages start: offsets below the log start were removed by retention
        // before the queue took them, and are counted as expired when the cursor passes them.
        let mut base = state.cursor.next.max(head.start);
        let room = plan.room(want);
        let Some(events) = self.read_new(sub, partition, &mut base, room, head, attempt).await? else {
            return Ok(None);
        };
        plan.add_new(&events, spec, filter, now);
        let mut payloads: HashMap<u64, Event> = events.into_iter().map(|e| (e.offset, e)).collect();
        let mut pick = plan.choose(want, head.start, base);
        // The payloads of what was chosen from leases (new messages' are read), then the
        // answer's size: what does not fit stays (in its lease, or in the log).
        payloads.extend(self.events_at(&sub.topic, partition, &plan.lease_offsets(&pick), *head).await?);
        let (kept, left) = plan.fit(&mut pick, &payloads, bytes_left, first, base);
        let (skipped, filtered) = (base - state.cursor.next.min(base), plan.filtered_below(pick.cursor_next));
        Ok(Some(Choice { plan, pick, kept, left, payloads, skipped, filtered }))
    }

    /// Up to `room` new messages of the log from `base` (none if `room` is 0 or the log
    /// ends there); `base` moves up if the log start moved past it since the heads were
    /// read. `None` when retention moved the log start past `base` while it was read: the
    /// head is read again (into `head`), an attempt counted, and the take looks again from
    /// the new start (what it passes over is counted as expired then).
    async fn read_new(
        &self,
        sub: &Sub,
        partition: u32,
        base: &mut u64,
        room: usize,
        head: &mut HeadRecord,
        attempt: &mut usize,
    ) -> Result<Option<Vec<Event>>, Error> {
        if room == 0 || *base >= head.next {
            return Ok(Some(Vec::new()));
        }
        let limits = *self.log.limits();
        let max = room.min(limits.max_read_events);
        match self.log.read_at(&sub.topic, partition, *base, (max, limits.max_read_bytes), *head, Lookup::Holder).await
        {
            Ok(batch) => {
                *base = (*base).max(batch.events.first().map_or(*base, |e| e.offset));
                Ok(Some(batch.events))
            }
            Err(Error::OffsetOutOfRange { .. }) => {
                *attempt += 1;
                *head = topics::head(self.store(), sub.topic.id, partition).await?.0;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// A receive that answers what it took so far, its next partition having failed it.
fn receive_stopped(sub: &Sub, partition: u32, e: &Error) {
    let (topic, subscription) = (&sub.topic.name, &sub.name);
    tracing::warn!(%topic, %subscription, partition, error = %e, "receive stopped early");
}

/// Adds to what a receive with nothing to answer waits for: when something of partition
/// `p` comes due, and a commit past `cursor` if it is idle there.
fn waiting(
    (wake_at, idle): (&mut Option<i64>, &mut Vec<(TopicConfig, u32, u64)>),
    topic: &TopicConfig,
    p: u32,
    due: Option<i64>,
    cursor: Option<u64>,
) {
    *wake_at = due.map_or(*wake_at, |t| min_time(*wake_at, t));
    if let Some(cursor) = cursor {
        idle.push((topic.clone(), p, cursor));
    }
}

/// A take that took nothing: idle when nothing is due and the log has nothing past the
/// cursor (wait for a publish), blocked when keys or dead leases hold messages back (look
/// again soon), and when the next lease or delayed message is due.
fn nothing_taken(plan: &Plan, state: &QueueState, dead: &[usize], head: HeadRecord, now: i64) -> Taken {
    let mut taken = Taken { wake_at: plan.wake_at, blocked: plan.blocked, ..Taken::default() };
    let nothing_due = !state.leases.iter().any(|l| l.due <= now);
    if nothing_due && state.cursor.next >= head.next {
        taken.idle_at = Some(state.cursor.next);
    } else if !plan.candidates.is_empty() || !dead.is_empty() {
        taken.blocked = true;
    }
    taken
}

/// The answer of a take whose write landed: the delivered messages in offset order, with
/// their payloads.
fn taken(
    plan: Plan,
    mut delivered: Vec<(u64, String, u32, i64)>,
    mut payloads: HashMap<u64, Event>,
    held_until: i64,
) -> Taken {
    delivered.sort_unstable_by_key(|(offset, ..)| *offset);
    let messages = delivered
        .into_iter()
        .filter_map(|(offset, receipt, receive_count, first_receive_ms)| {
            payloads.remove(&offset).map(|event| Message {
                receipt,
                receive_count,
                first_receive_ms,
                held_until_ms: held_until,
                event,
            })
        })
        .collect();
    Taken { messages, held_until, wake_at: plan.wake_at, blocked: plan.blocked, idle_at: None }
}

/// What one look at the partitions took ([`Queues::visit`]): the messages, and per take
/// the end (exclusive) of its messages among them and their window's end; with nothing,
/// when to look again.
#[derive(Default)]
struct Visit {
    messages: Vec<Message>,
    held: Vec<(usize, i64)>,
    wake_at: Option<i64>,
    idle: Vec<(TopicConfig, u32, u64)>,
    blocked: bool,
}

/// What one attempt of a take chose ([`Queues::choose`]).
struct Choice {
    plan: Plan,
    pick: take::Pick,
    kept: Vec<usize>,
    left: usize,
    payloads: HashMap<u64, Event>,
    skipped: u64,
    filtered: u64,
}
