//! A push subscription's run lease: at most one dispatcher run drives a subscription at a
//! time, so its `max_in_flight` holds across instances while different subscriptions run
//! in parallel, each in whichever instance claimed it.
//!
//! The lease is one item per subscription ([`crate::keys::push_run_key`]) that expires
//! (the store reads an expired item as absent): claimed with a create, renewed with a
//! version-conditioned put before an attempt that would outlast it, released with a
//! version-conditioned delete. A run that cannot claim it leaves the subscription to its
//! holder after marking the item `wanted` (a version-conditioned put), so a holder about
//! to release sees that work came meanwhile (its delete fails on the version) and drains
//! once more: a wake is never lost to a holder that was just finishing.
//!
//! The lease limits how many batches are out at once; it is not what makes delivery safe.
//! A holder paused past its lease's expiry (a frozen instance) loses it to the next run,
//! and until the paused one next renews (and fails, and stops receiving) both may have
//! batches out: at worst `max_in_flight` more, for at most one attempt each (an attempt
//! ends by its batch's visibility window). No message is delivered by two holders in one
//! window, nor settled twice: the queue's own leases give each batch one holder per
//! visibility window, and a settle with a receipt whose window ended is refused.

use serde::{Deserialize, Serialize};

use crate::keys::push_run_key;
use crate::layout;
use crate::ports::objects::StorageError;
use crate::ports::state::{Expect, Key, StateStore, WriteOp};
use crate::Error;

/// Claims and re-reads a contended lease at most this many times before giving up the run.
const MAX_CLAIMS: usize = 8;

/// What the lease item holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLeaseRecord {
    /// The run holding it (a random id per run).
    pub holder: u64,
    /// Another run found work while this one held it: drain once more before releasing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wanted: bool,
}

/// A lease this run holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLease {
    key: Key,
    holder: u64,
    version: u64,
    until_ms: i64,
}

/// What a claim found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// This run holds the subscription.
    Held(RunLease),
    /// Another run does; it was told to drain once more.
    Busy,
}

/// What to do with a held lease before an attempt taking `attempt_ms` at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// It outlasts the attempt.
    Keep,
    /// It would end during the attempt: extend it first.
    Renew,
}

/// Whether a lease ending at `until_ms` must be renewed before an attempt of `attempt_ms`
/// begun at `now`: an attempt is only started while the lease outlasts it.
pub fn renewal(until_ms: i64, now: i64, attempt_ms: u64) -> Renewal {
    if now.saturating_add(attempt_ms as i64) < until_ms {
        Renewal::Keep
    } else {
        Renewal::Renew
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Released (or already gone: expired, taken over).
    Done,
    /// Another run asked for a drain meanwhile: still held, drain again.
    Wanted,
}

fn lease_put(key: &Key, record: &RunLeaseRecord, until_ms: i64, expect: Expect) -> WriteOp {
    WriteOp::Put { key: key.clone(), value: layout::encode(record), expires_at_ms: Some(until_ms), expect }
}

/// How long a run holds its lease from `now`: two attempts (`attempt_ms` each, so one
/// renewal per attempt's length), cut to the run's deadline, so that a run killed at its
/// deadline (a Lambda timeout) blocks its subscriptions no longer; never less than one
/// attempt, which is all a run starts near its deadline.
pub fn lease_until(now: i64, attempt_ms: u64, deadline_ms: i64) -> i64 {
    let attempt = attempt_ms as i64;
    now.saturating_add(2 * attempt).min(deadline_ms).max(now.saturating_add(attempt))
}

/// Claims the lease of subscription `sub_id` for run `holder` until `until_ms`.
pub async fn claim(store: &dyn StateStore, sub_id: u64, holder: u64, until_ms: i64) -> Result<Claim, Error> {
    let key = push_run_key(sub_id);
    let mine = RunLeaseRecord { holder, wanted: false };
    for _ in 0..MAX_CLAIMS {
        match store.write(vec![lease_put(&key, &mine, until_ms, Expect::Absent)]).await {
            Ok(()) => return Ok(Claim::Held(RunLease { key, holder, version: 1, until_ms })),
            Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Held by another run: ask it to drain once more (if it is still there).
        let Some(item) = store.get(&key).await? else { continue };
        let mut theirs: RunLeaseRecord = layout::decode("push run lease", &item.value)?;
        if theirs.wanted {
            return Ok(Claim::Busy);
        }
        theirs.wanted = true;
        let until = item.expires_at_ms.unwrap_or(until_ms);
        match store.write(vec![lease_put(&key, &theirs, until, Expect::Version(item.version))]).await {
            Ok(()) => return Ok(Claim::Busy),
            Err(StorageError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Claim::Busy)
}

impl RunLease {
    /// Whether the lease must be renewed before an attempt of `attempt_ms` at `now`.
    pub fn renewal(&self, now: i64, attempt_ms: u64) -> Renewal {
        renewal(self.until_ms, now, attempt_ms)
    }

    /// Extends the lease to `until_ms`; `false` once it is no longer this run's (expired
    /// and taken, or gone): the run then starts no more attempts.
    pub async fn renew(&mut self, store: &dyn StateStore, until_ms: i64) -> Result<bool, Error> {
        let mine = RunLeaseRecord { holder: self.holder, wanted: false };
        for _ in 0..MAX_CLAIMS {
            match store.write(vec![lease_put(&self.key, &mine, until_ms, Expect::Version(self.version))]).await {
                Ok(()) => {
                    self.version += 1;
                    self.until_ms = until_ms;
                    return Ok(true);
                }
                Err(StorageError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            // Marked wanted by another run (still ours: renewing clears it, and this run's
            // workers are still draining), or not ours any more.
            match self.reread(store).await? {
                Some(_) => continue,
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Gives the lease up, unless another run asked for a drain meanwhile.
    pub async fn release(&mut self, store: &dyn StateStore) -> Result<Release, Error> {
        let delete = WriteOp::Delete { key: self.key.clone(), expect: Expect::Version(self.version) };
        match store.write(vec![delete]).await {
            Ok(()) => Ok(Release::Done),
            Err(StorageError::ConditionFailed { .. }) => match self.reread(store).await? {
                Some(record) if record.wanted => Ok(Release::Wanted),
                _ => Ok(Release::Done),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// The lease as stored, if still this run's (its version adopted).
    async fn reread(&mut self, store: &dyn StateStore) -> Result<Option<RunLeaseRecord>, Error> {
        let Some(item) = store.get(&self.key).await? else { return Ok(None) };
        let record: RunLeaseRecord = layout::decode("push run lease", &item.value)?;
        if record.holder != self.holder {
            return Ok(None);
        }
        self.version = item.version;
        self.until_ms = item.expires_at_ms.unwrap_or(self.until_ms);
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_starts_only_while_the_lease_outlasts_it() {
        // (until, now, attempt) -> renewal
        let cases = [
            ((20_000, 10_000, 5_000), Renewal::Keep),
            ((20_000, 10_000, 9_999), Renewal::Keep),
            ((20_000, 10_000, 10_000), Renewal::Renew),
            ((20_000, 19_000, 5_000), Renewal::Renew),
            ((20_000, 25_000, 0), Renewal::Renew),
        ];
        for ((until, now, attempt), want) in cases {
            assert_eq!(renewal(until, now, attempt), want, "until {until}, now {now}, attempt {attempt}");
        }
    }

    #[test]
    fn a_lease_lasts_two_attempts_cut_to_the_run_s_deadline_but_never_below_one() {
        // (now, attempt, deadline) -> until
        let cases =
            [((1_000, 15_000, 60_000), 31_000), ((1_000, 15_000, 20_000), 20_000), ((1_000, 15_000, 10_000), 16_000)];
        for ((now, attempt, deadline), want) in cases {
            assert_eq!(lease_until(now, attempt, deadline), want, "now {now}, attempt {attempt}, deadline {deadline}");
        }
    }

    #[test]
    fn a_lease_record_without_a_request_is_stored_small() {
        let record = RunLeaseRecord { holder: 7, wanted: false };
        assert_eq!(&layout::encode(&record)[..], br#"{"holder":7}"#);
        let wanted: RunLeaseRecord = layout::decode("lease", br#"{"holder":7,"wanted":true}"#).unwrap();
        assert!(wanted.wanted);
    }
}
