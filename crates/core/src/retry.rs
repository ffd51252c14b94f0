//! Retrying after a refusal: exponential backoff with full jitter (a uniform wait up
//! to a ceiling that doubles with each attempt, capped), so rivals that collided once
//! spread out instead of colliding again. One copy for the core and the adapters.

/// A backoff policy: the first attempt's ceiling and the cap every ceiling stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base_ms: u64,
    pub cap_ms: u64,
}

impl Backoff {
    /// The core's retries after a lost race on the state store: 2 ms, doubling, up to 1 s.
    pub const CONTENTION: Backoff = Backoff { base_ms: 2, cap_ms: 1000 };

    /// The ceiling of attempt `attempt` (0-based): `base · 2^attempt`, capped.
    pub fn ceiling_ms(&self, attempt: u32) -> u64 {
        self.base_ms.saturating_mul(1u64 << attempt.min(32)).min(self.cap_ms)
    }

    /// The wait before retry `attempt`, in milliseconds: uniform in `0..=ceiling`, drawn
    /// from `random` (any 64 random bits), so a seeded source gives a repeatable wait.
    pub fn wait_ms(&self, attempt: u32, random: u64) -> u64 {
        random % (self.ceiling_ms(attempt) + 1)
    }
}

/// Waits `wait_ms` on `clock` (the backoff after the last attempt) unless `deadline` (the
/// clock's milliseconds) comes first: answers `false` then, at once, so the caller stops and
/// answers in time (before the function serving it is stopped).
pub async fn pause_within(clock: &dyn crate::Clock, deadline: Option<i64>, wait_ms: u64) -> bool {
    if deadline.is_some_and(|d| clock.now_ms().saturating_add(wait_ms as i64) >= d) {
        return false;
    }
    if wait_ms > 0 {
        clock.sleep(wait_ms).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_under_a_ceiling_that_doubles_then_is_capped() {
        let b = Backoff { base_ms: 25, cap_ms: 2000 };
        assert_eq!(b.ceiling_ms(0), 25);
        assert_eq!(b.ceiling_ms(1), 50);
        assert_eq!(b.ceiling_ms(6), 1600);
        assert_eq!(b.ceiling_ms(7), 2000);
        assert_eq!(b.ceiling_ms(40), 2000);
        for attempt in 0..40 {
            for r in [0, 1, 24, 25, 26, u64::MAX, u64::MAX / 3] {
                assert!(b.wait_ms(attempt, r) <= b.ceiling_ms(attempt));
            }
        }
        assert_eq!(b.wait_ms(0, 26), 0, "26 mod 26");
    }

    #[test]
    fn the_contention_policy_is_the_one_the_committer_always_used() {
        for attempt in 0..20 {
            let old = (2u64 << attempt.min(9)).min(1000);
            assert_eq!(Backoff::CONTENTION.ceiling_ms(attempt), old);
        }
    }
}
