//! Peeking at a subscription: the messages a receive could deliver now, read without
//! taking them. Nothing is written: no lease, receive count or cursor changes, so a peek
//! never delays, hides or counts a delivery.

use super::take::document;
use super::*;

/// Messages one peek answers at most (as a receive).
pub const MAX_PEEK_MESSAGES: usize = MAX_RECEIVE_MESSAGES;
/// New messages one peek reads past a partition's cursor at most, looking for ones its
/// filter matches: a peek of a filter that matches little stops there.
const PEEK_SCAN: usize = 10_000;

/// A visible message, seen without receiving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    /// Deliveries so far: 0 for a message never delivered.
    pub receive_count: u32,
    pub event: Event,
}

/// The messages of a partition's leases a receive could take at `now`: due, not out of
/// deliveries (those go to the DLQ), not removed by retention; in offset order, with their
/// deliveries so far.
fn visible_leases(state: &QueueState, now: i64, max_receive_count: u32, log_start: u64) -> Vec<(u64, u32)> {
    let mut visible: Vec<(u64, u32)> = state
        .leases
        .iter()
        .filter(|l| l.due <= now && l.record.receives < max_receive_count)
        .flat_map(|l| l.record.msgs.iter().map(move |m| (m.offset, l.record.receives)))
        .filter(|(offset, _)| *offset >= log_start)
        .collect();
    visible.sort_unstable();
    visible
}

/// Of new messages read from the log (in offset order), those visible at `now`: the filter
/// matches them, their delay is over and their schedule due. The first still within its
/// delay ends the visible run (what follows it waits too, as describe counts them): `true`
/// then. One scheduled for later is passed over (a receive moves it out of the way).
fn visible_new<'a>(
    events: &'a [Event],
    spec: &SubscriptionSpec,
    filter: Option<&Filter>,
    now: i64,
) -> (Vec<&'a Event>, bool) {
    let mut visible = Vec::new();
    for event in events {
        if filter.is_some_and(|f| !f.matches(&document(event))) {
            continue;
        }
        if crate::schedule::deliver_at(&event.record.headers).is_some_and(|at| at > now) {
            continue;
        }
        if spec.delay_ms > 0 && event.record.timestamp_ms.min(now).saturating_add(spec.delay_ms as i64) > now {
            return (visible, true);
        }
        visible.push(event);
    }
    (visible, false)
}

impl Queues {
    /// Up to `limit` visible messages, partition by partition: first those due for
    /// redelivery, then new ones from the cursor (those the filter passes over skipped).
    /// Read only: a peeked message is as it was, for the next receive.
    pub async fn peek(&self, topic: &str, name: &str, limit: usize) -> Result<Vec<Peeked>, Error> {
        if !(1..=MAX_PEEK_MESSAGES).contains(&limit) {
            let message = format!("limit must be between 1 and {MAX_PEEK_MESSAGES}");
            return Err(Error::invalid(Code::InvalidLimit, message));
        }
        let sub = self.sub(topic, name).await?;
        let filter = sub.filter()?;
        let heads = topics::heads(self.store(), &sub.topic).await?;
        let now = self.now();
        let mut out = Vec::new();
        for (p, (head, _)) in heads.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            let p = p as u32;
            let state = self.load(&sub, p, None).await?;
            let leases = visible_leases(&state, now, sub.record.spec.max_receive_count, head.start);
            let offsets: Vec<u64> = leases.iter().map(|(o, _)| *o).collect();
            let mut events = self.events_at(&sub.topic, p, &offsets, *head).await?;
            for (offset, receive_count) in leases {
                if out.len() < limit {
                    out.extend(events.remove(&offset).map(|event| Peeked { receive_count, event }));
                }
            }
            let from = state.cursor.next.max(head.start);
            let room = limit - out.len();
            let new = self.peek_new(&sub, p, from, *head, room, (filter.as_ref(), now)).await?;
            out.extend(new.into_iter().map(|event| Peeked { receive_count: 0, event }));
        }
        Ok(out)
    }

    /// Up to `room` visible new messages of a partition from `from`.
    async fn peek_new(
        &self,
        sub: &Sub,
        partition: u32,
        mut from: u64,
        head: HeadRecord,
        room: usize,
        (filter, now): (Option<&Filter>, i64),
    ) -> Result<Vec<Event>, Error> {
        let limits = *self.log.limits();
        let (mut found, mut scanned) = (Vec::new(), 0);
        while found.len() < room && from < head.next && scanned < PEEK_SCAN {
            // Filtering, more is read than will be answered.
            let want = if filter.is_some() { PEEK_SCAN - scanned } else { room - found.len() };
            let max = (want.min(limits.max_read_events), limits.max_read_bytes);
            let events = self.read_from(&sub.topic, partition, &mut from, max, head).await?;
            let Some(last) = events.last().map(|e| e.offset) else { break };
            scanned += events.len();
            let (visible, waiting) = visible_new(&events, &sub.record.spec, filter, now);
            found.extend(visible.into_iter().take(room - found.len()).cloned());
            if waiting {
                break;
            }
            from = last + 1;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Record;

    fn event(offset: u64, timestamp_ms: i64, value: &'static str) -> Event {
        let record = Record { timestamp_ms, key: None, headers: Vec::new(), value: value.into(), value_is_json: true };
        Event { partition: 0, offset, record }
    }

    fn lease(due: i64, receives: u32, offsets: &[u64]) -> Lease {
        let msgs = offsets.iter().map(|&offset| LeaseMsg { offset, first_ms: 0, key: None }).collect();
        let record = LeaseRecord {
            nonce: 0,
            receives,
            held_until: None,
            delivered_ms: 0,
            msgs,
            redriven: false,
            scheduled: false,
        };
        Lease { key: Key::new("q", lease_sk(due, 0)), due, version: 1, record, inline: false }
    }

    #[test]
    fn visible_leases_are_due_alive_and_under_the_receive_limit() {
        let mut state = QueueState {
            cursor: CursorRecord::default(),
            cursor_version: None,
            leases: vec![lease(100, 1, &[7, 3]), lease(200, 1, &[9]), lease(50, 5, &[1]), lease(10, 2, &[0, 4])],
            inline_changed: false,
            keyed: false,
            written: Vec::new(),
            paused: false,
            marks: Default::default(),
        };
        // (now, log start): the due leases' live messages (offset, receives), in offset order.
        type Case = (i64, u64, &'static [(u64, u32)]);
        let cases: &[Case] = &[
            (99, 0, &[(0, 2), (4, 2)]),
            (100, 0, &[(0, 2), (3, 1), (4, 2), (7, 1)]),
            (200, 4, &[(4, 2), (7, 1), (9, 1)]),
        ];
        for (now, start, want) in cases {
            assert_eq!(visible_leases(&state, *now, 5, *start), *want, "at {now}, log start {start}");
        }
        state.leases.clear();
        assert!(visible_leases(&state, 1000, 5, 0).is_empty());
    }

    #[test]
    fn visible_new_skips_filtered_and_stops_at_the_first_delayed() {
        let events = [
            event(0, 0, r#"{"a":1}"#),
            event(1, 0, r#"{"a":2}"#),
            event(2, 900, r#"{"a":1}"#),
            event(3, 0, r#"{"a":1}"#),
        ];
        let filter = Filter::parse(&serde_json::json!({"value": {"a": [1]}})).unwrap();
        let offsets = |(v, waiting): (Vec<&Event>, bool)| (v.iter().map(|e| e.offset).collect::<Vec<_>>(), waiting);
        let plain = SubscriptionSpec::default();
        assert_eq!(offsets(visible_new(&events, &plain, None, 1000)), (vec![0, 1, 2, 3], false));
        assert_eq!(offsets(visible_new(&events, &plain, Some(&filter), 1000)), (vec![0, 2, 3], false));
        let delayed = SubscriptionSpec { delay_ms: 500, ..SubscriptionSpec::default() };
        assert_eq!(offsets(visible_new(&events, &delayed, None, 1000)), (vec![0, 1], true));
        // Filtered messages do not wait: only a message that would be delivered stops the run.
        let late_miss = [event(0, 0, r#"{"a":1}"#), event(1, 900, r#"{"a":2}"#), event(2, 0, r#"{"a":1}"#)];
        assert_eq!(offsets(visible_new(&late_miss, &delayed, Some(&filter), 1000)), (vec![0, 2], false));
    }
}
