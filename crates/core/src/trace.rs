//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) carried from producer to
//! consumer. An event's trace context is two of its headers, `traceparent` and
//! `tracestate`: a publish gives its events the request's unless they carry their own
//! ([`TraceContext::inherit`]), reads hand them back as headers like any other, and a push
//! delivery sends a batch's shared context as request headers ([`TraceContext::of_batch`]).
//!
//! AWS X-Ray's trace header (`Root=1-{8 hex}-{24 hex};Parent={16 hex};Sampled=1`) is the
//! same trace id and parent id in another spelling: [`TraceParent::from_xray`] and
//! [`TraceParent::to_xray`] convert.

use bytes::Bytes;

use crate::queues::Message;
use crate::NewEvent;

/// The event header (and HTTP header) holding the trace's `version-traceid-parentid-flags`.
pub const TRACEPARENT: &str = "traceparent";
/// The event header (and HTTP header) holding vendors' `key=value` list.
pub const TRACESTATE: &str = "tracestate";
/// AWS X-Ray's HTTP header.
pub const XRAY_HEADER: &str = "x-amzn-trace-id";

/// The longest `tracestate` kept (W3C asks that at least this much be propagated).
const MAX_TRACESTATE_LEN: usize = 512;
/// Most list members in a `tracestate`.
const MAX_TRACESTATE_MEMBERS: usize = 32;
/// The length of a version 00 `traceparent`.
const TRACEPARENT_LEN: usize = 55;

/// A checked `traceparent`: `{version}-{trace id}-{parent id}-{flags}`, lowercase hex, the
/// ids not all zero. Kept as sent (a later version's extra fields too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent(String);

impl TraceParent {
    /// Checks `text` as W3C says a receiver must: version 00 is exactly 55 characters; a
    /// later version (not `ff`) may go on after the flags, behind a `-`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let b = text.as_bytes();
        let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let zero = |r: std::ops::Range<usize>| b[r].iter().all(|&c| c == b'0');
        let problem = if b.len() < TRACEPARENT_LEN || !b.iter().all(u8::is_ascii_graphic) {
            Some("it must be version-traceid-parentid-flags (55 characters for version 00)")
        } else if ![2, 35, 52].iter().all(|&i| b[i] == b'-') {
            Some("its four fields must be separated by '-'")
        } else if !(hex(0..2) && hex(3..35) && hex(36..52) && hex(53..55)) {
            Some("its fields must be lowercase hex")
        } else if &b[0..2] == b"ff" {
            Some("version ff is invalid")
        } else if &b[0..2] == b"00" && b.len() != TRACEPARENT_LEN {
            Some("a version 00 traceparent is 55 characters")
        } else if b.len() > TRACEPARENT_LEN && b[TRACEPARENT_LEN] != b'-' {
            Some("fields after the flags must follow a '-'")
        } else if zero(3..35) {
            Some("its trace id is all zeros")
        } else if zero(36..52) {
            Some("its parent id is all zeros")
        } else {
            None
        };
        match problem {
            None => Ok(Self(text.to_owned())),
            Some(why) => Err(format!("'{}' is not a W3C traceparent: {why}", text.escape_debug())),
        }
    }

    /// The whole `traceparent`, as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The caller's span id: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.0[36..52]
    }

    /// Whether the caller may have recorded the trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }

    /// The `traceparent` an X-Ray trace header stands for: `Root=1-{8 hex}-{24 hex}` is the
    /// trace id, `Parent` the parent id, `Sampled=1` the sampled flag. `None` without a
    /// `Root` and a `Parent` (a traceparent must name the calling span), or if either is
    /// malformed.
    pub fn from_xray(header: &str) -> Option<Self> {
        let field = |name: &str| {
            header.split(';').filter_map(|f| f.trim().split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v)
        };
        let (time, unique) = field("Root")?.strip_prefix("1-")?.split_once('-')?;
        let parent = field("Parent")?;
        if time.len() != 8 || unique.len() != 24 || parent.len() != 16 {
            return None;
        }
        let flags = if field("Sampled") == Some("1") { "01" } else { "00" };
        let text = format!("00-{time}{unique}-{parent}-{flags}").to_ascii_lowercase();
        Self::parse(&text).ok()
    }

    /// The X-Ray trace header of this trace: `Root=1-{8 hex}-{24 hex};Parent=…;Sampled=0|1`.
    pub fn to_xray(&self) -> String {
        let id = self.trace_id();
        format!("Root=1-{}-{};Parent={};Sampled={}", &id[..8], &id[8..], self.parent_id(), u8::from(self.sampled()))
    }
}

/// Checks a `tracestate`: at most 512 characters and 32 `key=value` list members, keys of
/// `a-z 0-9 _ - * / @`, values of printable ASCII but `,` and `=`.
pub fn check_tracestate(text: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("'{}' is not a W3C tracestate: {why}", text.escape_debug()));
    if text.len() > MAX_TRACESTATE_LEN {
        return bad("it is longer than 512 characters");
    }
    let members: Vec<&str> = text.split(',').map(|m| m.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()).collect();
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return bad("it has more than 32 members");
    }
    for member in members {
        let Some((key, value)) = member.split_once('=') else { return bad("each member must be key=value") };
        let key_ok = |c: char| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-' | '*' | '/' | '@');
        if key.is_empty() || !key.chars().all(key_ok) {
            return bad("a key must be lowercase letters, digits, '_', '-', '*', '/' or '@'");
        }
        if value.is_empty() || !value.chars().all(|c| matches!(c, ' '..='~') && c != ',' && c != '=') {
            return bad("a value must be printable ASCII without ',' or '='");
        }
    }
    Ok(())
}

/// A trace context: a `traceparent` and, optionally, its `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: TraceParent,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// Checks both parts.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, String> {
        let traceparent = TraceParent::parse(traceparent)?;
        if let Some(state) = tracestate {
            check_tracestate(state)?;
        }
        Ok(Self { traceparent, tracestate: tracestate.map(str::to_owned) })
    }

    /// What a receiver makes of a context it is given, as W3C asks: `None` for a
    /// malformed `traceparent` (the trace starts afresh), and a malformed `tracestate`
    /// dropped. Never a reason to refuse a request.
    pub fn lenient(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let traceparent = TraceParent::parse(traceparent).ok()?;
        let tracestate = tracestate.filter(|s| check_tracestate(s).is_ok()).map(str::to_owned);
        Some(Self { traceparent, tracestate })
    }

    /// The trace context of an event's headers: `None` if it has no `traceparent` (a
    /// `tracestate` alone means nothing), an error if either header is malformed.
    pub fn of_headers(headers: &[(String, Bytes)]) -> Result<Option<Self>, String> {
        let get = |name: &'static str| match headers.iter().find(|(n, _)| n == name) {
            None => Ok(None),
            Some((_, v)) => std::str::from_utf8(v).map(Some).map_err(|_| format!("the {name} header is not UTF-8")),
        };
        let state = get(TRACESTATE)?;
        match get(TRACEPARENT)? {
            None => Ok(None),
            Some(parent) => Self::parse(parent, state).map(Some),
        }
    }

    /// Gives `event` this context, unless it carries a `traceparent` of its own (an
    /// event's own context wins, whatever it holds), as headers: `traceparent`, and this
    /// `tracestate` in place of any the event had alone (a `tracestate` belongs to its
    /// `traceparent`). Only as far as `max_headers` allows: a full event is left as it
    /// is, rather than refused for a context its producer never asked to store.
    pub fn inherit(&self, event: &mut NewEvent, max_headers: usize) {
        if event.headers.iter().any(|(n, _)| n == TRACEPARENT) {
            return;
        }
        event.headers.retain(|(n, _)| n != TRACESTATE);
        if event.headers.len() >= max_headers {
            return;
        }
        event.headers.push((TRACEPARENT.into(), Bytes::from(self.traceparent.0.clone())));
        if let Some(state) = &self.tracestate {
            if event.headers.len() < max_headers {
                event.headers.push((TRACESTATE.into(), Bytes::from(state.clone())));
            }
        }
    }

    /// As HTTP headers: `traceparent`, and `tracestate` if there is one.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![(TRACEPARENT.to_owned(), self.traceparent.0.clone())];
        headers.extend(self.tracestate.clone().map(|s| (TRACESTATE.to_owned(), s)));
        headers
    }

    /// The context a push delivery of `messages` carries as its request's headers: the one
    /// every message of the batch has (the events of one publish share theirs). `None`
    /// when they differ or one has none: each message still has its own in its headers.
    /// A malformed stored context (published before Sluice checked them) counts as none.
    pub fn of_batch(messages: &[Message]) -> Option<Self> {
        let mut contexts = messages.iter().map(|m| Self::of_headers(&m.event.record.headers).ok().flatten());
        let first = contexts.next()??;
        contexts.all(|c| c.as_ref() == Some(&first)).then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Record;
    use crate::Event;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, Bytes)> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), Bytes::from(v.to_string()))).collect()
    }

    #[test]
    fn traceparents_are_checked_as_w3c_says() {
        let tp = TraceParent::parse(PARENT).unwrap();
        assert_eq!(tp.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id(), "00f067aa0ba902b7");
        assert!(tp.sampled());
        assert!(!TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().sampled());
        // A later version may add fields after a '-'.
        assert!(TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_ok());
        for bad in [
            "",
            "garbage",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn tracestates_are_lists_of_key_value_members() {
        for good in ["rojo=00f067aa0ba902b7", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "a@b=x,,c/d=y z"] {
            assert!(check_tracestate(good).is_ok(), "{good:?}");
        }
        let too_long = format!("k={}", "v".repeat(MAX_TRACESTATE_LEN));
        let too_many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        for bad in ["novalue", "Upper=x", "k=", "k=a=b", "k=line\nbreak", too_long.as_str(), too_many.as_str()] {
            assert!(check_tracestate(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn xray_headers_convert_to_traceparents_and_back() {
        let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let tp = TraceParent::from_xray(xray).unwrap();
        assert_eq!(tp.as_str(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        assert_eq!(tp.to_xray(), xray);
        // Lambda's header: fields in any order, and others (Self, Lineage) ignored.
        let lambda = "Self=1-67891234-12456789abcdef012345678;Parent=53995C3F42CD8AD8;Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0;Lineage=a:1";
        assert_eq!(
            TraceParent::from_xray(lambda).unwrap().as_str(),
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"
        );
        // Not a traceparent: no Parent (as an ALB's header), or malformed fields.
        for no in [
            "Root=1-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f",
            "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
            "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",
            "",
        ] {
            assert_eq!(TraceParent::from_xray(no), None, "{no:?}");
        }
    }

    #[test]
    fn an_event_inherits_the_context_unless_it_has_its_own_or_no_room() {
        let ctx = TraceContext::parse(PARENT, Some("rojo=1")).unwrap();
        let event = |pairs: &[(&str, &str)]| NewEvent {
            key: None,
            headers: headers(pairs),
            value: Bytes::from_static(b"1"),
            value_is_json: true,
            timestamp_ms: None,
            partition: None,
        };
        let mut plain = event(&[("source", "shop")]);
        ctx.inherit(&mut plain, 64);
        assert_eq!(plain.headers, headers(&[("source", "shop"), ("traceparent", PARENT), ("tracestate", "rojo=1")]));

        let own = "00-11111111111111111111111111111111-2222222222222222-00";
        let mut owning = event(&[("traceparent", own)]);
        ctx.inherit(&mut owning, 64);
        assert_eq!(owning.headers, headers(&[("traceparent", own)]), "an event's own context wins");

        let mut own_state = event(&[("tracestate", "verde=2")]);
        ctx.inherit(&mut own_state, 64);
        let inherited = headers(&[("traceparent", PARENT), ("tracestate", "rojo=1")]);
        assert_eq!(own_state.headers, inherited, "a lone tracestate belongs to no trace: replaced");

        let mut almost_full = event(&[("a", "1")]);
        ctx.inherit(&mut almost_full, 2);
        assert_eq!(almost_full.headers, headers(&[("a", "1"), ("traceparent", PARENT)]));
        let mut full = event(&[("a", "1"), ("b", "2")]);
        ctx.inherit(&mut full, 2);
        assert_eq!(full.headers.len(), 2, "a full event is left as it is");
    }

    #[test]
    fn a_batch_carries_the_context_all_its_messages_share() {
        let message = |offset: u64, pairs: &[(&str, &str)]| Message {
            receipt: String::new(),
            receive_count: 1,
            first_receive_ms: 0,
            held_until_ms: 0,
            event: Event {
                partition: 0,
                offset,
                record: Record {
                    timestamp_ms: 0,
                    key: None,
                    headers: headers(pairs),
                    value: Bytes::new(),
                    value_is_json: false,
                },
            },
        };
        let traced = |o| message(o, &[("traceparent", PARENT), ("tracestate", "rojo=1")]);
        let shared = TraceContext::of_batch(&[traced(1), traced(2)]).unwrap();
        assert_eq!(
            shared.headers(),
            vec![("traceparent".to_owned(), PARENT.to_owned()), ("tracestate".to_owned(), "rojo=1".to_owned())]
        );
        let other = "00-11111111111111111111111111111111-2222222222222222-00";
        assert_eq!(TraceContext::of_batch(&[traced(1), message(2, &[("traceparent", other)])]), None);
        assert_eq!(TraceContext::of_batch(&[traced(1), message(2, &[])]), None);
        assert_eq!(TraceContext::of_batch(&[message(1, &[("traceparent", "junk")])]), None, "malformed: none");
        assert_eq!(TraceContext::of_batch(&[]), None);
    }
}
