//! One method per route of the API, for topics, publishing, replay and group
//! administration. Each says whether it is retried (see the crate's notes on retries).

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_wire::{GroupList, Published, Sought, TopicList};

use crate::client::Call;
use crate::types::{
    From, GroupDescription, Page, PartitionOffset, Placed, Record, SeekTo, Topic, TopicDescription, TopicSettings,
};
use crate::{Client, Error};

#[derive(Deserialize)]
struct Lookup {
    offset: u64,
}

impl Client {
    /// Creates a topic (`PUT /v1/topics/{topic}`), or finds it with exactly these settings.
    /// Retried: creating is idempotent.
    pub async fn create_topic(&self, topic: &str, settings: &TopicSettings) -> Result<Topic, Error> {
        self.fetch(Call::new(Method::PUT, format!("/v1/topics/{topic}")).json(settings)?).await
    }

    /// Every topic, by name.
    pub async fn list_topics(&self) -> Result<Vec<Topic>, Error> {
        Ok(self.fetch::<TopicList>(Call::new(Method::GET, "/v1/topics")).await?.topics)
    }

    /// A topic with the state of each partition.
    pub async fn describe_topic(&self, topic: &str) -> Result<TopicDescription, Error> {
        self.fetch(Call::new(Method::GET, format!("/v1/topics/{topic}"))).await
    }

    /// Deletes a topic. Retried; a retry's `404` means the first attempt deleted it.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), Error> {
        self.delete(format!("/v1/topics/{topic}")).await
    }

    /// A delete, retried; a retry's `404` means an earlier attempt deleted it.
    pub(crate) async fn delete(&self, path: String) -> Result<(), Error> {
        match self.send_counted(Call::new(Method::DELETE, path)).await {
            (Err(e), attempts) if e.status() == Some(404) && attempts > 1 => Ok(()),
            (result, _) => result.map(drop),
        }
    }

    /// Publishes `records` in one request, in order; answers where each landed. With an
    /// `idempotency_key` the request is retried (and applied once); without, it is sent
    /// once, since a retry could write the events twice.
    pub async fn publish(
        &self,
        topic: &str,
        records: &[Record],
        idempotency_key: Option<&str>,
    ) -> Result<Vec<Placed>, Error> {
        let mut call =
            Call::new(Method::POST, format!("/v1/topics/{topic}/events")).json(&json!({"events": records}))?;
        call = match idempotency_key {
            Some(key) => call.header("idempotency-key", key),
            None => call.once(),
        };
        Ok(self.fetch::<Published>(call).await?.results)
    }

    /// A page of one partition's events from `from` (`limit` at most, waiting up to
    /// `wait_ms` for the first). Retried: reading changes nothing.
    pub async fn read(&self, topic: &str, partition: u32, from: From, limit: u32, wait_ms: u64) -> Result<Page, Error> {
        let call = Call::new(Method::GET, format!("/v1/topics/{topic}/partitions/{partition}/events"))
            .query("offset", from.as_query())
            .query("limit", limit)
            .query("wait_ms", wait_ms)
            .waiting(wait_ms);
        self.fetch(call).await
    }

    /// The first offset of `partition` whose event is at or after `timestamp_ms`.
    pub async fn offset_for_time(&self, topic: &str, partition: u32, timestamp_ms: i64) -> Result<u64, Error> {
        let call = Call::new(Method::GET, format!("/v1/topics/{topic}/partitions/{partition}/offsets"))
            .query("timestamp_ms", timestamp_ms);
        Ok(self.fetch::<Lookup>(call).await?.offset)
    }

    /// The names of every consumer group.
    pub async fn list_groups(&self) -> Result<Vec<String>, Error> {
        Ok(self.fetch::<GroupList>(Call::new(Method::GET, "/v1/groups")).await?.groups)
    }

    /// A group's members, assignment, committed offsets and lag.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription, Error> {
        self.fetch(Call::new(Method::GET, format!("/v1/groups/{group}"))).await
    }

    /// Moves a group's committed offsets: of `topic` (some `partitions`, or all), or of
    /// every topic it reads when `topic` is `None`. Answers the new offsets.
    pub async fn seek_group(
        &self,
        group: &str,
        topic: Option<&str>,
        partitions: &[u32],
        to: SeekTo,
    ) -> Result<Vec<PartitionOffset>, Error> {
        let mut body = match to {
            SeekTo::Earliest => json!({"to": "earliest"}),
            SeekTo::Latest => json!({"to": "latest"}),
            SeekTo::Offset(offset) => json!({"offset": offset}),
            SeekTo::Timestamp(ms) => json!({"timestamp_ms": ms}),
        };
        if let Some(topic) = topic {
            body["topic"] = Value::from(topic);
        }
        if !partitions.is_empty() {
            body["partitions"] = Value::from(partitions.to_vec());
        }
        let call = Call::new(Method::POST, format!("/v1/groups/{group}/seek")).json(&body)?;
        Ok(self.fetch::<Sought>(call).await?.offsets)
    }

    /// Deletes a group and its offsets (`409 group_not_empty` while it has members).
    pub async fn delete_group(&self, group: &str) -> Result<(), Error> {
        self.delete(format!("/v1/groups/{group}")).await
    }
}
