//! The group consumer: Kafka's consumer loop over Sluice's poll protocol. It joins on its
//! first poll, keeps its fetch positions and sends them with every poll (so a poll whose
//! answer is lost is sent again and answers the same events: nothing is skipped), commits
//! what the application has finished, and keeps its session alive while the application
//! works on a batch: a background heartbeat polls when no poll came for a third of the
//! session, and its events are dropped (the positions make the next poll fetch them again).
//!
//! Rebalances are the server's (eager): a poll learns that partitions moved, the consumer
//! calls the revocation callback for those it lost and the assignment callback for those it
//! gained. In a new generation (a rebalance or a seek) it drops its positions, and its
//! partitions resume at the committed offsets: progress not yet committed is delivered
//! again, to this member or a new owner (at least once), and a seek is never undone.
//! `commit()` before polling narrows that window; with auto-commit, the poll itself commits
//! what the previous batch received, except in the poll that rebalances.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Call;
use crate::types::{Event, PartitionOffset, TopicPartition};
use crate::{Client, Error};

/// How a [`GroupConsumer`] polls.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Events per poll, 1 to 10,000.
    pub max_events: u32,
    /// How long a poll waits for events (at most 20 s and half the session).
    pub wait_ms: u64,
    /// The session: a member that does not poll for this long is evicted (6 s to 300 s).
    pub session_timeout_ms: u64,
    /// Where a partition without a committed offset starts: `earliest`, `latest`, `none`.
    pub reset: String,
    /// Commit, with each poll, what the previous polls returned (Kafka's auto-commit: a
    /// poll means the application is done with the batch before it).
    pub auto_commit: bool,
    /// A static member's name (Kafka's `group.instance.id`); default: a random one per
    /// consumer, so a join whose answer was lost resumes the same member when retried.
    pub instance_id: Option<String>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            max_events: 500,
            wait_ms: 5_000,
            session_timeout_ms: 45_000,
            reset: "earliest".into(),
            auto_commit: true,
            instance_id: None,
        }
    }
}

type Callback = Box<dyn FnMut(&[TopicPartition]) + Send + Sync>;

#[derive(Deserialize)]
struct PollAnswer {
    member_id: String,
    generation: u64,
    assignment: Vec<TopicPartition>,
    events: Vec<Event>,
}

/// The member's view of the group, shared with the heartbeat.
#[derive(Default)]
struct Member {
    member_id: Option<String>,
    generation: u64,
    assignment: BTreeSet<TopicPartition>,
    /// Per partition, the next offset the application expects (last received + 1).
    positions: BTreeMap<TopicPartition, u64>,
    /// The last poll's moment: the heartbeat polls only when none came for a while.
    last_poll: Option<Instant>,
}

/// A member of a consumer group. See the module notes for what it promises.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?; let server = sluice_runtime::LocalServer::start(dir.path()).await?;
/// use sluice_client::{Client, GroupConsumer, Record, TopicSettings};
///
/// let client = Client::new(server.url())?;
/// client.create_topic("orders", &TopicSettings::partitions(2)).await?;
/// client.publish("orders", &[Record::json(serde_json::json!({"id": 1})).key("a")], None).await?;
///
/// let mut consumer = GroupConsumer::new(client, "billing", &["orders"]);
/// let events = consumer.poll().await?;
/// assert_eq!(events.len(), 1);
/// consumer.commit().await?; // what the polls so far returned
/// consumer.leave().await?;
/// # Ok(()) }
/// ```
pub struct GroupConsumer {
    client: Client,
    group: String,
    topics: Vec<String>,
    config: ConsumerConfig,
    member: Arc<Mutex<Member>>,
    heartbeat: Option<JoinHandle<()>>,
    /// The assignment the callbacks were last told of (a heartbeat may have seen changes
    /// in between: the callbacks get the net difference).
    reported: BTreeSet<TopicPartition>,
    on_assign: Option<Callback>,
    on_revoke: Option<Callback>,
}

impl GroupConsumer {
    /// A consumer of `topics` in `group`, with the default config. Nothing is sent
    /// until the first poll.
    pub fn new(client: Client, group: &str, topics: &[&str]) -> Self {
        Self {
            client,
            group: group.to_owned(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            config: ConsumerConfig::default(),
            member: Arc::new(Mutex::new(Member::default())),
            heartbeat: None,
            reported: BTreeSet::new(),
            on_assign: None,
            on_revoke: None,
        }
    }

    /// With this config.
    pub fn with_config(mut self, config: ConsumerConfig) -> Self {
        self.config = config;
        self
    }

    /// Called with the partitions a poll newly assigned to this member.
    pub fn on_assign(mut self, callback: impl FnMut(&[TopicPartition]) + Send + Sync + 'static) -> Self {
        self.on_assign = Some(Box::new(callback));
        self
    }

    /// Called with the partitions this member lost, before it forgets their positions.
    pub fn on_revoke(mut self, callback: impl FnMut(&[TopicPartition]) + Send + Sync + 'static) -> Self {
        self.on_revoke = Some(Box::new(callback));
        self
    }

    /// The partitions this member holds, as of its last poll.
    pub async fn assignment(&self) -> Vec<TopicPartition> {
        self.member.lock().await.assignment.iter().cloned().collect()
    }

    /// The next events of this member's partitions (after a wait of up to `wait_ms` when
    /// there are none). Joins first if needed, and again if the group evicted it.
    pub async fn poll(&mut self) -> Result<Vec<Event>, Error> {
        let instance =
            self.config.instance_id.get_or_insert_with(|| format!("c-{:016x}", rand::random::<u64>())).clone();
        let mut member = self.member.lock().await;
        let body = poll_body(&self.topics, &self.config, &member, &instance, self.config.auto_commit, None);
        let path = format!("/v1/groups/{}/poll", self.group);
        let call = Call::new(Method::POST, path).json(&body)?.waiting(self.config.wait_ms);
        let answer: PollAnswer = match self.client.fetch(call).await {
            Err(e) if e.code() == Some(sluice_wire::Code::UnknownMember) => {
                // Evicted: everything it held is gone; the next poll joins again.
                *member = Member::default();
                drop(member);
                self.report(BTreeSet::new());
                return Ok(Vec::new());
            }
            other => other?,
        };
        member.apply(&answer);
        for event in &answer.events {
            let tp = TopicPartition { topic: event.topic.clone().unwrap_or_default(), partition: event.partition };
            member.positions.insert(tp, event.offset + 1);
        }
        let now = member.assignment.clone();
        drop(member);
        self.report(now);
        self.start_heartbeat();
        Ok(answer.events)
    }

    /// Tells the callbacks how the assignment changed since they were last told.
    fn report(&mut self, now: BTreeSet<TopicPartition>) {
        let lost: Vec<TopicPartition> = self.reported.difference(&now).cloned().collect();
        let gained: Vec<TopicPartition> = now.difference(&self.reported).cloned().collect();
        if let (Some(callback), false) = (self.on_revoke.as_mut(), lost.is_empty()) {
            callback(&lost);
        }
        if let (Some(callback), false) = (self.on_assign.as_mut(), gained.is_empty()) {
            callback(&gained);
        }
        self.reported = now;
    }

    /// Commits the positions of everything the polls so far returned (the next offset
    /// after each partition's last event). Fenced by the server: a commit after a
    /// rebalance took a partition is refused (`409 not_assigned`, `stale_generation`).
    pub async fn commit(&mut self) -> Result<(), Error> {
        let member = self.member.lock().await;
        self.commit_offsets(&member, &member.position_list()).await
    }

    /// Commits these offsets (each the next offset to read) in the member's generation.
    pub async fn commit_offsets_of(&mut self, offsets: &[PartitionOffset]) -> Result<(), Error> {
        let member = self.member.lock().await;
        self.commit_offsets(&member, offsets).await
    }

    async fn commit_offsets(&self, member: &Member, offsets: &[PartitionOffset]) -> Result<(), Error> {
        let Some(member_id) = &member.member_id else { return Ok(()) };
        // The server takes at most 98 offsets per commit.
        for chunk in offsets.chunks(98) {
            let body = json!({"member_id": member_id, "generation": member.generation, "offsets": chunk});
            self.client.send(Call::new(Method::POST, format!("/v1/groups/{}/commit", self.group)).json(&body)?).await?;
        }
        Ok(())
    }

    /// Commits (with auto-commit on) and leaves the group: its partitions go to the other
    /// members at once. A commit that a rebalance or a seek since the last poll fenced is
    /// let go (those events are delivered again: at least once); the leave is sent
    /// whatever the commit answered, and another commit error is answered then.
    pub async fn leave(mut self) -> Result<(), Error> {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
        let fenced =
            [sluice_wire::Code::StaleGeneration, sluice_wire::Code::NotAssigned, sluice_wire::Code::UnknownMember];
        let committed = match self.config.auto_commit {
            true => match self.commit().await {
                Err(e) if e.code().is_some_and(|c| fenced.contains(&c)) => {
                    tracing::info!(error = %e, "commit on leave fenced: those events will be delivered again");
                    Ok(())
                }
                other => other,
            },
            false => Ok(()),
        };
        let member = std::mem::take(&mut *self.member.lock().await);
        let Some(member_id) = member.member_id else { return committed };
        let call = Call::new(Method::POST, format!("/v1/groups/{}/leave", self.group))
            .json(&json!({"member_id": member_id}))?;
        match self.client.send(call).await {
            Err(e) if e.code() == Some(sluice_wire::Code::UnknownMember) => committed,
            other => other.map(drop).and(committed),
        }
    }

    /// Keeps the session alive while the application works: a poll (of one event,
    /// dropped) whenever none came for a third of the session.
    fn start_heartbeat(&mut self) {
        if self.heartbeat.is_some() {
            return;
        }
        let (client, member, topics, config) =
            (self.client.clone(), self.member.clone(), self.topics.clone(), self.config.clone());
        let group = self.group.clone();
        let every = Duration::from_millis(config.session_timeout_ms / 3);
        self.heartbeat = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every / 2).await;
                let mut member = member.lock().await;
                if member.member_id.is_none() || member.last_poll.is_some_and(|t| t.elapsed() < every) {
                    continue;
                }
                match heartbeat(&client, &group, &topics, &config, &mut member).await {
                    // Evicted: the next poll joins again (and tells the callbacks).
                    Err(e) if e.code() == Some(sluice_wire::Code::UnknownMember) => *member = Member::default(),
                    Err(error) => tracing::warn!(%error, "heartbeat poll failed"),
                    Ok(()) => {}
                }
            }
        }));
    }
}

/// A poll of one event, dropped (the positions make the next poll fetch it again): it
/// keeps the session and learns the current generation and assignment (the callbacks
/// hear of changes with the next poll).
async fn heartbeat(
    client: &Client,
    group: &str,
    topics: &[String],
    config: &ConsumerConfig,
    member: &mut Member,
) -> Result<(), Error> {
    let instance = config.instance_id.clone().unwrap_or_default();
    let body = poll_body(topics, config, member, &instance, false, Some(1));
    let answer: PollAnswer =
        client.fetch(Call::new(Method::POST, format!("/v1/groups/{group}/poll")).json(&body)?).await?;
    member.apply(&answer);
    Ok(())
}

/// Dropped without `leave()`: the member leaves in the background, without committing
/// (what it had not committed is delivered again), so its partitions go to the others at
/// once instead of after its session.
impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if let Some(heartbeat) = self.heartbeat.take() {
            heartbeat.abort();
        }
        let member_id = self.member.try_lock().ok().and_then(|mut m| m.member_id.take());
        if let (Some(member_id), Ok(runtime)) = (member_id, tokio::runtime::Handle::try_current()) {
            let (client, path) = (self.client.clone(), format!("/v1/groups/{}/leave", self.group));
            runtime.spawn(async move {
                if let Ok(call) = Call::new(Method::POST, path).json(&json!({"member_id": member_id})) {
                    let _ = client.send(call).await;
                }
            });
        }
    }
}

impl Member {
    /// The positions as the API takes them: per partition, the next offset expected.
    fn position_list(&self) -> Vec<PartitionOffset> {
        let offset = |(tp, o): (&TopicPartition, &u64)| PartitionOffset {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset: *o,
        };
        self.positions.iter().map(offset).collect()
    }

    /// Takes a poll's membership in. The positions of partitions it lost go (their new
    /// owner resumes at the committed offset), and in a new generation all of them do: a
    /// seek may have moved the committed offsets, and the server trusts the positions it
    /// is sent again from the second poll after a seek, so a kept position would undo the
    /// seek (or skip what it moved back to). Partitions without a position resume at the
    /// committed offset: at worst one batch comes again, nothing is skipped.
    fn apply(&mut self, answer: &PollAnswer) {
        if answer.generation != self.generation {
            self.positions.clear();
        }
        self.member_id = Some(answer.member_id.clone());
        self.generation = answer.generation;
        self.assignment = answer.assignment.iter().cloned().collect();
        let assignment = &self.assignment;
        self.positions.retain(|tp, _| assignment.contains(tp));
        self.last_poll = Some(Instant::now());
    }
}

/// A poll request: a join (no member id yet) or a poll with the member's positions.
fn poll_body(
    topics: &[String],
    config: &ConsumerConfig,
    member: &Member,
    instance: &str,
    auto_commit: bool,
    max_events: Option<u32>,
) -> Value {
    let positions = member.position_list();
    let mut body = json!({
        "topics": topics,
        "max_events": max_events.unwrap_or(config.max_events),
        "wait_ms": if max_events.is_some() { 0 } else { config.wait_ms },
        "reset": config.reset,
        "session_timeout_ms": config.session_timeout_ms,
        "auto_commit": auto_commit && member.member_id.is_some(),
        "positions": positions,
        "instance_id": instance,
    });
    if let Some(member_id) = &member.member_id {
        body["member_id"] = json!(member_id);
    }
    body
}
