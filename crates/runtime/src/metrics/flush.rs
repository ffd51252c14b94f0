//! When a function writes the metrics its invocations recorded. The EMF recorder prints one
//! log document per label set when it is flushed; flushed after every invocation, an API
//! request costs three or four documents of CloudWatch Logs ingestion (about 1.2 KB: $0.60
//! per million requests, near what a queue receive's DynamoDB reads cost). Counters add up and histograms keep their values
//! between flushes, so flushing once per `every_ms` writes the same sums in far fewer
//! documents. The price: what an instance recorded since its last flush waits for its next
//! invocation, and is lost if Lambda reclaims the instance first (docs/AWS.md, "Logs, egress and the idle month").

/// When recorded metrics are written: at the end of an invocation, if `every_ms` has passed
/// since the last write or `max_invocations` have ended since; `every_ms == 0` writes after
/// every invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    pub every_ms: u64,
    /// Bounds how many values a histogram holds in one document: EMF takes at most 100 per
    /// metric, and a request records one per histogram in all but rare cases.
    pub max_invocations: u32,
}

/// What has not been written yet.
#[derive(Debug, Default)]
pub struct Pending {
    last_flush_ms: Option<i64>,
    invocations: u32,
}

impl FlushPolicy {
    /// The invocations one write may cover at most.
    pub const MAX_INVOCATIONS: u32 = 32;

    /// Writes after every `every_ms` (0: after every invocation).
    pub fn every(every_ms: u64) -> Self {
        Self { every_ms, max_invocations: Self::MAX_INVOCATIONS }
    }

    /// An invocation ended at `now_ms`: whether to write now. The first invocation of an
    /// instance writes at once, so sparse traffic is written as it happens.
    pub fn due(&self, pending: &mut Pending, now_ms: i64) -> bool {
        pending.invocations += 1;
        let waited = pending.last_flush_ms.map_or(u64::MAX, |last| now_ms.saturating_sub(last).max(0) as u64);
        let due = waited >= self.every_ms || pending.invocations >= self.max_invocations;
        if due {
            *pending = Pending { last_flush_ms: Some(now_ms), invocations: 0 };
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invocations ending at the given times: which of them write.
    fn writes(policy: FlushPolicy, ends_ms: &[i64]) -> Vec<bool> {
        let mut pending = Pending::default();
        ends_ms.iter().map(|&now| policy.due(&mut pending, now)).collect()
    }

    #[test]
    fn given_a_policy_when_invocations_end_then_writes_are_due_as_documented() {
        let burst: Vec<i64> = (0..40).map(|i| 1_000 + i * 10).collect();
        let first_and_every_32nd: Vec<bool> = (0..40).map(|i| i == 0 || i == 32).collect();
        let cases: [(&str, FlushPolicy, &[i64], Vec<bool>); 5] = [
            ("0 ms: after every invocation", FlushPolicy::every(0), &[5, 5, 6, 90], vec![true; 4]),
            ("the first invocation writes at once", FlushPolicy::every(10_000), &[7], vec![true]),
            (
                "then once the interval has passed since the last write",
                FlushPolicy::every(10_000),
                &[0, 4_000, 9_999, 10_000, 10_001, 25_000],
                vec![true, false, false, true, false, true],
            ),
            ("a burst writes every 32 invocations", FlushPolicy::every(60_000), &burst, first_and_every_32nd),
            (
                "a clock that steps back holds the write",
                FlushPolicy::every(1_000),
                &[5_000, 4_000, 6_000],
                vec![true, false, true],
            ),
        ];
        for (what, policy, ends, expected) in cases {
            assert_eq!(writes(policy, ends), expected, "{what}");
        }
    }
}
