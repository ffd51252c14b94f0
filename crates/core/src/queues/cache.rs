//! Subscriptions cached for receives and settles (`serve`'s queues: one process answers
//! every request). A cached subscription may have been deleted, re-created or left without
//! its topic by another process since it was read, so every write made with one checks that
//! it is still current (its version and its topic's, in the same atomic write): a stale
//! entry fails its write, and the request goes again on a fresh read. Safety rests on those
//! checks, never on the entry's age. A request that writes nothing (an empty receive, an
//! ack of receipts already settled) may answer for a subscription deleted or re-created up
//! to the log's `topic_cache_ttl` before it started (by another process, or by deleting its
//! topic: deleting the subscription here forgets it at once): an empty answer, never a
//! message twice.

use super::*;

/// `$op` (an expression on the subscription `$sub`, cached or not), and once more on a fresh
/// read of it if its answer found the cached entry stale ([`Queues::stale`]). With `pull`,
/// first refuses a push subscription each time (it may have been re-created as one).
macro_rules! on_fresh_sub {
    ($queues:expr, $sub:ident, pull, $op:expr) => {
        loop {
            $sub.check_pull()?;
            let result = $op;
            if !$queues.stale(&mut $sub, &result).await? {
                break result;
            }
        }
    };
    ($queues:expr, $sub:ident, $op:expr) => {
        loop {
            let result = $op;
            if !$queues.stale(&mut $sub, &result).await? {
                break result;
            }
        }
    };
}

/// Subscriptions by (topic, name), each with when it was read.
pub(super) type Subs = Mutex<HashMap<(String, String), (Arc<Sub>, i64)>>;

/// Subscriptions one process caches before it starts over (each is small; names are many).
const MAX_CACHED_SUBS: usize = 10_000;

/// Topics' partition heads as this process's push receives last read them, by topic id,
/// with when and how many commits this process had made then.
pub(super) type Heads = Mutex<HashMap<u64, (Vec<(HeadRecord, u64)>, i64, u64)>>;

/// How long heads read by a push receive serve the next ones' first look. Every receive
/// reads a topic's heads, one `Query` of its whole collection; a dispatcher run's workers
/// of many subscriptions, all in one process, would spend the collection's read units on
/// them (3,000 a second on DynamoDB). A head older than this only delays: a push receive
/// passes over what other processes published meanwhile, and the dispatcher looks again.
/// A commit by this process ends them at once (`serve` publishes and pushes in one process:
/// its wake comes within microseconds of the commit, well inside this window).
const HEADS_MS: i64 = 50;

/// The heads one look at the partitions has read so far ([`Queues::visit`]). A pull
/// receive's first look starts with none (`First`): the partition it takes from first reads
/// its own head alone, in one batch with its queue state (`Queues::first_read`), where every
/// head is a query of the topic's collection (`One`); every head, in one query, once it goes
/// on to another partition, or to one it may pass over by an idle hint (the hint's check
/// needs the head, and passing over means going on): `All`. Push receives and later looks
/// read every head at once. A head only bounds what a take reads: one read later than
/// another's is at worst older, which a take that finds its cursor past it reads again.
pub(super) enum LookHeads {
    First,
    One(u32, HeadRecord),
    All(Vec<(HeadRecord, u64)>),
}

impl LookHeads {
    /// Partition `p`'s head, if this look has read it.
    fn known(&self, p: u32) -> Option<HeadRecord> {
        match self {
            Self::One(q, head) if *q == p => Some(*head),
            Self::All(all) => Some(all.get(p as usize).map(|(h, _)| *h).unwrap_or_default()),
            _ => None,
        }
    }
}

impl Sub {
    /// The checks a write on this subscription's queue starts with: its topic's version when
    /// it came from the cache, nothing otherwise. Not its own: every queue write names a
    /// cursor item, which the subscription's delete fences (`Queues::delete`).
    fn guards(&self) -> Vec<WriteOp> {
        if !self.guarded {
            return Vec::new();
        }
        vec![layout::topic_check(&self.topic)]
    }
}

impl Queues {
    /// Queues that keep the subscriptions of receives and settles for the log's
    /// `topic_cache_ttl`, saving two reads per request and making every queue write one
    /// op longer (a version check of the subscription and of its topic: two more items of
    /// a DynamoDB transaction, so for `serve`, not for the functions).
    pub fn caching_subscriptions(log: Log) -> Self {
        Self { log, local: Arc::new(Local { subs: Some(Subs::default()), ..Local::default() }), targets: None }
    }

    /// The subscription of a receive or a settle: from the cache when the queues keep one.
    pub(super) async fn hot_sub(&self, topic: &str, name: &str) -> Result<Arc<Sub>, Error> {
        let Some(cache) = &self.local.subs else { return Ok(Arc::new(self.sub(topic, name).await?)) };
        let key = (topic.to_owned(), name.to_owned());
        let now = self.now();
        if let Some((sub, at)) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            if (*at..at.saturating_add(self.log.cache_ttl_ms())).contains(&now) {
                return Ok(sub.clone());
            }
        }
        let sub = Arc::new(Sub { guarded: true, ..self.sub(topic, name).await? });
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_SUBS {
            cache.clear();
        }
        cache.insert(key, (sub.clone(), now));
        Ok(sub)
    }

    /// `topic`'s heads: read afresh, or for a push receive's first look (`recent`), as
    /// read by this process within [`HEADS_MS`].
    pub(super) async fn heads_of(&self, topic: &TopicConfig, recent: bool) -> Result<Vec<(HeadRecord, u64)>, Error> {
        let (now, commits) = (self.now(), self.log.commits_here());
        if recent {
            let cache = self.local.heads.lock().unwrap_or_else(|p| p.into_inner());
            let fresh = |(_, at, seen): &&(_, i64, u64)| *seen == commits && (*at..at + HEADS_MS).contains(&now);
            if let Some((heads, ..)) = cache.get(&topic.id).filter(fresh) {
                return Ok(heads.clone());
            }
        }
        let heads = topics::heads(self.store(), topic).await?;
        let mut cache = self.local.heads.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED_SUBS {
            cache.clear();
        }
        cache.insert(topic.id, (heads.clone(), now, commits));
        Ok(heads)
    }

    /// Partition `p`'s head as this look read it, else every head, read now in one query.
    pub(super) async fn head_in(
        &self,
        heads: &mut LookHeads,
        topic: &TopicConfig,
        p: u32,
    ) -> Result<HeadRecord, Error> {
        if let Some(head) = heads.known(p) {
            return Ok(head);
        }
        *heads = LookHeads::All(self.heads_of(topic, false).await?);
        Ok(heads.known(p).unwrap_or_default())
    }

    pub(super) fn forget_sub(&self, topic: &str, name: &str) {
        if let Some(cache) = &self.local.subs {
            cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&(topic.to_owned(), name.to_owned()));
        }
    }

    /// Whether `result` found a cached `sub` gone (a write's guard failed, a receipt names
    /// another subscription of that name, or its topic's items are gone): then the entry is
    /// dropped and `sub` read afresh, unguarded, for one more try, which answers not found
    /// if it is.
    pub(super) async fn stale<T>(&self, sub: &mut Arc<Sub>, result: &Result<T, Error>) -> Result<bool, Error> {
        let gone = matches!(result, Err(Error::SubscriptionNotFound { .. } | Error::TopicNotFound(_)));
        if !(sub.guarded && gone) {
            return Ok(false);
        }
        self.forget_sub(&sub.topic.name, &sub.name);
        *sub = Arc::new(self.sub(&sub.topic.name, &sub.name).await?);
        Ok(true)
    }

    /// Writes `ops` on `sub`'s queue, after its guards: `Err` if a guard failed (the
    /// subscription or its topic changed since it was cached), else the store's answer,
    /// with a failed condition's index counted among `ops`.
    pub(super) async fn write_on(&self, sub: &Sub, ops: Vec<WriteOp>) -> Result<Result<(), StorageError>, Error> {
        self.write_guarded(sub, ops, false).await
    }

    /// [`Queues::write_on`], answered before it is durable against a power cut (see
    /// [`StateStore::write_deferred`]): for acks, whose loss only delivers again.
    pub(super) async fn write_on_deferred(
        &self,
        sub: &Sub,
        ops: Vec<WriteOp>,
    ) -> Result<Result<(), StorageError>, Error> {
        self.write_guarded(sub, ops, true).await
    }

    async fn write_guarded(
        &self,
        sub: &Sub,
        ops: Vec<WriteOp>,
        deferred: bool,
    ) -> Result<Result<(), StorageError>, Error> {
        let mut guarded = sub.guards();
        let guards = guarded.len();
        // Unguarded, the ops go as they are: no copy on the hot path.
        if guards == 0 {
            guarded = ops;
        } else {
            guarded.extend(ops);
        }
        let written =
            if deferred { self.store().write_deferred(guarded).await } else { self.store().write(guarded).await };
        match written {
            Err(StorageError::ConditionFailed { op, .. }) if op < guards => Err(sub.not_found()),
            Err(StorageError::ConditionFailed { failed, .. }) => {
                Ok(Err(StorageError::condition_failed(failed.into_iter().map(|op| op - guards).collect())))
            }
            result => Ok(result),
        }
    }
}
