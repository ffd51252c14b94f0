//! The gauges read from the store: partitions' offsets, groups' lag, subscriptions'
//! backlogs. `serve` samples on each scrape, the janitor function on each run.
//!
//! A sample's cost is bounded by [`SampleBounds`]: it lists the topics (one query) and
//! the groups (one query), then describes at most `topics` topics, `groups` groups and
//! `subscriptions` subscriptions, in name order, each describe as its own route would:
//! a topic is one read of its partition heads; a group is its members, offsets and the
//! heads of its topics; a subscription reads each partition's cursor and leases (and,
//! when messages are visible, one event for their age). What is past a bound is left
//! out and [`SAMPLE_TRUNCATED`](m::SAMPLE_TRUNCATED) says so.
//!
//! A gauge of something deleted since the last sample is set to 0 once (unless this
//! sample was truncated, when its absence proves nothing): a recorder keeps a gauge's
//! last value, and CloudWatch's would otherwise go on reporting a deleted
//! subscription's dead letters for as long as the function instance lives.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Instant;

use metrics::{counter, gauge, histogram, Label};
use sluice_core::metrics as m;
use sluice_core::queues::{SubscriptionDescription, SubscriptionState};
use sluice_core::Error;

use crate::App;

/// How finely the per-partition gauges are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// By partition (Prometheus, where label sets are cheap).
    Partition,
    /// Summed per topic, offsets left out (CloudWatch, where each label set is a
    /// custom metric billed by the month).
    Topic,
}

/// The most a sample describes of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleBounds {
    pub topics: usize,
    pub groups: usize,
    pub subscriptions: usize,
}

impl Default for SampleBounds {
    fn default() -> Self {
        Self { topics: 256, groups: 256, subscriptions: 256 }
    }
}

/// What a sample covered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampleReport {
    pub topics: usize,
    pub groups: usize,
    pub subscriptions: usize,
    /// Those it could not read (each logged and skipped).
    pub errors: usize,
    /// Some were left out, by the bounds or an error.
    pub truncated: bool,
}

impl SampleReport {
    /// `None` for what could not be read: deleted since it was listed (skipped), or
    /// failing (logged, counted, and the sample marked truncated), so one bad item
    /// never costs the rest of the sample.
    fn read<T>(&mut self, what: &str, result: Result<T, Error>) -> Option<T> {
        match result {
            Ok(t) => Some(t),
            Err(Error::TopicNotFound(_) | Error::GroupNotFound(_) | Error::SubscriptionNotFound { .. }) => None,
            Err(error) => {
                tracing::warn!(%error, what, "state sample: skipped");
                counter!(m::SAMPLE_ERRORS).increment(1);
                self.errors += 1;
                self.truncated = true;
                None
            }
        }
    }
}

/// A gauge by its name and labels.
type GaugeKey = (&'static str, Vec<Label>);

/// The gauges the last sample of this process set.
static LAST_SAMPLED: Mutex<BTreeSet<GaugeKey>> = Mutex::new(BTreeSet::new());

/// Sets the gauges of what `app`'s store holds now.
/// Something deleted while the sample runs is skipped.
pub async fn sample(app: &App, detail: Detail, bounds: SampleBounds) -> Result<SampleReport, Error> {
    let started = Instant::now();
    let mut gauges = Gauges::default();
    let report = read(app, detail, bounds, &mut gauges).await?;
    let mut last = LAST_SAMPLED.lock().unwrap_or_else(|p| p.into_inner());
    if report.truncated {
        // What this sample left out may still exist: remembered, not zeroed.
        last.extend(gauges.set);
    } else {
        for (name, labels) in last.difference(&gauges.set) {
            gauge!(*name, labels.iter()).set(0.0);
        }
        *last = gauges.set;
    }
    gauge!(m::SAMPLE_TRUNCATED).set(if report.truncated { 1.0 } else { 0.0 });
    histogram!(m::SAMPLE_DURATION).record(started.elapsed().as_secs_f64());
    Ok(report)
}

/// Sets gauges and remembers which.
#[derive(Default)]
struct Gauges {
    set: BTreeSet<GaugeKey>,
}

impl Gauges {
    fn set(&mut self, name: &'static str, labels: &[(&'static str, String)], value: f64) {
        let labels: Vec<Label> = labels.iter().map(|(k, v)| Label::new(*k, v.clone())).collect();
        gauge!(name, labels.iter()).set(value);
        self.set.insert((name, labels));
    }
}

async fn read(app: &App, detail: Detail, bounds: SampleBounds, g: &mut Gauges) -> Result<SampleReport, Error> {
    let mut report = SampleReport::default();
    let mut topics = app.log.list_topics().await?;
    report.truncated |= topics.len() > bounds.topics;
    topics.truncate(bounds.topics);
    for topic in &topics {
        let Some((_, states)) = report.read(&topic.name, app.log.describe_topic(&topic.name).await) else { continue };
        report.topics += 1;
        let name = topic.name.clone();
        g.set(m::TOPIC_BYTES, &[("topic", name.clone())], states.iter().map(|p| p.bytes).sum::<u64>() as f64);
        if detail == Detail::Partition {
            for p in &states {
                let labels = [("topic", name.clone()), ("partition", p.partition.to_string())];
                g.set(m::HIGH_WATERMARK, &labels, p.high_watermark as f64);
                g.set(m::LOG_START, &labels, p.log_start_offset as f64);
            }
        }
    }
    report.truncated |= sample_groups(app, detail, bounds.groups, &mut report, g).await?;
    for topic in &topics {
        let left = bounds.subscriptions - report.subscriptions;
        let Some(mut subs) = report.read(&topic.name, app.queues.list(&topic.name).await) else { continue };
        report.truncated |= subs.len() > left;
        subs.truncate(left);
        for sub in subs {
            let described = app.queues.describe(&topic.name, &sub.name).await;
            if let Some(d) = report.read(&sub.name, described) {
                sample_subscription(&d, g);
                report.subscriptions += 1;
            }
        }
    }
    Ok(report)
}

/// Each group's members, rebalances, and committed offset and lag per partition (or
/// lag per topic). Whether some were left out.
async fn sample_groups(
    app: &App,
    detail: Detail,
    bound: usize,
    report: &mut SampleReport,
    g: &mut Gauges,
) -> Result<bool, Error> {
    let mut groups = app.groups.list().await?;
    let truncated = groups.len() > bound;
    groups.truncate(bound);
    for group in groups {
        let Some(d) = report.read(&group, app.groups.describe(&group).await) else { continue };
        report.groups += 1;
        g.set(m::GROUP_MEMBERS, &[("group", group.clone())], d.members.len() as f64);
        g.set(m::GROUP_GENERATION, &[("group", group.clone())], d.generation as f64);
        let mut per_topic: BTreeMap<&str, u64> = BTreeMap::new();
        for p in &d.partitions {
            *per_topic.entry(&p.topic).or_default() += p.lag;
            if detail == Detail::Partition {
                let labels =
                    [("group", group.clone()), ("topic", p.topic.clone()), ("partition", p.partition.to_string())];
                g.set(m::GROUP_LAG, &labels, p.lag as f64);
                if let Some(committed) = p.committed {
                    g.set(m::GROUP_COMMITTED, &labels, committed as f64);
                }
            }
        }
        if detail == Detail::Topic {
            for (topic, lag) in per_topic {
                g.set(m::GROUP_LAG, &[("group", group.clone()), ("topic", topic.to_owned())], lag as f64);
            }
        }
    }
    Ok(truncated)
}

/// A subscription's backlog by state, its store-kept counts and push deliveries.
fn sample_subscription(d: &SubscriptionDescription, g: &mut Gauges) {
    let b = &d.backlog;
    let labels = [("topic", d.subscription.topic.clone()), ("subscription", d.subscription.name.clone())];
    for (state, n) in [
        ("visible", b.visible),
        ("in_flight", b.in_flight),
        ("delayed", b.delayed),
        ("scheduled", b.scheduled),
        ("dead", b.dead),
    ] {
        g.set(m::SUB_MESSAGES, &[labels[0].clone(), labels[1].clone(), ("state", state.to_owned())], n as f64);
    }
    g.set(m::SUB_FILTERED, &labels, b.filtered as f64);
    g.set(m::SUB_EXPIRED, &labels, b.expired as f64);
    g.set(m::SUB_OLDEST_AGE, &labels, b.oldest_visible_age_ms.unwrap_or(0) as f64 / 1000.0);
    let paused = d.subscription.state == SubscriptionState::Paused;
    g.set(m::SUB_PAUSED, &labels, if paused { 1.0 } else { 0.0 });
    if let Some(throttled_ms) = d.throttled_ms {
        g.set(m::SUB_THROTTLED, &labels, throttled_ms as f64 / 1000.0);
    }
    if let Some(pushed) = &d.deliveries {
        let flow = pushed.flow.clone().unwrap_or_default();
        let suspended = flow.suspended_since_ms.is_some();
        g.set(m::SUB_SUSPENDED, &labels, if suspended { 1.0 } else { 0.0 });
        let ceiling = d.subscription.spec.push.as_ref().map_or(1, |p| p.max_in_flight);
        g.set(m::PUSH_IN_FLIGHT_LIMIT, &labels, flow.limit(ceiling) as f64);
        for (outcome, n) in [("succeeded", pushed.succeeded), ("failed", pushed.failed)] {
            g.set(
                m::PUSH_DELIVERIES,
                &[labels[0].clone(), labels[1].clone(), ("outcome", outcome.to_owned())],
                n as f64,
            );
        }
    }
}
