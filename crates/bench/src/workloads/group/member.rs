//! One member of a `group` run: its connection, id and generation, its poll-and-commit
//! loop, and its counts and latencies.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::conn::Conn;
use crate::wire::PollAnswer;
use crate::BoxError;

use super::run::GroupRun;

/// One member's counts and latencies (microseconds) over the timed phase.
pub struct MemberStats {
    pub polls: u64,
    pub commits: u64,
    /// Commits refused with 409: the group moved on (a rebalance) since the poll.
    pub fenced: u64,
    /// Polls refused with 409 (the session ended), after which the member joins afresh.
    pub rejoins: u64,
    pub errors: u64,
    pub poll: Histogram<u64>,
    pub commit: Histogram<u64>,
    pub delivery: Histogram<u64>,
}

impl MemberStats {
    pub fn new() -> Result<Self, BoxError> {
        let h = Histogram::<u64>::new(3)?;
        Ok(Self {
            polls: 0,
            commits: 0,
            fenced: 0,
            rejoins: 0,
            errors: 0,
            poll: h.clone(),
            commit: h.clone(),
            delivery: h,
        })
    }

    pub fn add(&mut self, o: &MemberStats) -> Result<(), BoxError> {
        self.polls += o.polls;
        self.commits += o.commits;
        self.fenced += o.fenced;
        self.rejoins += o.rejoins;
        self.errors += o.errors;
        self.poll.add(&o.poll)?;
        self.commit.add(&o.commit)?;
        self.delivery.add(&o.delivery)?;
        Ok(())
    }
}

/// One consumer: a connection, its member id and generation once joined.
pub struct Member {
    conn: Conn,
    pub id: Option<String>,
    pub generation: u64,
    pub assignment: usize,
    /// With riding commits: per partition, the offset after the last event received in
    /// this generation, sent (and so committed) with the next poll.
    positions: BTreeMap<u32, u64>,
    stats: MemberStats,
}

impl Member {
    pub async fn open(run: &GroupRun) -> Result<Self, BoxError> {
        Ok(Self {
            conn: Conn::open(&run.base_url).await?,
            id: None,
            generation: 0,
            assignment: 0,
            positions: BTreeMap::new(),
            stats: MemberStats::new()?,
        })
    }

    /// Sends a request; a transport error costs the connection, which is opened again.
    async fn send(&mut self, run: &GroupRun, path: &str, body: Value) -> Result<Option<(u16, Bytes)>, BoxError> {
        match self.conn.send(hyper::Method::POST, path, Bytes::from(serde_json::to_vec(&body)?)).await {
            Ok(answer) => Ok(Some(answer)),
            Err(_) => {
                self.conn = Conn::open(&run.base_url).await?;
                self.stats.errors += 1;
                Ok(None)
            }
        }
    }

    /// One poll (joining first if need be), then one commit of the next offsets of what it
    /// got; with riding commits, the poll commits what the previous ones got instead.
    pub async fn poll_and_commit(&mut self, run: &GroupRun, wait_ms: u64) -> Result<(), BoxError> {
        let poll = self.poll_body(run, wait_ms);
        let t0 = Instant::now();
        let Some((status, body)) = self.send(run, &run.poll_path, poll).await? else { return Ok(()) };
        let arrived = Instant::now();
        self.stats.polls += 1;
        match status {
            200 => {}
            409 => {
                // The session ended (the member was silent too long): join again, as a consumer would.
                self.id = None;
                self.stats.rejoins += 1;
                return Ok(());
            }
            _ => {
                self.stats.errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                return Ok(());
            }
        }
        let _ = self.stats.poll.record(arrived.duration_since(t0).as_micros() as u64);
        let answer: PollAnswer = serde_json::from_slice(&body)?;
        if self.id.as_deref() != Some(&answer.member_id) {
            self.id = Some(answer.member_id.clone().into_owned());
        }
        if answer.generation != self.generation {
            // A new generation resumes from the committed offsets: positions start over.
            self.positions.clear();
        }
        self.generation = answer.generation;
        self.assignment = answer.assignment.len();
        if answer.events.is_empty() {
            return Ok(());
        }
        if run.settings.riding_commits {
            for e in &answer.events {
                let next = self.positions.entry(e.partition).or_default();
                *next = (*next).max(e.offset + 1);
            }
            run.deliver(&answer.events, arrived, &mut self.stats.delivery);
            run.check_done();
            return Ok(());
        }
        self.commit(run, &answer).await?;
        // Counted once committed, so the run ends with no commit in flight.
        run.deliver(&answer.events, arrived, &mut self.stats.delivery);
        run.check_done();
        Ok(())
    }

    /// A poll's body: joining if the member has no id; with riding commits, carrying the
    /// positions of what the previous polls got, to commit.
    fn poll_body(&mut self, run: &GroupRun, wait_ms: u64) -> Value {
        let s = &run.settings;
        let mut poll =
            json!({ "topics": [run.topic], "max_events": s.max_events, "max_bytes": s.max_bytes, "wait_ms": wait_ms });
        if let Some(id) = &self.id {
            poll["member_id"] = json!(id);
            if s.riding_commits && !self.positions.is_empty() {
                let positions: Vec<Value> = self
                    .positions
                    .iter()
                    .map(|(p, o)| json!({ "topic": run.topic, "partition": p, "offset": o }))
                    .collect();
                poll["positions"] = json!(positions);
                poll["auto_commit"] = json!(true);
                self.stats.commits += 1;
            }
        }
        poll
    }

    /// Commits the next offsets of what a poll got (a commit request after every poll).
    async fn commit(&mut self, run: &GroupRun, answer: &PollAnswer<'_>) -> Result<(), BoxError> {
        // The next offset of each partition the poll returned events of.
        let mut next: Vec<(u32, u64)> = Vec::new();
        for e in &answer.events {
            match next.iter_mut().find(|(p, _)| *p == e.partition) {
                Some((_, o)) => *o = (*o).max(e.offset + 1),
                None => next.push((e.partition, e.offset + 1)),
            }
        }
        let offsets: Vec<Value> =
            next.iter().map(|(p, o)| json!({ "topic": run.topic, "partition": p, "offset": o })).collect();
        let commit = json!({ "member_id": answer.member_id, "generation": answer.generation, "offsets": offsets });
        let t0 = Instant::now();
        match self.send(run, &run.commit_path, commit).await? {
            Some((204, _)) => {
                self.stats.commits += 1;
                let _ = self.stats.commit.record(t0.elapsed().as_micros() as u64);
            }
            // Fenced: a rebalance happened since the poll; the next poll carries the new generation.
            Some((409, _)) => self.stats.fenced += 1,
            Some(_) => self.stats.errors += 1,
            None => {}
        }
        Ok(())
    }

    /// Polls and commits until the run is done, then leaves the group.
    pub async fn consume(mut self, run: Arc<GroupRun>) -> Result<MemberStats, BoxError> {
        self.stats = MemberStats::new()?;
        while !run.done.load(Ordering::Relaxed) {
            self.poll_and_commit(&run, run.settings.wait_ms).await?;
        }
        if let Some(id) = self.id.take() {
            if let Some((status, body)) = self.send(&run, &run.leave_path, json!({ "member_id": id })).await? {
                if status != 204 {
                    eprintln!("member {id} could not leave: HTTP {status} {}", String::from_utf8_lossy(&body));
                }
            }
        }
        Ok(self.stats)
    }
}
