//! Push delivery (EventBridge's and SNS's model over Sluice's queues): a push
//! subscription's messages are received by a dispatcher, not by clients, sent to its
//! target in signed batches ([`webhook`]), and settled by the target's answer: a 2xx acks
//! the batch except the items its `batchItemFailures` names (Lambda's partial-batch
//! convention); a `410 Gone` dead-letters the batch at once (reason [`GONE`]); anything
//! else, a timeout or no connection releases the batch, visible again after the
//! subscription's redelivery backoff (a `Retry-After` of a 429 or 503 instead). The queue does the rest as for a pull subscription: one holder per
//! visibility window, a key's messages one batch at a time, the DLQ after
//! `max_receive_count` deliveries, redrive.
//!
//! At-least-once: a message is sent again only after an attempt that held it failed,
//! timed out, or was never settled (a dispatcher that died: its visibility window ends).
//! The receive's window covers the attempt's timeout, so no two attempts hold a message
//! at once unless an ack is lost.
//!
//! The [`Dispatcher`] runs embedded (`run`: long-polling receives, woken by commits and
//! due times) or in a function (`drain`: until nothing is left or its deadline).
//!
//! Flow control and endpoint health ([`flow`]): an adaptive in-flight limit under
//! `max_in_flight`, `Retry-After` honoured for the whole subscription, and suspension of an
//! endpoint that keeps failing.
//!
//! A delivery carries its batch's W3C trace context as request headers ([`crate::trace`]), so a
//! target's spans join the producer's trace.

mod dispatch;
pub mod flow;
pub mod lease;
pub mod webhook;

pub use dispatch::{Dispatcher, Drained, Topics, Wake, WAKE_STAYS_MS};

use std::collections::HashSet;

use crate::ports::deliver::Answer;
use crate::queues::Backoff;

/// The backoff of a push subscription that set none: a failing target is not hammered.
pub const DEFAULT_BACKOFF: Backoff = Backoff::Exponential { initial_ms: 1_000, max_ms: 60_000, multiplier: 2 };

/// The dead-letter reason of a batch its target answered `410 Gone`.
pub const GONE: &str = "gone";

/// What an attempt's answer means for its messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Ids of the messages to deliver again (all of them when the attempt failed).
    pub failed: HashSet<String>,
    /// When to deliver them again, if the target said (`Retry-After`).
    pub retry_after_ms: Option<u64>,
    /// Why the attempt (or some items) failed.
    pub error: Option<String>,
    /// The target answered `410 Gone`: it will never take these messages, so they go to
    /// the dead-letter queue at once (reason [`GONE`]) instead of being delivered again.
    pub gone: bool,
}

/// Judges an attempt's answer for the messages `ids` it carried.
pub fn judge(answer: &Answer, ids: &[String]) -> Verdict {
    let all = |error: String, retry_after_ms: Option<u64>| Verdict {
        failed: ids.iter().cloned().collect(),
        retry_after_ms,
        error: Some(error),
        gone: false,
    };
    match answer {
        Answer::TimedOut => all(Answer::TIMED_OUT.into(), None),
        Answer::Failed(reason) => all(reason.clone(), None),
        Answer::Status { status, retry_after_ms, body } if !(200..300).contains(status) => {
            // Capped as flow control caps it: the batch waits no longer than the subscription.
            let honoured = matches!(status, 429 | 503).then_some(*retry_after_ms).flatten();
            let honoured = honoured.map(|ms| ms.min(flow::MAX_RETRY_AFTER_MS));
            let snippet: String = String::from_utf8_lossy(body).chars().take(200).collect();
            let verdict = all(format!("HTTP {status}: {snippet}").trim_end_matches(": ").to_owned(), honoured);
            Verdict { gone: *status == 410, ..verdict }
        }
        Answer::Status { body, .. } => match item_failures(body) {
            Ok(failed) if failed.is_empty() => Verdict::default(),
            Ok(failed) => match failed.iter().find(|id| !ids.contains(id)) {
                // Lambda's rule: a failure naming no message of the batch fails the batch.
                Some(unknown) => all(format!("batchItemFailures names {unknown:?}, not in the batch"), None),
                None => {
                    let error = Some(format!("{} of {} messages failed (batchItemFailures)", failed.len(), ids.len()));
                    Verdict { failed, retry_after_ms: None, error, gone: false }
                }
            },
            Err(e) => all(e, None),
        },
    }
}

/// The ids a 2xx answer's `batchItemFailures` names: none for any other body.
fn item_failures(body: &[u8]) -> Result<HashSet<String>, String> {
    let Ok(serde_json::Value::Object(answer)) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(HashSet::new());
    };
    let Some(failures) = answer.get("batchItemFailures") else { return Ok(HashSet::new()) };
    let bad = || "batchItemFailures must be a list of {\"itemIdentifier\": \"<id>\"}".to_owned();
    match failures {
        serde_json::Value::Null => Ok(HashSet::new()),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|item| item.get("itemIdentifier").and_then(|id| id.as_str()).map(str::to_owned).ok_or_else(bad))
            .collect(),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Answer {
        Answer::Status { status: 200, retry_after_ms: None, body: body.as_bytes().to_vec() }
    }

    #[test]
    fn answers_are_judged_as_lambda_judges_partial_batches() {
        let ids: Vec<String> = vec!["t/0/1".into(), "t/0/2".into()];
        let failed = |v: &Verdict| {
            let mut f: Vec<_> = v.failed.iter().cloned().collect();
            f.sort();
            f
        };
        // (answer, failed ids, retry after)
        let cases: Vec<(Answer, Vec<&str>, Option<u64>)> = vec![
            (ok(""), vec![], None),
            (ok("not json"), vec![], None),
            (ok(r#"{"batchItemFailures": []}"#), vec![], None),
            (ok(r#"{"batchItemFailures": null}"#), vec![], None),
            (ok(r#"{"batchItemFailures": [{"itemIdentifier": "t/0/2"}]}"#), vec!["t/0/2"], None),
            (ok(r#"{"batchItemFailures": [{"itemIdentifier": "t/9/9"}]}"#), vec!["t/0/1", "t/0/2"], None),
            (ok(r#"{"batchItemFailures": [{"id": "t/0/2"}]}"#), vec!["t/0/1", "t/0/2"], None),
            (ok(r#"{"batchItemFailures": "t/0/2"}"#), vec!["t/0/1", "t/0/2"], None),
            (Answer::Status { status: 500, retry_after_ms: Some(9), body: vec![] }, vec!["t/0/1", "t/0/2"], None),
            (Answer::Status { status: 503, retry_after_ms: Some(9), body: vec![] }, vec!["t/0/1", "t/0/2"], Some(9)),
            (
                Answer::Status { status: 429, retry_after_ms: Some(u64::MAX), body: vec![] },
                vec!["t/0/1", "t/0/2"],
                Some(flow::MAX_RETRY_AFTER_MS),
            ),
            (Answer::Status { status: 429, retry_after_ms: None, body: vec![] }, vec!["t/0/1", "t/0/2"], None),
            (Answer::Status { status: 302, retry_after_ms: None, body: vec![] }, vec!["t/0/1", "t/0/2"], None),
            (Answer::TimedOut, vec!["t/0/1", "t/0/2"], None),
            (Answer::Status { status: 410, retry_after_ms: Some(9), body: vec![] }, vec!["t/0/1", "t/0/2"], None),
        ];
        for (answer, want, retry) in cases {
            let v = judge(&answer, &ids);
            assert_eq!(failed(&v), want, "{answer:?}");
            assert_eq!(v.gone, matches!(answer, Answer::Status { status: 410, .. }), "{answer:?}");
            assert_eq!(v.retry_after_ms, retry, "{answer:?}");
            assert_eq!(v.error.is_some(), !want.is_empty(), "{answer:?}");
        }
    }
}
