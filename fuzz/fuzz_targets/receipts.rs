//! Receipt decoding, and the queue behind it: acks, nacks and visibility changes that
//! carry arbitrary receipts, against a fresh queue with messages in flight
//! ([`Fixture`]). The input is text, one step a line:
//!
//! ```text
//! ordering key                 (first line only: a subscription with key ordering)
//! ack <receipt>…
//! nack <delay_ms> <receipt>…
//! vis <visibility_timeout_ms> <receipt>…
//! receive <max_messages> [<visibility_timeout_ms>]
//! tick <ms>                    (moves the queue's clock forward)
//! ```
//!
//! A receipt is sent as written, except `@N` (the N-th receipt the queue gave out so far,
//! the fixture's first) and `!HEX` (those bytes signed with the store's own key, as only
//! the queue could: the code behind the signature check meets bodies of any content).
//!
//! Oracle: no panic, and no error but a refused argument; a receipt the harness cannot
//! verify (with an HMAC of its own) is refused as invalid, as is a signed one naming
//! another subscription or partition; fresh receipts settle; every message issued is
//! still accounted for at the end (visible, in flight, delayed or dead, unless acked).

#![no_main]

use std::collections::HashSet;
use std::str::Split;

use libfuzzer_sys::fuzz_target;
use sluice_core::queues::{Ordering, ReceiptError, ReceiveRequest};
use sluice_core::Error;
use sluice_fuzz::receipts::{Fields, Fixture, EVENTS, PARTITIONS, SUBSCRIPTION, TOPIC};

/// Steps of one input, and receipts of one step (past the queue's limit of 100).
const MAX_STEPS: usize = 16;
const MAX_RECEIPTS: usize = 120;

enum Token {
    Known(usize),
    Signed(Vec<u8>),
    Text(String),
}

enum Step {
    Ack(Vec<Token>),
    Nack(u64, Vec<Token>),
    Visibility(u64, Vec<Token>),
    Receive(usize, Option<u64>),
    Tick(u32),
}

fn token(word: &str) -> Token {
    if let Some(i) = word.strip_prefix('@').and_then(|i| i.parse().ok()) {
        return Token::Known(i);
    }
    match word.strip_prefix('!').and_then(sluice_fuzz::unhex) {
        Some(body) => Token::Signed(body),
        None => Token::Text(word.to_owned()),
    }
}

fn number(words: &mut Split<'_, char>) -> Option<u64> {
    words.next()?.parse().ok()
}

fn receipts(words: Split<'_, char>) -> Vec<Token> {
    words.take(MAX_RECEIPTS).map(token).collect()
}

/// The step a line says, if it says one.
fn step(line: &str) -> Option<Step> {
    let mut words = line.split(' ');
    Some(match words.next()? {
        "ack" => Step::Ack(receipts(words)),
        "nack" => Step::Nack(number(&mut words)?, receipts(words)),
        "vis" => Step::Visibility(number(&mut words)?, receipts(words)),
        "receive" => Step::Receive(usize::try_from(number(&mut words)?).ok()?, number(&mut words)),
        "tick" => Step::Tick(u32::try_from(number(&mut words)?).ok()?),
        _ => return None,
    })
}

/// The steps of an input; lines that are not steps are skipped.
fn parse(input: &str) -> (Ordering, Vec<Step>) {
    let mut lines = input.lines().peekable();
    let ordering = if lines.next_if_eq(&"ordering key").is_some() { Ordering::Key } else { Ordering::None };
    (ordering, lines.filter_map(step).take(MAX_STEPS).collect())
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    let (ordering, steps) = parse(input);
    let fixture = Fixture::new(ordering);
    sluice_fuzz::block_on(run(&fixture, &steps));
});

/// Only a refused argument (too many receipts, a timeout out of range) may fail a call.
fn check_refusal(step: usize, e: &Error) {
    assert!(matches!(e, Error::Invalid { .. }), "step {step}: the queue failed: {e:?}");
}

/// What a settling call answers per receipt: the receipt to use from now on, if any.
type Outcomes = Result<Vec<Result<Option<String>, ReceiptError>>, Error>;

/// One input's run over its fixture.
struct Run<'a> {
    f: &'a Fixture,
    /// Receipts the queue gave out so far: `@N` is the N-th.
    known: Vec<String>,
    /// Messages acked, by partition and offset.
    acked: HashSet<(u32, u64)>,
}

async fn run(f: &Fixture, steps: &[Step]) {
    let mut run = Run { f, known: f.issued.clone(), acked: HashSet::new() };
    for (n, step) in steps.iter().enumerate() {
        run.step(n, step).await;
    }
    let description = f.queues.describe(TOPIC, SUBSCRIPTION).await.expect("describe the subscription");
    let b = description.backlog;
    let acked = run.acked.len() as u64;
    let counted = b.visible + b.in_flight + b.delayed + b.dead + b.expired + acked;
    assert_eq!(counted, EVENTS, "messages lost or made up: {b:?}, {acked} acked");
}

impl Run<'_> {
    async fn step(&mut self, n: usize, step: &Step) {
        let (queues, f) = (&self.f.queues, self.f);
        let (texts, outcomes): (Vec<String>, Outcomes) = match step {
            Step::Tick(ms) => return f.clock.advance(i64::from(*ms)),
            Step::Receive(max_messages, visibility_timeout_ms) => {
                return self.receive(n, *max_messages, *visibility_timeout_ms).await;
            }
            Step::Ack(tokens) => {
                let texts = self.resolve(tokens);
                let outcomes = queues.ack(TOPIC, SUBSCRIPTION, &texts).await;
                (texts, outcomes.map(|r| r.into_iter().map(|o| o.map(|()| None)).collect()))
            }
            Step::Nack(delay_ms, tokens) => {
                let texts = self.resolve(tokens);
                let outcomes = queues.nack(TOPIC, SUBSCRIPTION, &texts, *delay_ms).await;
                (texts, outcomes.map(|r| r.into_iter().map(|o| o.map(|()| None)).collect()))
            }
            Step::Visibility(timeout_ms, tokens) => {
                let texts = self.resolve(tokens);
                let outcomes = queues.change_visibility(TOPIC, SUBSCRIPTION, &texts, *timeout_ms).await;
                (texts, outcomes)
            }
        };
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(e) => return check_refusal(n, &e),
        };
        assert_eq!(outcomes.len(), texts.len(), "step {n}: one result per receipt");
        for (text, outcome) in texts.iter().zip(&outcomes) {
            let Some(fields) = f.key.open(text).filter(|r| r.sub_id == f.sub_id && r.partition < PARTITIONS) else {
                assert_eq!(*outcome, Err(ReceiptError::Invalid), "step {n}: {text:?} is not a receipt of this queue");
                continue;
            };
            assert_ne!(*outcome, Err(ReceiptError::Invalid), "step {n}: {text:?} is signed for this queue");
            let once = texts.iter().filter(|t| *t == text).count() == 1;
            if n == 0 && once && f.issued.contains(text) {
                assert!(outcome.is_ok(), "step 0: a fresh receipt {text:?} answered {outcome:?}");
            }
            if matches!(step, Step::Ack(_)) && outcome.is_ok() {
                self.acked.insert((fields.partition, fields.offset));
            }
            if let Ok(Some(renewed)) = outcome {
                let again = f.key.open(renewed).expect("a renewed receipt verifies");
                let names = |r: &Fields| (r.sub_id, r.partition, r.offset);
                assert_eq!(names(&again), names(&fields), "step {n}: a renewed receipt names another message");
                self.known.push(renewed.clone());
            }
        }
    }

    async fn receive(&mut self, n: usize, max_messages: usize, visibility_timeout_ms: Option<u64>) {
        let request = ReceiveRequest { max_messages, wait_ms: 0, visibility_timeout_ms };
        match self.f.queues.receive(TOPIC, SUBSCRIPTION, &request).await {
            Ok(messages) => {
                for m in messages {
                    let fields = self.f.key.open(&m.receipt).expect("a received message's receipt verifies");
                    let names = (fields.sub_id, fields.partition, fields.offset);
                    assert_eq!(names, (self.f.sub_id, m.event.partition, m.event.offset), "step {n}: receipt");
                    self.known.push(m.receipt);
                }
            }
            Err(e) => check_refusal(n, &e),
        }
    }

    /// The receipts a step sends.
    fn resolve(&self, tokens: &[Token]) -> Vec<String> {
        tokens
            .iter()
            .map(|t| match t {
                Token::Known(i) => self.known.get(*i).cloned().unwrap_or_else(|| format!("@{i}")),
                Token::Signed(body) => self.f.key.sign(body),
                Token::Text(text) => text.clone(),
            })
            .collect()
    }
}
