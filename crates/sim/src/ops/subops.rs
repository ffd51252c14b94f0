//! The operator of SUB_QO: it pauses and resumes it, changes its visibility timeout and its
//! filter, seeks it (to each kind of position, as a dry run or for real), purges it and
//! lists its dead letters, while its workers receive and settle and everything else goes
//! on. The model keeps each op's span (`OpsModel`); what the promises allow by it is
//! checked where answers arrive (`checker/subops.rs`).

use sluice_core::queues::{Queues, SeekTo, SubscriptionSpec, SubscriptionState};
use sluice_core::Clock;

use crate::model::{SimFilter, SimPatch};
use crate::world::{code, draw_rate, uncertain, Act, Done, Res, World, SUB_QO, TOPIC_A};

impl World {
    pub(crate) fn start_operator(&mut self, c: usize, queues: Queues) {
        let sub = SUB_QO;
        let seq = self.seq + 1;
        match self.rng.weighted(&[2, 3, 2, 2, 3, 2, 1, 2, 2, 1, 1]) {
            0 => self.spawn(c, Act::Pause { sub }, Some(TOPIC_A), async move {
                Res::Sub(queues.pause(TOPIC_A, sub).await.map(Box::new))
            }),
            1 => {
                self.ops.resumes.push((seq, u64::MAX));
                self.spawn(c, Act::Resume { sub }, Some(TOPIC_A), async move {
                    Res::Sub(queues.resume(TOPIC_A, sub).await.map(Box::new))
                })
            }
            choice @ (2 | 3 | 8..=10) => {
                let patch = match self.ops.retry.take() {
                    Some(again) => again,
                    None => self.draw_patch(choice),
                };
                self.ops.begin(seq, self.clock.now_ms(), &patch);
                let request = patch.request();
                self.spawn(c, Act::Patch { sub, patch }, Some(TOPIC_A), async move {
                    Res::Sub(queues.patch(TOPIC_A, sub, &request).await.map(Box::new))
                })
            }
            choice @ 4..=6 => {
                let (dry_run, purge) = (choice == 4, choice == 6);
                let to = if purge { SeekTo::Latest } else { self.draw_target() };
                if !dry_run {
                    self.ops.seeks.push((seq, u64::MAX));
                }
                let act = Act::QSeek { sub, to: to.clone(), dry_run, purge };
                self.spawn(c, act, Some(TOPIC_A), async move {
                    let sought = match purge {
                        true => queues.purge(TOPIC_A, sub).await,
                        false => queues.seek(TOPIC_A, sub, &to, dry_run).await,
                    };
                    Res::Sought(sought)
                })
            }
            _ => self.spawn(c, Act::DeadLetters { sub }, Some(TOPIC_A), async move {
                Res::Dlq(queues.dead_letters(TOPIC_A, sub, None, 1000).await)
            }),
        }
    }

    /// One setting's change: the window (2), the filter (3), the rate or none (8), the
    /// receive limit (9), the delay (10).
    fn draw_patch(&mut self, choice: usize) -> SimPatch {
        let r = &mut self.rng;
        match choice {
            2 => SimPatch { window: Some(r.range(1000, 6000) as u64), ..SimPatch::default() },
            3 => SimPatch { filter: Some(SimFilter::draw(r)), ..SimPatch::default() },
            8 => SimPatch { rate: Some(r.chance(0.7).then(|| draw_rate(r))), ..SimPatch::default() },
            9 => SimPatch { max_receives: Some(r.range(1, 4) as u32), ..SimPatch::default() },
            _ => SimPatch { delay: Some(r.range(0, 3000) as u64), ..SimPatch::default() },
        }
    }

    /// Where a seek goes: each kind of position (offsets within the log as it is now, a time
    /// within the last minute).
    pub(crate) fn draw_target(&mut self) -> SeekTo {
        match self.rng.weighted(&[1, 1, 2, 2]) {
            0 => SeekTo::Earliest,
            1 => SeekTo::Latest,
            2 => SeekTo::Timestamp(self.clock.now_ms() - self.rng.range(0, 60_000)),
            _ => {
                let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
                let offsets = (0..self.topic_specs[TOPIC_A].partitions)
                    .map(|p| {
                        let head = self.head_now(tid, p);
                        self.rng.range(head.start as i64, head.next as i64) as u64
                    })
                    .collect();
                SeekTo::Offsets(offsets)
            }
        }
    }

    /// An operator's answer: its span ends in the model, what it applied is noted, and the
    /// answer is held to what was asked.
    pub(crate) fn on_operated(&mut self, d: &Done) {
        let (start, end) = (d.start_seq, d.end_seq);
        let ended = |span: &mut (u64, u64)| {
            if span.0 == start {
                span.1 = end;
            }
        };
        self.ops.resumes.iter_mut().for_each(ended);
        self.ops.seeks.iter_mut().for_each(ended);
        let ok = matches!(&d.res, Res::Sub(Ok(_)) | Res::Sought(Ok(_)));
        let tid = self.live_topic_id(TOPIC_A).unwrap_or(0);
        let heads: Vec<u64> = (0..self.topic_specs[TOPIC_A].partitions).map(|p| self.head_now(tid, p).next).collect();
        for c in self.ops.windows.iter_mut().filter(|c| c.start == start) {
            (c.end, c.ok) = (end, ok);
        }
        for c in self.ops.rates.iter_mut().filter(|c| c.start == start) {
            (c.end, c.ok) = (end, ok);
        }
        for c in self.ops.maxes.iter_mut().filter(|c| c.start == start) {
            (c.end, c.ok) = (end, ok);
        }
        if let Act::Patch { patch: SimPatch { delay: Some(_), .. }, .. } = d.act {
            let (began, now) = (d.start_ms as u64, d.end_ms as u64);
            if let Some(c) = self.ops.delays.iter_mut().find(|c| c.start == began && c.end == u64::MAX) {
                (c.end, c.ok) = (now, ok);
            }
        }
        for c in self.ops.filters.iter_mut().filter(|c| c.start == start) {
            (c.end, c.ok, c.value.1) = (end, ok, heads.clone());
        }
        let problem = match (&d.act, &d.res) {
            (Act::Pause { .. }, Res::Sub(Ok(s))) => {
                self.ops.paused.push((start, end));
                (s.state != SubscriptionState::Paused).then(|| format!("a pause answered {:?}", s.state))
            }
            (Act::Resume { .. }, Res::Sub(Ok(s))) => {
                (s.state != SubscriptionState::Active).then(|| format!("a resume answered {:?}", s.state))
            }
            (Act::Patch { patch, .. }, Res::Sub(Ok(s))) => patch_answered(patch, &s.spec),
            (Act::Patch { patch, .. }, res) => {
                self.ops.retry = Some(*patch);
                match res {
                    Res::Sub(Err(e)) => self.refusal(e),
                    _ => None,
                }
            }
            (Act::QSeek { to, dry_run, .. }, Res::Sought(Ok(s))) => {
                if !dry_run {
                    self.ops.sought.push((start, end));
                }
                self.sought_problem(to, *dry_run, s)
            }
            (_, Res::Sub(Err(e)) | Res::Sought(Err(e))) => self.refusal(e),
            _ => None,
        };
        if let Some(p) = problem {
            self.violate("operator-answer", format!("{:?}: {p}", d.act));
        }
    }

    /// An operator's op fails only as any may under faults (or a seek to offsets that
    /// retention has passed since they were drawn).
    fn refusal(&self, e: &sluice_core::Error) -> Option<String> {
        let c = code(e);
        let expected = uncertain(e) || c.contains("busy") || c.contains("contended") || c == "invalid_seek";
        (!expected).then(|| format!("refused: {c}"))
    }

    /// What a seek's answer must say whatever ran beside it: applied unless a dry run, its
    /// totals the sum of its partitions', every partition once, moved where it was asked.
    fn sought_problem(&self, to: &SeekTo, dry_run: bool, s: &sluice_core::queues::Sought) -> Option<String> {
        let partitions = self.topic_specs[TOPIC_A].partitions;
        let (r, k) = s.partitions.iter().fold((0, 0), |(r, k), p| (r + p.redeliver, k + p.skip));
        if s.applied == dry_run || r != s.redeliver || k != s.skip {
            return Some(format!(
                "applied {} with totals {} {} of partitions' {r} {k}",
                s.applied, s.redeliver, s.skip
            ));
        }
        if !s.partitions.iter().map(|p| p.partition).eq(0..partitions) {
            return Some(format!("partitions {:?}", s.partitions.iter().map(|p| p.partition).collect::<Vec<_>>()));
        }
        if let SeekTo::Offsets(offsets) = to {
            if !s.partitions.iter().map(|p| p.to).eq(offsets.iter().copied()) {
                return Some("moved elsewhere than the offsets asked".into());
            }
        }
        None
    }
}

/// What is wrong with a change's answer: a setting it changed not as asked.
fn patch_answered(patch: &SimPatch, spec: &SubscriptionSpec) -> Option<String> {
    let mut wrong = Vec::new();
    if patch.window.is_some_and(|w| w != spec.visibility_timeout_ms) {
        wrong.push(format!("window {}", spec.visibility_timeout_ms));
    }
    if patch.rate.is_some_and(|r| r != spec.rate) {
        wrong.push(format!("rate {:?}", spec.rate));
    }
    if patch.delay.is_some_and(|m| m != spec.delay_ms) {
        wrong.push(format!("delay_ms {}", spec.delay_ms));
    }
    if patch.max_receives.is_some_and(|m| m != spec.max_receive_count) {
        wrong.push(format!("max_receive_count {}", spec.max_receive_count));
    }
    (!wrong.is_empty()).then(|| format!("{patch:?} answered {}", wrong.join(", ")))
}
