//! Scheduled delivery (issue 47 §5): an event published with a time before which no
//! subscription delivers it. The event is in the log at once (replay and groups read it
//! as any other); only queues and push wait for its time.
//!
//! Where the time is kept: in the event's record, as the reserved header
//! [`DELIVER_AT_HEADER`] (decimal milliseconds since the epoch). A header needs no change
//! of the segment format, so every segment already written reads as before (no header,
//! no schedule), and a binary from before schedules reads new segments too (it sees one
//! more header). The API shows it as the event's `deliver_at_ms`, never among its
//! headers, and refuses a published header of that name. Alternatives weighed: a record
//! attribute bit with a varint (a new segment version that older binaries refuse to read),
//! a separate index per partition (a second write per publish).

use bytes::Bytes;

use crate::model::{NewEvent, TopicConfig};
use crate::{Code, Error};

/// The record header that holds an event's schedule: decimal milliseconds since the epoch.
pub const DELIVER_AT_HEADER: &str = "sluice-deliver-at-ms";

/// The time before which no subscription delivers an event with these headers, if scheduled.
pub fn deliver_at(headers: &[(String, Bytes)]) -> Option<i64> {
    let (_, value) = headers.iter().find(|(name, _)| name == DELIVER_AT_HEADER)?;
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Schedules `event` for `at` (milliseconds since the epoch): replaces any schedule it had.
pub fn stamp(event: &mut NewEvent, at: i64) {
    event.headers.retain(|(name, _)| name != DELIVER_AT_HEADER);
    event.headers.push((DELIVER_AT_HEADER.to_owned(), Bytes::from(at.to_string())));
}

/// A publish's schedules against `topic`'s retention, before anything is written: each
/// must be a time in milliseconds, at most the retention past the event's timestamp (or
/// `now`, the timestamp it will get), so the event is still in the log when it comes due.
/// The first refusal names the event by its index in the request.
pub(crate) fn check(topic: &TopicConfig, events: &[NewEvent], now: i64) -> Result<(), Error> {
    for (i, e) in events.iter().enumerate() {
        let invalid = |why: String| Err(Error::invalid(Code::InvalidEvent, format!("event {i}: {why}")));
        let Some((_, raw)) = e.headers.iter().find(|(name, _)| name == DELIVER_AT_HEADER) else { continue };
        let Some(at) = deliver_at(&e.headers) else {
            return invalid(format!(
                "header '{DELIVER_AT_HEADER}' is not a time in ms: {}",
                String::from_utf8_lossy(raw)
            ));
        };
        if at < 0 {
            return invalid(format!("deliver_at_ms {at} is before the epoch"));
        }
        let timestamp = e.timestamp_ms.unwrap_or(now);
        if let Some(retention) = topic.spec.retention_ms.filter(|r| at.saturating_sub(timestamp) > *r) {
            return invalid(format!(
                "deliver_at_ms {at} is more than the topic's retention ({retention} ms) after the event's timestamp {timestamp}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TopicSpec;

    fn event(headers: &[(&str, &str)], timestamp_ms: Option<i64>) -> NewEvent {
        NewEvent {
            key: None,
            headers: headers.iter().map(|(n, v)| ((*n).to_owned(), Bytes::from((*v).to_owned()))).collect(),
            value: Bytes::from_static(b"1"),
            value_is_json: true,
            timestamp_ms,
            partition: None,
        }
    }

    #[test]
    fn a_stamped_event_reads_back_its_schedule_and_a_plain_one_has_none() {
        let mut e = event(&[("h", "v")], None);
        assert_eq!(deliver_at(&e.headers), None);
        stamp(&mut e, 5_000);
        stamp(&mut e, 7_000);
        assert_eq!(deliver_at(&e.headers), Some(7_000));
        assert_eq!(e.headers.len(), 2, "one schedule header, the last stamp's");
    }

    /// (retention, timestamp, schedule) → refused?
    #[test]
    fn a_schedule_past_the_retention_is_refused() {
        let topic = |retention_ms| TopicConfig {
            name: "t".into(),
            id: 1,
            spec: TopicSpec { partitions: 1, retention_ms, retention_bytes: None },
            created_ms: 0,
            version: 1,
        };
        let cases: &[(Option<i64>, Option<i64>, &str, bool)] = &[
            (Some(1_000), None, "2000", false),
            (Some(1_000), None, "2001", true),
            (Some(1_000), Some(500), "1500", false),
            (Some(1_000), Some(500), "1501", true),
            (None, None, "99999999999", false),
            (Some(1_000), None, "soon", true),
            (Some(1_000), None, "-1", true),
        ];
        for (retention, ts, at, refused) in cases {
            let result = check(&topic(*retention), &[event(&[(DELIVER_AT_HEADER, at)], *ts)], 1_000);
            assert_eq!(result.is_err(), *refused, "{retention:?} {ts:?} {at}");
            if let Err(e) = result {
                assert!(matches!(e, Error::Invalid { code: Code::InvalidEvent, .. }), "{e:?}");
            }
        }
    }
}
