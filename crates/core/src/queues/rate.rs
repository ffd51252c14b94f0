//! A subscription's delivery rate: messages per second handed out across all its receivers,
//! its push deliveries and, on AWS, every function instance. A token bucket kept in one
//! item beside partition 0's cursor ([`crate::keys::rate_key`]): before a receive visits
//! any partition it takes up to the messages it wants from the bucket by one conditional
//! write, and gives back what it did not take by another. So a busy subscription pays one
//! write per receive (not per message), and a receive that finds the bucket empty takes
//! nothing from any partition: no lease is granted, no receive count spent. It waits (a long
//! poll) until the next token, or answers fewer messages. A push delivery waits for its
//! batch's tokens (or the burst's): fewer, fuller batches at the same rate.
//!
//! The rate is flow control, not a safety promise: no correctness argument rests on it. A
//! lost write (an unknown outcome) only holds back tokens, never hands out more than the
//! bucket had; a token given back late only delays.
//!
//! Time counted as `throttled` is the time a receive found the bucket empty until its next
//! token, merged across receivers (two waiting at once count once): what the subscription
//! spent waiting for its rate. Alternatives considered: a bucket per process (each instance
//! would grant the whole rate), and the bucket named in every take's own write (every take
//! of every partition would name one item: on DynamoDB, transactions naming one item cancel
//! one another).

use super::*;
use crate::keys::rate_key;

/// The fastest rate a subscription may have, in messages per second.
pub const MAX_RATE_PER_SECOND: u32 = 10_000;
/// Thousandths of a token: the bucket fills by `per_second` of them each millisecond.
const MILLI: u64 = 1000;

/// Messages per second a subscription hands out at most, and how many at once after a
/// quiet spell (the bucket's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub per_second: u32,
    pub burst: u32,
}

impl Rate {
    pub(super) fn validate(&self) -> Result<(), Error> {
        if !(1..=MAX_RATE_PER_SECOND).contains(&self.per_second) {
            return Err(Error::invalid(
                Code::InvalidRequest,
                format!("rate.per_second must be between 1 and {MAX_RATE_PER_SECOND}"),
            ));
        }
        if self.burst < 1 {
            return Err(Error::invalid(Code::InvalidRequest, "rate.burst must be at least 1"));
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        u64::from(self.burst) * MILLI
    }
}

/// A subscription's token bucket as stored. Absent: full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateRecord {
    /// Thousandths of a token in the bucket at `at_ms`.
    #[serde(rename = "t")]
    pub tokens: u64,
    #[serde(rename = "a")]
    pub at_ms: i64,
    /// Time receives found the bucket empty, so far, counted up to `throttled_until_ms`
    /// (which may be ahead of now: the next token's time).
    #[serde(rename = "w", default)]
    pub throttled_ms: u64,
    #[serde(rename = "u", default)]
    pub throttled_until_ms: i64,
}

impl RateRecord {
    /// The bucket at `now`: filled since `at_ms`, at most `rate.burst` tokens. Time never
    /// runs back (a clock behind the last writer's adds nothing).
    fn at(self, rate: Rate, now: i64) -> Self {
        let elapsed = now.saturating_sub(self.at_ms).max(0) as u64;
        let tokens = self.tokens.saturating_add(elapsed.saturating_mul(u64::from(rate.per_second))).min(rate.size());
        Self { tokens, at_ms: self.at_ms.max(now), ..self }
    }

    /// Time spent waiting for the rate up to `now` (none of what is still ahead).
    pub fn throttled_by(&self, now: i64) -> u64 {
        let ahead = self.throttled_until_ms.saturating_sub(now).max(0) as u64;
        self.throttled_ms.saturating_sub(ahead)
    }
}

/// What a take of tokens decided: how many are granted, the bucket after it, and whether
/// it must be written (a grant, or throttled time not yet counted).
#[derive(Debug, PartialEq, Eq)]
struct Grant {
    granted: usize,
    record: RateRecord,
    write: bool,
    /// With nothing granted: when the next token is in the bucket.
    next_at: i64,
}

/// Up to `want` tokens from the bucket `stored` (absent: full) at `now`, none unless it
/// holds `least` (at most `want` and the burst): a push delivery waits for a batch's worth.
fn grant(stored: Option<RateRecord>, rate: Rate, (least, want): (usize, usize), now: i64) -> Grant {
    let full = RateRecord { tokens: rate.size(), at_ms: now, ..RateRecord::default() };
    let mut record = stored.map_or(full, |r| r.at(rate, now));
    let least = (least as u64).min(want as u64).min(u64::from(rate.burst)).max(1);
    let held = record.tokens / MILLI;
    if held >= least {
        let granted = held.min(want as u64);
        record.tokens -= granted * MILLI;
        return Grant { granted: granted as usize, record, write: true, next_at: now };
    }
    let per_ms = u64::from(rate.per_second);
    let next_at = now + (least * MILLI - record.tokens).div_ceil(per_ms) as i64;
    let counted_from = record.throttled_until_ms.max(now);
    let throttled = next_at.saturating_sub(counted_from).max(0) as u64;
    if throttled > 0 {
        record.throttled_ms += throttled;
        record.throttled_until_ms = next_at;
    }
    Grant { granted: 0, record, write: throttled > 0, next_at }
}

/// The bucket `stored` at `now` with `n` tokens taken at `taken_at` given back (at most
/// full): less what the bucket refilled since, which it would have refilled anyway had it
/// been full then (given back whole, tokens a receive held while another took the refill
/// would pass the burst). `None`: nothing to give back.
fn give_back(stored: Option<RateRecord>, rate: Rate, n: usize, (taken_at, now): (i64, i64)) -> Option<RateRecord> {
    let refilled = now.saturating_sub(taken_at).max(0) as u64 * u64::from(rate.per_second);
    let back = (n as u64 * MILLI).saturating_sub(refilled);
    let record = stored.filter(|_| back > 0)?.at(rate, now);
    Some(RateRecord { tokens: record.tokens.saturating_add(back).min(rate.size()), ..record })
}

/// Whether a receive may visit the partitions, and for how many messages.
pub(super) enum Gate {
    /// Up to this many; `Some` tokens were taken for them, at that time (those not used go back).
    Open(usize, Option<(Rate, usize, i64)>),
    /// The bucket is empty until this time.
    Shut(i64),
}

impl Queues {
    /// Takes tokens for a receive of up to `want` messages from `sub`'s bucket (all of
    /// them without a rate).
    pub(super) async fn rate_gate(&self, sub: &Sub, want: usize) -> Result<Gate, Error> {
        let rate = sub.record.spec.rate.filter(|_| !crate::mutation::skipped(crate::mutation::Mutation::RateIgnored));
        let Some(rate) = rate else { return Ok(Gate::Open(want, None)) };
        // A push batch waits for its tokens (fewer, smaller batches); a pull receive answers
        // as soon as one message may go.
        let least = if sub.record.spec.push.is_some() { want } else { 1 };
        let key = rate_key(sub.record.id);
        let mut sub_version = sub.version;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let now = self.now();
            let item = self.store().get(&key).await?;
            let stored = item.as_ref().map(|i| layout::decode::<RateRecord>("rate", &i.value)).transpose()?;
            let grant = grant(stored, rate, (least, want), now);
            if grant.write {
                let value = layout::encode(&grant.record);
                let written = match &item {
                    Some(item) => self.store().write(vec![WriteOp::replace(key.clone(), value, Some(item.version))]),
                    // Created only while the subscription is as read: a receive racing its
                    // delete cannot put the item back after the purge removed the queue's.
                    None => self.store().write(vec![
                        WriteOp::Check {
                            key: crate::keys::subscription_key(sub.topic.id, &sub.name),
                            expect: Expect::Version(sub_version),
                        },
                        WriteOp::create(key.clone(), value),
                    ]),
                };
                if let Err(e) = written.await {
                    if item.is_none() && matches!(e, StorageError::ConditionFailed { op: 0, .. }) {
                        sub_version = self.same_sub(sub).await?;
                    }
                    self.lost_race(e, &mut attempt).await?;
                    continue;
                }
            }
            if grant.granted > 0 {
                return Ok(Gate::Open(grant.granted, Some((rate, grant.granted, now))));
            }
            return Ok(Gate::Shut(grant.next_at));
        }
        Err(contended(&sub.name))
    }

    /// When `sub`'s bucket holds what a receive of `want` waits for (a push batch's worth,
    /// one token for a pull receive): now, or the next token's time. Read only; no rate:
    /// now.
    pub(super) async fn rate_ready_at(&self, sub: &Sub, want: usize) -> Result<i64, Error> {
        let now = self.now();
        let Some(rate) = sub.record.spec.rate else { return Ok(now) };
        let least = if sub.record.spec.push.is_some() { want } else { 1 };
        let item = self.store().get(&rate_key(sub.record.id)).await?;
        let stored = item.as_ref().map(|i| layout::decode::<RateRecord>("rate", &i.value)).transpose()?;
        Ok(grant(stored, rate, (least, want), now).next_at)
    }

    /// The version of `sub`'s item, read again: not found if it was deleted (or replaced).
    async fn same_sub(&self, sub: &Sub) -> Result<u64, Error> {
        match self.sub_item(&sub.topic, &sub.name).await? {
            Some(now) if !now.record.deleted && now.record.id == sub.record.id => Ok(now.version),
            _ => Err(sub.not_found()),
        }
    }

    /// Gives back `n` tokens a receive took and did not use. A failure only holds them back
    /// (the rate is an upper bound): logged, not answered.
    pub(super) async fn give_back_tokens(&self, sub: &Sub, rate: Rate, n: usize, taken_at: i64) {
        let key = rate_key(sub.record.id);
        let mut attempt = 0;
        while n > 0 && attempt < MAX_ATTEMPTS {
            let given = async {
                let Some(item) = self.store().get(&key).await? else { return Ok(Ok(())) };
                let stored = layout::decode::<RateRecord>("rate", &item.value)?;
                let Some(record) = give_back(Some(stored), rate, n, (taken_at, self.now())) else { return Ok(Ok(())) };
                let op = WriteOp::replace(key.clone(), layout::encode(&record), Some(item.version));
                Ok::<_, Error>(self.store().write(vec![op]).await)
            };
            match given.await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    if let Err(e) = self.lost_race(e, &mut attempt).await {
                        tracing::warn!(error = %e, subscription = %sub.name, "tokens not given back");
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, subscription = %sub.name, "tokens not given back");
                    return;
                }
            }
        }
    }

    /// Time the subscription spent waiting for its rate so far, if it has one.
    pub(super) async fn throttled(&self, sub: &Sub) -> Result<Option<u64>, Error> {
        if sub.record.spec.rate.is_none() {
            return Ok(None);
        }
        let Some(item) = self.store().get(&rate_key(sub.record.id)).await? else { return Ok(Some(0)) };
        Ok(Some(layout::decode::<RateRecord>("rate", &item.value)?.throttled_by(self.now())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate { per_second: 10, burst: 5 };

    fn bucket(tokens: u64, at_ms: i64) -> Option<RateRecord> {
        Some(RateRecord { tokens, at_ms, ..RateRecord::default() })
    }

    #[test]
    fn a_grant_takes_what_the_bucket_holds_refilled_at_the_rate() {
        // (stored, want, now) → (granted, tokens left in thousandths, next token at).
        let cases = [
            (None, 3, 0, (3, 2_000, 0)),
            (None, 9, 0, (5, 0, 0)),
            (bucket(0, 0), 1, 99, (0, 990, 100)),
            (bucket(0, 0), 1, 100, (1, 0, 100)),
            (bucket(0, 0), 4, 250, (2, 500, 250)),
            // Full after 500 ms: no more than the burst however long it was quiet.
            (bucket(0, 0), 9, 60_000, (5, 0, 60_000)),
            // A clock behind the last writer's adds nothing.
            (bucket(1_500, 50), 9, 10, (1, 500, 10)),
        ];
        for (stored, want, now, (granted, tokens, next_at)) in cases {
            let g = grant(stored, RATE, (1, want), now);
            assert_eq!((g.granted, g.record.tokens, g.next_at), (granted, tokens, next_at), "{stored:?} {want} {now}");
        }
    }

    #[test]
    fn a_grant_for_a_batch_waits_for_its_tokens_or_the_burst() {
        // (stored, (least, want), now) → (granted, next token at).
        let cases = [
            (bucket(3_000, 0), (4, 4), 0, (0, 100)),
            (bucket(3_000, 0), (4, 4), 100, (4, 100)),
            (bucket(3_000, 0), (4, 9), 150, (4, 150)),
            // More than the bucket holds: the burst is enough.
            (bucket(4_000, 0), (9, 9), 100, (5, 100)),
            (bucket(0, 0), (9, 9), 0, (0, 500)),
        ];
        for (stored, asked, now, (granted, next_at)) in cases {
            let g = grant(stored, RATE, asked, now);
            assert_eq!((g.granted, g.next_at), (granted, next_at), "{stored:?} {asked:?} {now}");
        }
    }

    #[test]
    fn an_empty_bucket_counts_the_wait_once_however_many_find_it_empty() {
        let first = grant(bucket(0, 0), RATE, (1, 1), 20);
        assert!(first.write);
        assert_eq!((first.record.throttled_ms, first.record.throttled_until_ms, first.next_at), (80, 100, 100));
        // Another receiver at 40 waits for the same token: nothing more counted, nothing written.
        let second = grant(Some(first.record), RATE, (1, 3), 40);
        assert_eq!((second.granted, second.write, second.record.throttled_ms), (0, false, 80));
        // Only what has passed is shown.
        assert_eq!(first.record.throttled_by(60), 40);
        assert_eq!(first.record.throttled_by(500), 80);
    }

    #[test]
    fn tokens_given_back_fill_the_bucket_to_its_size_at_most() {
        assert_eq!(give_back(bucket(1_000, 0), RATE, 2, (0, 0)).map(|r| r.tokens), Some(3_000));
        assert_eq!(give_back(bucket(4_000, 0), RATE, 3, (0, 0)).map(|r| r.tokens), Some(5_000));
        assert_eq!(give_back(None, RATE, 3, (0, 0)), None, "no bucket: it is full");
    }

    #[test]
    fn tokens_given_back_late_come_back_less_what_the_bucket_refilled_meanwhile() {
        // 4 taken at 0 from a full bucket; by 1,000 ms it refilled, and another receive took 4.
        let refilled = RATE.per_second as i64;
        let later = bucket(1_000, 1_000);
        let back = |at: i64| give_back(later, RATE, 4, (at, 1_000)).map(|r| r.tokens);
        assert_eq!(back(1_000), Some(5_000), "given back at once: whole");
        assert_eq!(back(1_000 - 1_000 / refilled), Some(4_000), "one token refilled since");
        assert_eq!(back(0), None, "all of it refilled since: nothing comes back");
    }

    #[test]
    fn a_rate_outside_its_bounds_is_refused_naming_the_field() {
        for (rate, field) in [
            (Rate { per_second: 0, burst: 1 }, "rate.per_second"),
            (Rate { per_second: MAX_RATE_PER_SECOND + 1, burst: 1 }, "rate.per_second"),
            (Rate { per_second: 1, burst: 0 }, "rate.burst"),
        ] {
            let Err(Error::Invalid { code, message }) = rate.validate() else { panic!("{rate:?} accepted") };
            assert_eq!(code, Code::InvalidRequest);
            assert!(message.starts_with(field), "{message}");
        }
        assert!(Rate { per_second: MAX_RATE_PER_SECOND, burst: 1 }.validate().is_ok());
    }
}
