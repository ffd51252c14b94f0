//! What SUB_QO's rate promises (docs/API.md, "Rate"): across every receiver, the messages
//! handed out in any span of the clock are at most `burst` plus `per_second` for each
//! second of it (with the loosest rate that may have been in force: a change applies from
//! the next receive); and a message waiting for the rate spends no receive count. The
//! first is held against every receive that answered messages, over every span that
//! begins as one of them begins; the second, once all is quiet (`check_rate_quiet`).

use sluice_core::queues::{Queues, Rate, ReceiveRequest, SeekTo};
use sluice_core::Clock;

use crate::model::{SimPatch, Took};
use crate::world::{code, Done, World, SUB_QO, T0, TOPIC_A};

/// Receives looked back over: the oldest are let go (a span that long holds many tokens).
const KEPT: usize = 64;

impl World {
    /// A receive of SUB_QO answered `n` messages: every span ending with it, from the start
    /// of one seen before, holds no more than the rate allows.
    pub(crate) fn check_rate(&mut self, d: &Done, n: usize) {
        if n == 0 {
            return;
        }
        let took =
            Took { start_ms: d.start_ms, end_ms: d.end_ms, start_seq: d.start_seq, end_seq: d.end_seq, n: n as u64 };
        self.ops.took.push(took);
        let excess = self.ops.took.len().saturating_sub(KEPT);
        self.ops.took.drain(..excess);
        let t2 = took.end_ms;
        for from in self.ops.took.iter().map(|t| t.start_ms).filter(|t1| *t1 <= took.start_ms) {
            let within: Vec<&Took> = self.ops.took.iter().filter(|t| t.start_ms >= from && t.end_ms <= t2).collect();
            let first = within.iter().map(|t| t.start_seq).min().unwrap_or(took.start_seq);
            let Some(rate) = self.ops.rate_ceiling(first, took.end_seq) else { continue };
            let handed: u64 = within.iter().map(|t| t.n).sum();
            if !within_rate(handed, rate, t2 - from) {
                let detail = format!(
                    "{SUB_QO}: {handed} messages handed out from {} to {} ({} receives), above {rate:?}",
                    from - T0,
                    t2 - T0,
                    within.len()
                );
                return self.violate("rate-exceeded", detail);
            }
        }
    }

    /// Once quiet, SUB_QO sought back to its start under a rate of its own, received at
    /// each step of the clock (twice at one instant) and acked at once: what each step
    /// answers keeps to the rate, and every message is delivered at its first receive count
    /// (a receive that waited for tokens spent none, and nothing is left in flight).
    pub(crate) async fn check_rate_quiet(&mut self, queues: &Queues) {
        let rate = Rate { per_second: 10, burst: 4 };
        let patch = SimPatch { rate: Some(Some(rate)), ..SimPatch::default() };
        if let Err(e) = queues.patch(TOPIC_A, SUB_QO, &patch.request()).await {
            return self.violate("operator-quiet", format!("patch: {}", code(&e)));
        }
        if let Err(e) = queues.seek(TOPIC_A, SUB_QO, &SeekTo::Earliest, false).await {
            return self.violate("operator-quiet", format!("seek: {}", code(&e)));
        }
        // Windows shorter than a step: a message whose receive count was spent without it
        // is due again by the next step, and is delivered at its second count.
        let req = ReceiveRequest { max_messages: 10, wait_ms: 0, visibility_timeout_ms: Some(500) };
        let (start, mut handed, mut idle) = (self.clock.now_ms(), 0u64, 0);
        while idle < 3 {
            let mut got = 0;
            for _ in 0..2 {
                let ms = match queues.receive(TOPIC_A, SUB_QO, &req).await {
                    Ok(ms) => ms,
                    Err(e) => return self.violate("operator-quiet", format!("receive: {}", code(&e))),
                };
                if let Some(m) = ms.iter().find(|m| m.receive_count != 1) {
                    let (p, o, n) = (m.event.partition, m.event.offset, m.receive_count);
                    return self.violate("rate-count-spent", format!("{SUB_QO} {p}@{o}: delivered at count {n}"));
                }
                got += ms.len() as u64;
                let receipts: Vec<String> = ms.into_iter().map(|m| m.receipt).collect();
                if let Err(e) = queues.ack(TOPIC_A, SUB_QO, &receipts).await {
                    return self.violate("operator-quiet", format!("ack: {}", code(&e)));
                }
            }
            handed += got;
            self.stat("rate_quiet_handed");
            if !within_rate(handed, rate, self.clock.now_ms() - start) {
                let detail = format!("{SUB_QO} quiet: {handed} messages in {} ms", self.clock.now_ms() - start);
                return self.violate("rate-exceeded", format!("{detail}, above {rate:?}"));
            }
            idle = if got == 0 { idle + 1 } else { 0 };
            self.clock.advance(1000);
        }
    }
}

/// Whether `n` messages handed out over `ms` keep to `rate`: at most its burst and its rate
/// for each second (tokens accrue by the millisecond).
fn within_rate(n: u64, rate: Rate, ms: i64) -> bool {
    n * 1000 <= u64::from(rate.burst) * 1000 + u64::from(rate.per_second) * ms.max(0) as u64
}
