//! The operator of SUB_QO: it pauses and resumes it, changes its visibility timeout and its
//! filter, seeks it (to each kind of position, as a dry run or for real), purges it and
//! lists its dead letters, while its workers receive and settle and everything else goes
//! on. The model keeps each op's span (`OpsModel`); what the promises allow by it is
//! checked where answers arrive (`checker/subops.rs`).

use sluice_core::queues::{Queues, SeekTo, SubscriptionPatch, SubscriptionState};
use sluice_core::Clock;

use crate::model::{Change, SimFilter};
use crate::world::{code, uncertain, Act, Done, Res, World, SUB_QO, TOPIC_A};

impl World {
    pub(crate) fn start_operator(&mut self, c: usize, queues: Queues) {
        let sub = SUB_QO;
        let seq = self.seq + 1;
        match self.rng.weighted(&[2, 3, 2, 2, 3, 2, 1, 2]) {
            0 => self.spawn(c, Act::Pause { sub }, Some(TOPIC_A), async move {
                Res::Sub(queues.pause(TOPIC_A, sub).await.map(Box::new))
            }),
            1 => {
                self.ops.resumes.push((seq, u64::MAX));
                self.spawn(c, Act::Resume { sub }, Some(TOPIC_A), async move {
                    Res::Sub(queues.resume(TOPIC_A, sub).await.map(Box::new))
                })
            }
            choice @ (2 | 3) => {
                let (window, filter) = match self.ops.retry.take() {
                    Some(again) => again,
                    None if choice == 2 => (Some(self.rng.range(1000, 6000) as u64), None),
                    None => (None, Some(SimFilter::draw(&mut self.rng))),
                };
                if let Some(w) = window {
                    self.ops.windows.push(Change::begun(seq, w));
                }
                if let Some(f) = filter {
                    self.ops.filters.push(Change::begun(seq, (f, Vec::new())));
                }
                let patch = SubscriptionPatch {
                    visibility_timeout_ms: window,
                    filter: filter.map(SimFilter::pattern),
                    ..SubscriptionPatch::default()
                };
                self.spawn(c, Act::Patch { sub, window, filter }, Some(TOPIC_A), async move {
                    Res::Sub(queues.patch(TOPIC_A, sub, &patch).await.map(Box::new))
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
            (Act::Patch { window: Some(w), .. }, Res::Sub(Ok(s))) => (s.spec.visibility_timeout_ms != *w)
                .then(|| format!("a change to a window of {w} answered {}", s.spec.visibility_timeout_ms)),
            (Act::Patch { window, filter, .. }, res) if !matches!(res, Res::Sub(Ok(_))) => {
                self.ops.retry = Some((*window, *filter));
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
