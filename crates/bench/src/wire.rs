//! The API's answers as the bench reads them: only the fields it needs, borrowed from the
//! body, values measured rather than parsed (group polls, queue receives and acks).
//!
//! Not sluice-wire's types, on purpose: those own every field and parse every value, which
//! would add the bench client's own parsing to the figures it measures (its `produce` and
//! `work` workloads measure sluice-client itself, and so go through sluice-wire).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A poll's answer, with only what the bench needs: values are checked for their size, not parsed.
#[derive(Deserialize)]
pub struct PollAnswer<'a> {
    #[serde(borrow)]
    pub member_id: Cow<'a, str>,
    pub generation: u64,
    pub assignment: Vec<serde::de::IgnoredAny>,
    #[serde(borrow)]
    pub events: Vec<PolledEvent<'a>>,
}

/// One event of a poll's answer.
#[derive(Deserialize)]
pub struct PolledEvent<'a> {
    pub partition: u32,
    pub offset: u64,
    #[serde(default, borrow)]
    pub headers: SentHeader<'a>,
    #[serde(borrow)]
    pub value: Option<&'a RawValue>,
    #[serde(borrow)]
    pub value_base64: Option<Cow<'a, str>>,
}

/// An event's headers: only the bench's send instant.
#[derive(Deserialize, Default)]
pub struct SentHeader<'a> {
    #[serde(borrow, rename = "bench_sent_ns")]
    pub sent_ns: Option<Cow<'a, str>>,
}

impl SentHeader<'_> {
    /// When the event's publish was sent, on the bench's clock (bench publishers' events only).
    pub fn ns(&self) -> Option<u64> {
        self.sent_ns.as_deref().and_then(|s| s.parse().ok())
    }
}

/// Bytes of a value as published: a JSON value's text, or the decoded size of a binary one.
pub fn value_len(value: Option<&RawValue>, value_base64: Option<&str>) -> u64 {
    match (value, value_base64) {
        (Some(v), _) => v.get().len() as u64,
        (None, Some(b)) => (b.len() / 4 * 3) as u64,
        (None, None) => 0,
    }
}

impl PolledEvent<'_> {
    pub fn value_len(&self) -> u64 {
        value_len(self.value, self.value_base64.as_deref())
    }
}

/// A receive's answer, with only what the bench needs.
#[derive(Deserialize)]
pub struct ReceiveAnswer<'a> {
    #[serde(borrow)]
    pub messages: Vec<ReceivedMessage<'a>>,
    /// The results of the acks the receive carried.
    #[serde(default, borrow)]
    pub acks: Vec<AckResult<'a>>,
}

/// One message of a receive's answer.
#[derive(Deserialize)]
pub struct ReceivedMessage<'a> {
    #[serde(borrow)]
    pub receipt: Cow<'a, str>,
    pub partition: u32,
    pub offset: u64,
    pub receive_count: u32,
    #[serde(default, borrow)]
    pub headers: SentHeader<'a>,
    #[serde(borrow)]
    pub value: Option<&'a RawValue>,
    #[serde(borrow)]
    pub value_base64: Option<Cow<'a, str>>,
}

/// An ack's answer: one result per receipt, in order.
#[derive(Deserialize)]
pub struct AckAnswer<'a> {
    #[serde(borrow)]
    pub results: Vec<AckResult<'a>>,
}

/// Whether one receipt's ack went through.
#[derive(Deserialize)]
pub struct AckResult<'a> {
    pub ok: bool,
    #[serde(default, borrow)]
    pub error: Option<AckError<'a>>,
}

/// Why an ack was refused: its error code.
#[derive(Deserialize)]
pub struct AckError<'a> {
    #[serde(borrow)]
    pub code: Cow<'a, str>,
}
