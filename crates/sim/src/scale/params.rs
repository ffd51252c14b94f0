//! Every figure the scale model uses, in one place, each with where it comes from
//! (`../shared/notes/aws-at-scale.md` gathered them; docs/PERFORMANCE.md repeats the table).
//! ⚠ marks a figure no primary source gives: a reading or a choice of ours.

use crate::rng::Rng;

/// A latency distribution given by its percentiles (ms): a draw interpolates linearly
/// between (0, min), (0.5, p50), (0.9, p90), (0.99, p99) and (1, max).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dist {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    pub const fn new(min: f64, p50: f64, p90: f64, p99: f64, max: f64) -> Self {
        Self { min, p50, p90, p99, max }
    }

    /// One draw, in milliseconds.
    pub fn draw(&self, rng: &mut Rng) -> f64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let points = [(0.0, self.min), (0.5, self.p50), (0.9, self.p90), (0.99, self.p99), (1.0, self.max)];
        for w in points.windows(2) {
            let ((u0, v0), (u1, v1)) = (w[0], w[1]);
            if u <= u1 {
                return v0 + (v1 - v0) * (u - u0) / (u1 - u0);
            }
        }
        self.max
    }

    /// The distribution between `self` (at `a` items) and `other` (at `b`), at `n` items;
    /// linear, and extended past `b` along the same slope.
    pub fn towards(&self, other: &Dist, a: f64, b: f64, n: f64) -> Dist {
        let t = ((n - a) / (b - a)).max(0.0);
        let mix = |x: f64, y: f64| x + (y - x) * t;
        Dist::new(
            mix(self.min, other.min),
            mix(self.p50, other.p50),
            mix(self.p90, other.p90),
            mix(self.p99, other.p99),
            mix(self.max, other.max),
        )
    }
}

/// DynamoDB `PutItem` from Lambda: DeBrie's p50/p90/p99/max; min ⚠ half the median.
pub const DDB_PUT: Dist = Dist::new(3.8, 7.55, 11.3, 16.2, 29.0);
/// `GetItem` and one `Query` page: no published figure ⚠, taken as `PutItem`'s.
pub const DDB_READ: Dist = DDB_PUT;
/// `TransactWriteItems` of 5 items (DeBrie); min ⚠ 0.6 × the median.
pub const DDB_TX5: Dist = Dist::new(15.2, 25.3, 30.7, 92.5, 218.0);
/// `TransactWriteItems` of 25 items (DeBrie); min ⚠ 0.6 × the median.
pub const DDB_TX25: Dist = Dist::new(19.3, 32.1, 40.5, 97.5, 258.0);
/// S3 PUT of a small object ⚠: "median tens of ms" (< 512 KB), "roughly 100–200 ms"
/// consistent small-object latency (optimizing-performance pages): a median of 30 ms,
/// p99 150 ms.
pub const S3_PUT: Dist = Dist::new(10.0, 30.0, 50.0, 150.0, 200.0);
/// S3 ranged GET, first byte ⚠: the same pages, a median of 20 ms.
pub const S3_GET: Dist = Dist::new(8.0, 20.0, 35.0, 100.0, 200.0);
/// API Gateway HTTP API's added latency, request and response together: p99 < 10 ms
/// (AWS blog, HTTP APIs GA); the rest of the shape ⚠.
pub const APIGW: Dist = Dist::new(1.0, 4.0, 7.0, 9.5, 15.0);
/// Lambda's routing of a warm invoke ⚠ (no AWS figure): lambda-perf's handler field
/// (≈ 1.3–1.5 ms) taken as its median.
pub const LAMBDA_INVOKE: Dist = Dist::new(0.5, 1.5, 3.0, 6.0, 12.0);
/// Rust on `provided.al2023`, arm64, Init Duration (lambda-perf, 2025-12-21: mean
/// ≈ 13.4 ms, samples 11.8–15.5 ms).
pub const LAMBDA_INIT: Dist = Dist::new(11.8, 13.4, 14.5, 15.3, 15.5);
/// CPU time of a handler around its storage calls ⚠ (parsing, encoding, rendering).
pub const HANDLER_CPU_MS: f64 = 1.0;

/// Per item key, per second, on demand: 1,000 write and 3,000 read units, never split
/// (burst-adaptive-capacity: an isolated hot item keeps these bounds).
pub const ITEM_WRU_PER_S: f64 = 1000.0;
pub const ITEM_RRU_PER_S: f64 = 3000.0;
pub const ITEM_MAX_BYTES: usize = 400 * 1024;
pub const TX_MAX_ITEMS: usize = 100;
pub const TX_MAX_BYTES: usize = 4 << 20;
pub const QUERY_PAGE_BYTES: usize = 1 << 20;
/// The adapter's resends of a throttled request (crates/aws/src/resend.rs): 6 attempts,
/// full-jitter backoff from 25 ms up to 2 s.
pub const THROTTLED_ATTEMPTS: u32 = 6;
pub const THROTTLE_BACKOFF: sluice_core::retry::Backoff = sluice_core::retry::Backoff { base_ms: 25, cap_ms: 2000 };

/// S3, per partitioned prefix per second (every segment lives under `segments/`).
pub const S3_PUT_PER_S: f64 = 3500.0;
pub const S3_GET_PER_S: f64 = 5500.0;

/// Lambda: account concurrency, and what stays unreserved.
pub const ACCOUNT_CONCURRENCY: u32 = 1000;
pub const UNRESERVED_MIN: u32 = 100;
/// API functions' timeout (template.yaml) and the reserve the runtime keeps to answer
/// (crates/runtime/src/metrics/emf.rs: the AWS operation timeout + 1 s).
pub const API_TIMEOUT_MS: i64 = 25_000;
pub const ANSWER_RESERVE_MS: i64 = 11_000;
/// Memory of the publish, groups/queues and dispatcher functions (template.yaml defaults).
pub const FUNCTION_MB: u32 = 512;

/// API Gateway: the account's 10,000 requests/s (burst 5,000), the stage's throttle
/// (template.yaml: `ApiThrottlingRateLimit` 1,000, burst 2,000) and the long-poll routes'
/// (`LongPollRateLimit` 10, burst 20).
pub const APIGW_ACCOUNT: (f64, f64) = (10_000.0, 5_000.0);
pub const APIGW_STAGE: (f64, f64) = (1_000.0, 2_000.0);
pub const APIGW_LONG_POLL: (f64, f64) = (10.0, 20.0);

/// The stream's event source mapping polls each shard 4 times a second (with-ddb).
pub const ESM_POLL_MS: u64 = 250;
/// template.yaml's `MaximumBatchingWindowInSeconds` (0: a commit wakes the dispatcher at the
/// next poll) and the dispatcher's reserved concurrency (`DispatcherReservedConcurrency` 0:
/// unreserved; one run per subscription at a time is the core's run lease, not Lambda's).
pub const ESM_WINDOW_MS: u64 = 0;
pub const DISPATCHER_RESERVED: Option<u32> = None;
/// A push receiver's answer time, unless `--receiver-ms` says otherwise.
pub const RECEIVER_MS: f64 = 20.0;

/// List prices, us-east-1, as docs/AWS.md's cost model states them (restated here: the
/// AWS crate's billing module cannot be reached without the AWS SDK's types).
pub mod price {
    pub const S3_PUT: f64 = 5.00e-6;
    pub const S3_GET: f64 = 0.40e-6;
    pub const WRU: f64 = 0.625e-6;
    pub const RRU: f64 = 0.125e-6;
    pub const APIGW: f64 = 1.00e-6;
    pub const LAMBDA_REQUEST: f64 = 0.20e-6;
    /// Per GB-second, arm64.
    pub const LAMBDA_GB_S: f64 = 0.000_013_333_4;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_within_the_distribution_and_split_at_the_median() {
        let mut rng = Rng::new(1);
        let draws: Vec<f64> = (0..10_000).map(|_| DDB_TX5.draw(&mut rng)).collect();
        assert!(draws.iter().all(|d| (DDB_TX5.min..=DDB_TX5.max).contains(d)));
        let below = draws.iter().filter(|d| **d <= DDB_TX5.p50).count();
        assert!((4_700..5_300).contains(&below), "{below} of 10,000 at or under the median");
        let mid = DDB_TX5.towards(&DDB_TX25, 5.0, 25.0, 15.0);
        assert!((mid.p50 - 28.7).abs() < 1e-9);
    }
}
