//! Where a `queue` run runs: a Sluice over HTTP, or an embedded log in this process whose
//! stores count their calls; what the run asks of either (publish, subscribe, describe).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use crate::args::PublishShape;
use crate::conn::Conn;
use crate::target::{high_watermarks, Target};
use crate::BoxError;

use super::client::{QueueClient, QueueSettings};
use super::profile::{CountingObjects, CountingStore, Profile};
use crate::workloads::publish::publish;

/// Where a `queue` run runs: a Sluice over HTTP (the figures), or an embedded log in this
/// process whose stores count their calls (the profile).
pub enum QueueBackend {
    Http(Target),
    /// `queues` is built once, as the HTTP API builds its `App`: it caches the receipt key
    /// and steers receives apart.
    Embedded {
        log: sluice_core::Log,
        queues: sluice_core::queues::Queues,
        topic: String,
        profile: Arc<Profile>,
    },
}

impl QueueBackend {
    /// Opens the embedded log in `dir`, its stores wrapped to count calls, and creates the topic.
    pub async fn embedded(dir: &std::path::Path, topic: &str, partitions: u32, cache: bool) -> Result<Self, BoxError> {
        use sluice_core::{Clock, ObjectStore, StateStore, SystemClock};
        use sluice_testkit::{Layered, LayeredObjects};
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (store, objects) = sluice_local::open(dir, clock.clone())?;
        let profile = Arc::new(Profile::default());
        let counting = CountingStore { profile: profile.clone(), cache: cache.then(Mutex::default) };
        let store: Arc<dyn StateStore> = Arc::new(Layered::new(store, counting));
        let counting = CountingObjects { profile: profile.clone(), cache: cache.then(Mutex::default) };
        let objects: Arc<dyn ObjectStore> = Arc::new(LayeredObjects::new(objects, counting));
        let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
        let spec = sluice_core::TopicSpec { partitions, retention_ms: None, retention_bytes: None };
        log.create_topic(topic, spec).await?;
        let queues = sluice_core::queues::Queues::new(log.clone());
        Ok(Self::Embedded { log, queues, topic: topic.to_owned(), profile })
    }

    pub fn transport(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Embedded { .. } => "embedded",
        }
    }

    fn sub_path(&self, subscription: &str) -> String {
        let topic = match self {
            Self::Http(t) => &t.topic,
            Self::Embedded { topic, .. } => topic,
        };
        format!("/v1/topics/{topic}/subscriptions/{subscription}")
    }

    pub async fn high_watermarks(&self) -> Result<Vec<u64>, BoxError> {
        match self {
            Self::Http(t) => high_watermarks(t).await,
            Self::Embedded { log, topic, .. } => {
                Ok(log.describe_topic(topic).await?.1.iter().map(|p| p.high_watermark).collect())
            }
        }
    }

    /// Publishes `count` events, 8 requests in flight; answers how many and how long it took.
    pub async fn preload(&self, shape: PublishShape, count: u64) -> Result<(u64, Duration), BoxError> {
        match self {
            Self::Http(t) => {
                let r = publish(t, shape, 8, Duration::from_secs(3600), count).await?;
                if r.errors > 0 {
                    return Err(format!("preload: {} publish requests failed", r.errors).into());
                }
                Ok((r.events, r.elapsed))
            }
            Self::Embedded { log, topic, .. } => {
                let start = Instant::now();
                let next = Arc::new(AtomicU64::new(0));
                let value = Bytes::from(serde_json::to_vec(&"x".repeat(shape.event_size.saturating_sub(2)))?);
                let tasks: Vec<_> = (0..8)
                    .map(|_| {
                        let (log, topic, next, value) = (log.clone(), topic.clone(), next.clone(), value.clone());
                        tokio::spawn(async move {
                            loop {
                                let first = next.fetch_add(shape.batch as u64, Ordering::Relaxed);
                                if first >= count {
                                    return Ok::<_, BoxError>(());
                                }
                                let events = (first..(first + shape.batch as u64).min(count))
                                    .map(|i| sluice_core::NewEvent {
                                        key: Some(Bytes::from(format!("key-{}", i % shape.keys.max(1)))),
                                        headers: Vec::new(),
                                        value: value.clone(),
                                        value_is_json: true,
                                        timestamp_ms: None,
                                        partition: None,
                                    })
                                    .collect();
                                log.publish(&topic, events, None).await?;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await??;
                }
                Ok((count, start.elapsed()))
            }
        }
    }

    /// Creates the subscription; answers its start offset of each partition.
    pub async fn create(&self, settings: &QueueSettings, start: Value) -> Result<Vec<u64>, BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(&settings.subscription));
                let r = t.http.put(&url).json(&json!({ "start": start })).send().await?;
                if r.status() != 201 {
                    return Err(format!("creating {url}: {} {}", r.status(), r.text().await?).into());
                }
                let created: Value = r.json().await?;
                let starts = created["start_offsets"].as_array().ok_or("create: no start_offsets")?;
                Ok(starts.iter().map(|o| o.as_u64().unwrap_or(0)).collect())
            }
            Self::Embedded { queues, topic, .. } => {
                let spec = sluice_core::queues::SubscriptionSpec {
                    start: serde_json::from_value(start)?,
                    ..Default::default()
                };
                let (sub, _) = queues.create(topic, &settings.subscription, spec).await?;
                Ok(sub.start_offsets)
            }
        }
    }

    pub async fn client(&self, settings: &QueueSettings) -> Result<QueueClient, BoxError> {
        match self {
            Self::Http(t) => {
                let mut receive = json!({ "max_messages": settings.batch, "wait_ms": settings.wait_ms });
                if let Some(v) = settings.visibility_timeout_ms {
                    receive["visibility_timeout_ms"] = json!(v);
                }
                let path = self.sub_path(&settings.subscription);
                Ok(QueueClient::Http {
                    conn: Conn::open(&t.base).await?,
                    base: t.base.clone(),
                    receive_path: format!("{path}/receive"),
                    ack_path: format!("{path}/ack"),
                    receive_body: Bytes::from(serde_json::to_vec(&receive)?),
                    receive_json: receive,
                })
            }
            Self::Embedded { queues, topic, .. } => Ok(QueueClient::Embedded {
                queues: queues.clone(),
                topic: topic.clone(),
                subscription: settings.subscription.clone(),
                request: sluice_core::queues::ReceiveRequest {
                    max_messages: settings.batch,
                    wait_ms: settings.wait_ms,
                    visibility_timeout_ms: settings.visibility_timeout_ms,
                },
            }),
        }
    }

    /// The subscription's backlog as the server counts it: visible, in flight, delayed, dead.
    pub async fn backlog(&self, subscription: &str) -> Result<[u64; 4], BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(subscription));
                let d: Value = t.http.get(&url).send().await?.json().await?;
                let b = &d["backlog"];
                let n = |f: &str| b[f].as_u64().ok_or_else(|| format!("describe {url}: no backlog.{f}: {d}"));
                Ok([n("visible")?, n("in_flight")?, n("delayed")?, n("dead")?])
            }
            Self::Embedded { queues, topic, .. } => {
                let d = queues.describe(topic, subscription).await?;
                Ok([d.backlog.visible, d.backlog.in_flight, d.backlog.delayed, d.backlog.dead])
            }
        }
    }

    pub async fn delete(&self, subscription: &str) -> Result<(), BoxError> {
        match self {
            Self::Http(t) => {
                let url = format!("{}{}", t.base, self.sub_path(subscription));
                let r = t.http.delete(&url).send().await?;
                if !r.status().is_success() {
                    return Err(format!("deleting {url}: {} {}", r.status(), r.text().await?).into());
                }
                Ok(())
            }
            Self::Embedded { queues, topic, .. } => Ok(queues.delete(topic, subscription).await?),
        }
    }
}
