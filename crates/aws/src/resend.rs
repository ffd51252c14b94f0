//! Sending a request again: after which failures each kind of request may be sent again,
//! and within what time. The SDK's own retries are off (see the crate's header); this is
//! the standard mode's policy (its classes of transient failure, three attempts) applied
//! only where a second attempt cannot change the answer, with every attempt counted.
//!
//! Which requests may be resent after a transient failure (a 5xx, a timeout, a broken
//! pooled connection), when the first attempt may have been applied:
//!
//! | request | resent after a transient failure | why |
//! |---|---|---|
//! | `GetItem`, `Query`, `GetObject`, `ListObjectsV2` | yes | reads change nothing |
//! | `TransactWriteItems` | yes | under its `ClientRequestToken` a repeat within 10 minutes is answered as the first and changes nothing |
//! | `BatchWriteItem` (deletes), `DeleteItem` without a condition, `DeleteObject` | yes | deleting twice leaves what deleting once does, and answers the same |
//! | `PutObject` (`If-None-Match: *`, a fresh name) | yes | a repeat of a landed put fails its condition, and the store writes the blob under another name; the first object is never referenced and the collector removes it |
//! | `UpdateItem`, conditional `DeleteItem` | no | a repeat of a landed conditional write fails its own condition: the caller would take its own write for a rival's (the log would commit a publish twice); `ADD v :one` would count twice. The caller gets `Unavailable` (outcome unknown), which the port's contract and the core handle |
//!
//! Throttling is resent for every request: AWS refuses it before doing anything.

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use sluice_core::retry::Backoff;

use crate::{Deadlines, RequestCounts};

/// Throttled attempts before a request gives up with [`sluice_core::StorageError::Throttled`].
const MAX_THROTTLED_ATTEMPTS: u32 = 6;
/// Attempts of a request that may be resent after a transient failure (the standard mode's three).
const MAX_TRANSIENT_ATTEMPTS: u32 = 3;
const BACKOFF: Backoff = Backoff { base_ms: 25, cap_ms: 2000 };

/// Error codes AWS answers before doing anything, because the caller is going too fast.
const THROTTLING: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "SlowDown",
    "TooManyRequestsException",
];
/// Error codes of transient failures: the standard mode's, and a transaction whose token is
/// still being applied by an earlier attempt.
const TRANSIENT: &[&str] = &["RequestTimeout", "RequestTimeoutException", "TransactionInProgressException"];
/// HTTP statuses of transient failures (the standard mode's).
const TRANSIENT_STATUS: &[u16] = &[500, 502, 503, 504];

/// After which failures a request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Only after throttling: a conditional write (see the module's table).
    OnThrottling,
    /// After any transient failure too: a read, or a write whose repeat has the effect and
    /// the answer of one attempt.
    OnTransient,
}

/// What one failed attempt was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Throttled,
    Transient,
    Final,
}

/// Sends requests, counting each attempt, and resends them as [`Resend`] allows, as long
/// as another attempt can end within [`Deadlines::operation`] of the first one's start.
#[derive(Debug)]
pub(crate) struct Sender {
    pub counts: RequestCounts,
    pub deadlines: Deadlines,
}

impl Sender {
    pub fn new(deadlines: Deadlines) -> Self {
        Self { counts: RequestCounts::default(), deadlines }
    }

    /// Sends one request through `send`, again after a backoff while it fails in a way
    /// `resend` allows and time is left.
    pub async fn send<T, E, Fut>(
        &self,
        operation: &'static str,
        resend: Resend,
        mut send: impl FnMut() -> Fut,
    ) -> Result<T, SdkError<E, HttpResponse>>
    where
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata,
    {
        let started = tokio::time::Instant::now();
        let (mut throttled, mut failed) = (0, 0);
        loop {
            self.counts.add(operation);
            let e = match send().await {
                Ok(out) => return Ok(out),
                Err(e) => e,
            };
            let again = match classify(&e) {
                Failure::Throttled => {
                    throttled += 1;
                    throttled < MAX_THROTTLED_ATTEMPTS
                }
                Failure::Transient if resend == Resend::OnTransient => {
                    failed += 1;
                    failed < MAX_TRANSIENT_ATTEMPTS
                }
                _ => false,
            };
            if !again {
                return Err(e);
            }
            let wait = backoff(throttled + failed - 1);
            // Another attempt only if it can end in time: the caller's deadline counts on it.
            if started.elapsed() + wait + self.deadlines.attempt > self.deadlines.operation {
                return Err(e);
            }
            tracing::debug!(operation, throttled, failed, code = e.code(), "sending again after a backoff");
            tokio::time::sleep(wait).await;
        }
    }
}

/// Full jitter (the core's policy), with AWS's own base and cap.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(BACKOFF.wait_ms(attempt, rand::random::<u64>()))
}

/// Whether AWS refused the request for going too fast, before doing anything.
pub(crate) fn is_throttling<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(|s| s.code()).is_some_and(|code| THROTTLING.contains(&code))
}

fn classify<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> Failure {
    match e {
        _ if is_throttling(e) => Failure::Throttled,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Transient,
        SdkError::DispatchFailure(d) if d.is_io() || d.is_timeout() => Failure::Transient,
        SdkError::ServiceError(s) => {
            let transient = s.err().code().is_some_and(|c| TRANSIENT.contains(&c))
                || TRANSIENT_STATUS.contains(&s.raw().status().as_u16());
            if transient {
                Failure::Transient
            } else {
                Failure::Final
            }
        }
        _ => Failure::Final,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_its_growing_cap() {
        for attempt in 0..20 {
            for _ in 0..50 {
                assert!(backoff(attempt) <= Duration::from_millis(BACKOFF.ceiling_ms(attempt)));
            }
        }
        assert_eq!(BACKOFF.ceiling_ms(16), 2000, "the cap is reached");
    }
}
