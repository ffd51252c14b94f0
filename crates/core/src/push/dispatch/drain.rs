//! A dispatcher function's run ([`Dispatcher::drain`]): each push subscription with
//! something due is driven under its run lease, its workers growing to its in-flight
//! limit while batches are found, and driven again while other subscriptions deliver.

use super::*;

impl Dispatcher {
    /// Delivers what the push subscriptions of `topics` have due, all at once, each with up
    /// to `max_in_flight` workers under its run lease (a subscription another run holds is
    /// left to it, told to drain once more), until nothing is left or no attempt would end
    /// by `deadline_ms`: a dispatcher function's run. A sweep (`Topics::All`) first looks
    /// without writing, so a subscription with nothing due costs it reads only. What comes
    /// due soon after is handed over (`hand_over`, in `stay.rs`). Counts are flushed at the end.
    pub async fn drain(&self, topics: &Topics, deadline_ms: i64) -> Result<Drained, Error> {
        let mut work = JoinSet::new();
        let sweep = *topics == Topics::All;
        let subs = self.subscriptions(topics).await?;
        let running = Arc::new(watch::Sender::new(subs.len()));
        for sub in subs.clone() {
            let (this, running) = (self.clone(), running.clone());
            work.spawn(async move { this.drive_while_others_do(&sub, deadline_ms, sweep, &running).await });
        }
        let (total, first_error) = join(work).await;
        self.hand_over(&subs).await;
        self.flush_stats().await;
        first_error.map_or(Ok(total), Err)
    }

    /// Drives `sub`, then again every [`REDRIVE_MS`] while another subscription's drive of
    /// the same drain is under way (`running` counts them): the stream's mapping starts no
    /// other run while this one lasts, so a subscription that found nothing for a moment
    /// would otherwise wait for the busiest one to end. Ends once no drive is under way.
    async fn drive_while_others_do(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        sweep: bool,
        running: &watch::Sender<usize>,
    ) -> (Drained, Option<Error>) {
        let mut total = Drained::default();
        loop {
            let (drained, error) =
                self.drive(sub, deadline_ms, sweep).await.unwrap_or_else(|e| (Drained::default(), Some(e)));
            total.add(drained);
            running.send_modify(|n| *n -= 1);
            if error.is_some() || *running.borrow() == 0 {
                return (total, error);
            }
            let mut others = running.subscribe();
            let idle = tokio::select! {
                biased; // the clock's wake first: a simulation's schedule stays as it was
                () = self.queues.log().clock().sleep(REDRIVE_MS) => *running.borrow() == 0,
                _ = others.wait_for(|n| *n == 0) => true,
            };
            if idle || self.now_ms() + attempt_ms(sub) as i64 > deadline_ms {
                return (total, None);
            }
            running.send_modify(|n| *n += 1);
        }
    }

    /// One subscription's part of a drain: claims its run lease, drains it, and releases
    /// the lease, draining again while another run asked for it meanwhile.
    pub(super) async fn drive(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        sweep: bool,
    ) -> Result<(Drained, Option<Error>), Error> {
        let none = Ok((Drained::default(), None));
        if sweep {
            match self.queues.push_next_due(sub).await {
                Ok(Some(at)) if at <= self.now_ms() => {}
                Ok(_) => return none,
                Err(e) if gone(&e) => return none,
                Err(e) => return Err(e),
            }
        }
        let store = self.queues.log().store().clone();
        let holder = self.queues.log().random().next_u64();
        let until = lease::lease_until(self.now_ms(), attempt_ms(sub), deadline_ms);
        let lease = match lease::claim(store.as_ref(), sub.id, holder, until).await? {
            Claim::Held(lease) => Arc::new(tokio::sync::Mutex::new(lease)),
            Claim::Busy => return none,
        };
        self.flows.adopt(sub.id, self.queues.push_flow(sub).await?);
        let mut total = Drained::default();
        loop {
            let (drained, error) = self.drain_sub(sub, deadline_ms, &lease).await;
            total.add(drained);
            let released = lease.lock().await.release(store.as_ref()).await;
            let again = matches!(released, Ok(Release::Wanted)) && error.is_none();
            if again && self.now_ms() + attempt_ms(sub) as i64 <= deadline_ms {
                continue;
            }
            if again {
                // No time for another drain: released for the next run, which the next wake
                // or sweep starts.
                lease.lock().await.release(store.as_ref()).await?;
            }
            return Ok((total, error.or(released.err())));
        }
    }

    /// Whether this run may start an attempt now: its lease outlasts the attempt, renewed
    /// if it would not; `false` once the lease is no longer this run's.
    async fn keep_lease(
        &self,
        sub: &PushSubscription,
        lease: &tokio::sync::Mutex<RunLease>,
        deadline_ms: i64,
    ) -> Result<bool, Error> {
        let mut lease = lease.lock().await;
        let (now, attempt) = (self.now_ms(), attempt_ms(sub));
        if lease.renewal(now, attempt) == Renewal::Keep {
            return Ok(true);
        }
        let kept =
            lease.renew(self.queues.log().store().as_ref(), lease::lease_until(now, attempt, deadline_ms)).await?;
        if !kept {
            tracing::warn!(topic = %sub.topic, subscription = %sub.name, "push run lease lost to another run");
        }
        Ok(kept)
    }

    /// Passes of workers on one subscription until a pass delivers nothing: a worker
    /// stops at its first empty receive, which a receive racing the others for the same
    /// partitions can answer while messages are left, so one pass may not be enough.
    async fn drain_sub(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        lease: &Arc<tokio::sync::Mutex<RunLease>>,
    ) -> (Drained, Option<Error>) {
        let mut total = Drained::default();
        loop {
            let (delivered, error) = self.pass(sub, deadline_ms, lease).await;
            total.add(delivered);
            if error.is_some() || delivered.deliveries == 0 {
                return (total, error);
            }
        }
    }

    /// One pass: a worker, and one more (up to `max_in_flight` at once) each time one of
    /// them takes a batch, until every worker has met an empty receive. With nothing due,
    /// as in most sweeps, one empty receive is the whole cost; with a backlog, the workers
    /// grow to `max_in_flight` within a few batches and stay there while batches are found,
    /// a worker that stops being replaced by the next batch taken. (Rounds of workers that
    /// each ran until their first empty receive kept one worker alone as long as messages
    /// came as fast as it delivered them.)
    async fn pass(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        lease: &Arc<tokio::sync::Mutex<RunLease>>,
    ) -> (Drained, Option<Error>) {
        let (found, mut taken) = mpsc::unbounded_channel();
        let mut workers = JoinSet::new();
        self.spawn_worker(&mut workers, sub, deadline_ms, lease, &found);
        let (mut total, mut first_error) = (Drained::default(), None);
        loop {
            // Biased: the same schedule gives the same history (the simulations replay it).
            tokio::select! {
                biased;
                Some(()) = taken.recv() => {
                    // Unjoined workers count, ended or not: never more than max_in_flight.
                    let limit = self.flows.limit(sub.id, sub.push.max_in_flight);
                    if first_error.is_none() && workers.len() < limit as usize {
                        self.spawn_worker(&mut workers, sub, deadline_ms, lease, &found);
                    }
                }
                done = workers.join_next() => match done {
                    None => return (total, first_error),
                    Some(Ok((delivered, error))) => {
                        total.add(delivered);
                        first_error = first_error.or(error);
                    }
                    Some(Err(e)) => tracing::error!(error = %e, "push worker failed"),
                },
            }
        }
    }

    /// Starts a worker of `sub` in `workers`; `found` is told of each batch it takes.
    fn spawn_worker(
        &self,
        workers: &mut JoinSet<(Drained, Option<Error>)>,
        sub: &PushSubscription,
        deadline_ms: i64,
        lease: &Arc<tokio::sync::Mutex<RunLease>>,
        found: &mpsc::UnboundedSender<()>,
    ) {
        let (this, sub, lease, found) = (self.clone(), sub.clone(), lease.clone(), found.clone());
        workers.spawn(async move {
            this.drain_one(&sub, deadline_ms, &lease, &found)
                .await
                .map_or_else(|e| (Drained::default(), Some(e)), |d| (d, None))
        });
    }

    async fn drain_one(
        &self,
        sub: &PushSubscription,
        deadline_ms: i64,
        lease: &tokio::sync::Mutex<RunLease>,
        found: &mpsc::UnboundedSender<()>,
    ) -> Result<Drained, Error> {
        let mut done = Drained::default();
        let attempt = attempt_ms(sub) as i64;
        // The previous batch's acks, carried by the next receive.
        let mut acks: Vec<String> = Vec::new();
        while self.now_ms() + attempt <= deadline_ms {
            if !self.keep_lease(sub, lease, deadline_ms).await? {
                break;
            }
            // Received only once it can be sent: waiting spends no receive count.
            let Ok(_slot) = self.flows.try_start(sub.id, self.now_ms(), sub.push.max_in_flight) else { break };
            let messages = match self.receive_acking(sub, std::mem::take(&mut acks)).await {
                Ok(m) if m.is_empty() => return Ok(done),
                Ok(m) => m,
                Err(e) if gone(&e) => return Ok(done),
                Err(e) => return Err(e),
            };
            // Another worker may start receiving while this batch is delivered (the pass
            // outlives its workers, so the channel is open).
            let _ = found.send(());
            done.deliveries += 1;
            done.messages += messages.len() as u64;
            match self.deliver_settling(sub, messages).await {
                Ok((failed, settled)) => {
                    done.failed_messages += failed as u64;
                    acks = settled;
                }
                // Deleted while its batch was out: nothing is left to settle or deliver.
                Err(e) if gone(&e) => return Ok(done),
                Err(e) => return Err(e),
            }
        }
        // Out of time or lease: the last batch's acks on their own.
        if !acks.is_empty() {
            match self.queues.ack(&sub.topic, &sub.name, &acks).await {
                Err(e) if !gone(&e) => return Err(e),
                _ => {}
            }
        }
        Ok(done)
    }

    /// A drain's receive (nothing waited for), carrying `acks`. If it fails they may be
    /// unwritten, as a failed ack's: their messages are pushed again once their window
    /// ends (at least once), under the same webhook-id.
    async fn receive_acking(&self, sub: &PushSubscription, acks: Vec<String>) -> Result<Vec<Message>, Error> {
        self.queues.ack_and_receive_for_push(sub, &acks, &self.receive_request(sub, 0), None).await
    }

    /// Takes up the stored flow state of `sub` (its limit, a `Retry-After`, a suspension).
    pub(super) async fn adopt_flow(&self, sub: &PushSubscription) {
        match self.queues.push_flow(sub).await {
            Ok(stored) => self.flows.adopt(sub.id, stored),
            Err(e) => tracing::warn!(subscription = %sub.name, error = %e, "push flow state not read"),
        }
    }
}
