//! Push delivery's operations: the real dispatcher (`sluice_core::push::Dispatcher`) of a
//! client's process receives a batch and delivers it to the scripted receiver
//! (`world::receiver`), or runs a drain of TOPIC_A's push subscriptions, under the store
//! faults every process sees. What it promises is checked in `checker::push`.

use std::fmt::Write as _;

use sluice_core::push::{Dispatcher, Topics};
use sluice_core::queues::{secret_key, PushSubscription, Queues};
use sluice_core::Clock;

use sluice_core::queues::Ordering as KeyOrdering;

use crate::world::{code, receipt_parts, Act, Done, Kind, Pushed, Res, Target, World, PUSH_SUBS, SUB_PK, TOPIC_A};

impl World {
    /// Creates the push subscriptions (before anything is published) and their workers: one
    /// or two per subscription, each on a process of its own choosing (two dispatchers).
    pub(crate) async fn setup_push(&mut self, queues: &Queues) {
        let tid = self.live_topic_id(TOPIC_A).expect("TOPIC_A exists");
        self.push.receiver.set_topic(tid);
        for name in PUSH_SUBS {
            let spec = self.push.specs[name].clone();
            let (created, _) = queues.create(TOPIC_A, name, spec).await.expect("create a push subscription");
            let record = self.sub_now(TOPIC_A, name).expect("the push subscription is stored");
            let push = created.spec.push.clone().expect("a push spec");
            let key = push.secret().and_then(|s| secret_key(s).ok()).unwrap_or_default();
            let keyed = record.spec.ordering == KeyOrdering::Key;
            self.push.receiver.add_target(name, Target { id: record.id, keyed, key });
            let sub =
                PushSubscription { topic: TOPIC_A.into(), name: name.into(), id: record.id, spec: created.spec, push };
            self.push.subs.insert(name, sub);
            // Two dispatchers on the key-ordered one: its order must hold across them.
            for _ in 0..if name == SUB_PK { 2 } else { 1 } {
                self.add(Kind::Pusher { sub: name });
            }
        }
    }

    /// A push worker's next operation: most often one batch received and delivered, now and
    /// then a dispatcher's drain of TOPIC_A with a deadline a little ahead.
    pub(crate) fn start_pusher(&mut self, c: usize, sub: &'static str, dispatcher: Dispatcher) {
        let Some(ps) = self.push.subs.get(sub).cloned() else { return };
        // A dispatcher busy elsewhere now and then (and the simulation's budget kept).
        if self.rng.chance(0.6) {
            return;
        }
        if self.rng.chance(0.15) {
            let deadline_ms = self.clock.now_ms() + self.rng.range(5_000, 30_000);
            return self.spawn(c, Act::PushDrain { deadline_ms }, Some(TOPIC_A), async move {
                Res::PushDrain(dispatcher.drain(&Topics::Named(vec![TOPIC_A.into()]), deadline_ms).await)
            });
        }
        // Counts reach the store now and then (about once a second in `Dispatcher::run`).
        let flush = self.rng.chance(0.3);
        self.spawn(c, Act::Push { sub }, Some(TOPIC_A), async move {
            let messages = match dispatcher.receive(&ps, 0).await {
                Ok(m) => m,
                Err(e) => return Res::Push(Err(e)),
            };
            let got: Vec<Pushed> = messages
                .iter()
                .filter_map(|m| receipt_parts(&m.receipt).map(|(_, p, o, nonce, count)| (p, o, nonce, count)))
                .collect();
            let delivered = dispatcher.deliver(&ps, messages).await;
            if flush {
                dispatcher.flush_stats().await;
            }
            Res::Push(Ok((got, delivered)))
        });
    }

    pub(crate) fn on_push(&mut self, d: &Done, sub: &'static str) {
        self.check_push_attempts();
        if let Res::Push(Ok((got, Ok(_)))) = &d.res {
            self.check_push_acks(sub, got, d.end_ms);
        }
        self.observe_push_cursors();
    }

    pub(crate) fn on_push_drain(&mut self) {
        self.check_push_attempts();
        self.observe_push_cursors();
    }
}

impl Res {
    /// A push operation's part of its trace line.
    pub(crate) fn write_push_answer(&self, line: &mut String) {
        match self {
            Res::Push(Ok((got, delivered))) => {
                let got: Vec<(u32, u64, u32)> = got.iter().map(|(p, o, _, n)| (*p, *o, *n)).collect();
                let _ = write!(line, "{got:?} ");
                match delivered {
                    Ok(failed) => {
                        let _ = write!(line, "failed {failed}");
                    }
                    Err(e) => line.push_str(&code(e)),
                }
            }
            Res::PushDrain(Ok(d)) => {
                let _ =
                    write!(line, "{} deliveries {} messages {} failed", d.deliveries, d.messages, d.failed_messages);
            }
            Res::Push(Err(e)) | Res::PushDrain(Err(e)) => line.push_str(&code(e)),
            _ => {}
        }
    }
}
