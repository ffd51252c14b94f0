//! `group`: the members of one fresh consumer group read the topic end to end, each
//! committing after every poll (or in its next poll, with riding commits), fed a backlog
//! published first or live publishers.

mod member;
mod run;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args::{GroupArgs, PublishShape};
use crate::report::{spawn_progress, Report};
use crate::target::{high_watermarks, unique_group_name, Target};
use crate::BoxError;

use self::member::{Member, MemberStats};
use self::run::{GroupRun, GroupSettings};
use super::load::{publish_live, GroupLoad, LiveTarget, Published};
use super::publish::publish;

pub async fn run(t: &Target, a: GroupArgs) -> Result<Report, BoxError> {
    if a.members == 0 {
        return Err("--members must be at least 1".into());
    }
    let settings = GroupSettings {
        group: unique_group_name(),
        members: a.members,
        max_events: a.max_events,
        // The server counts an event as its value plus 24 bytes, key and headers.
        max_bytes: a.max_bytes.unwrap_or((a.max_events * (a.event_size + 96)).min(6 << 20)),
        wait_ms: a.wait_ms,
        riding_commits: a.riding_commits,
    };
    let default_batch = if a.publishers == 0 { 100 } else { 1 };
    let shape = PublishShape { event_size: a.event_size, batch: a.batch.unwrap_or(default_batch).max(1), keys: 1000 };
    let load = match a.publishers {
        0 => GroupLoad::Backlog { count: a.count },
        p => GroupLoad::Live { publishers: p, duration: Duration::from_secs_f64(a.duration) },
    };
    group(t, settings, shape, load).await
}

/// The `group` workload: a fresh group, started at the end of the topic, reads what this run
/// publishes (a backlog published first, or live publishers), committing after every poll.
async fn group(t: &Target, settings: GroupSettings, shape: PublishShape, load: GroupLoad) -> Result<Report, BoxError> {
    let url = format!("{}/v1/groups/{}", t.base, settings.group);
    let next = seek_latest(t, &url, &settings.group).await?;
    let partitions = next.len();
    let run = Arc::new(GroupRun::new(t, settings, next));
    let members = join(&run, partitions).await?;
    if let GroupLoad::Backlog { count } = load {
        let r = publish(t, shape, 8, Duration::from_secs(3600), count).await?;
        eprintln!("published {} events in {:.1} s; the group drains them", r.events, r.elapsed.as_secs_f64());
        run.set_end(high_watermarks(t).await?);
    }
    let start = Instant::now();
    let progress = spawn_progress(run.delivered.clone(), run.done.clone());
    let consumers: Vec<_> = members.into_iter().map(|m| tokio::spawn(m.consume(run.clone()))).collect();
    let published = match load {
        GroupLoad::Live { publishers, duration } => {
            let to = LiveTarget { base_url: run.base_url.clone(), topic: run.topic.clone(), clock: run.clock };
            let published = publish_live(&to, shape, publishers, start + duration).await?;
            run.set_end(high_watermarks(t).await?);
            published
        }
        GroupLoad::Backlog { .. } => Published::none()?,
    };
    wait_until_delivered(&run, &consumers).await;
    let end = run.end.lock().map_err(|_| "end lock poisoned")?.unwrap_or_else(Instant::now);
    let elapsed = end.duration_since(start);
    progress.await?;
    let mut stats = MemberStats::new()?;
    for consumer in consumers {
        stats.add(&consumer.await??)?;
    }
    // Every member has left: the group goes too, so runs leave nothing behind.
    let r = t.http.delete(&url).send().await?;
    if !r.status().is_success() {
        eprintln!("deleting group {}: {} {}", run.settings.group, r.status(), r.text().await?);
    }
    Ok(report(&run, partitions, shape, load, stats, published, elapsed))
}

/// Starts the group at the end of the topic, so it reads only what this run publishes;
/// answers each partition's start offset, indexed by partition.
async fn seek_latest(t: &Target, url: &str, group: &str) -> Result<Vec<u64>, BoxError> {
    let r = t.http.post(format!("{url}/seek")).json(&json!({ "topic": t.topic, "to": "latest" })).send().await?;
    if !r.status().is_success() {
        return Err(format!("seeking group {group}: {} {}", r.status(), r.text().await?).into());
    }
    let seek: Value = r.json().await?;
    let mut next = Vec::new();
    for o in seek["offsets"].as_array().ok_or("seek: no offsets")? {
        let (p, offset) =
            (o["partition"].as_u64().ok_or("seek: no partition")? as usize, o["offset"].as_u64().unwrap_or(0));
        next.resize(next.len().max(p + 1), 0);
        next[p] = offset;
    }
    Ok(next)
}

/// Opens the members and settles them on one generation, before the clock starts.
async fn join(run: &GroupRun, partitions: usize) -> Result<Vec<Member>, BoxError> {
    let mut members = Vec::with_capacity(run.settings.members);
    for _ in 0..run.settings.members {
        members.push(Member::open(run).await?);
    }
    settle(run, &mut members, partitions).await?;
    eprintln!(
        "group {}: {} members at generation {}, {partitions} partitions",
        run.settings.group, run.settings.members, members[0].generation
    );
    Ok(members)
}

/// Joins every member, one at a time, then polls each until all agree on one generation
/// whose assignment covers every partition, so the timed phase starts without rebalances.
async fn settle(run: &GroupRun, members: &mut [Member], partitions: usize) -> Result<(), BoxError> {
    for _ in 0..10 {
        for m in members.iter_mut() {
            m.poll_and_commit(run, 0).await?;
        }
        let generation = members[0].generation;
        let assigned: usize = members.iter().map(|m| m.assignment).sum();
        if members.iter().all(|m| m.id.is_some() && m.generation == generation) && assigned == partitions {
            return Ok(());
        }
    }
    Err(format!("group {} did not settle on one generation", run.settings.group).into())
}

/// Waits until every partition is read to its end; 30 s without progress, or a member
/// failing, ends the run.
async fn wait_until_delivered(run: &GroupRun, consumers: &[tokio::task::JoinHandle<Result<MemberStats, BoxError>>]) {
    let mut progress_at = (run.delivered.load(Ordering::Relaxed), Instant::now());
    while !run.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let delivered = run.delivered.load(Ordering::Relaxed);
        if delivered != progress_at.0 {
            progress_at = (delivered, Instant::now());
        } else if progress_at.1.elapsed() > Duration::from_secs(30) || consumers.iter().any(|c| c.is_finished()) {
            eprintln!("group {}: stopped with {} events not delivered", run.settings.group, run.missing());
            run.done.store(true, Ordering::Relaxed);
        }
    }
}

/// The figures of a finished run: the members' merged `stats`, and what the live publishers
/// `published` (nothing with a backlog).
fn report(
    run: &GroupRun,
    partitions: usize,
    shape: PublishShape,
    load: GroupLoad,
    stats: MemberStats,
    published: Published,
    elapsed: Duration,
) -> Report {
    let s = &run.settings;
    let missing = run.missing();
    let mut settings = json!({
        "group": s.group, "members": s.members, "partitions": partitions, "max_events": s.max_events,
        "max_bytes": s.max_bytes, "wait_ms": s.wait_ms, "event_size": shape.event_size, "batch": shape.batch,
        "riding_commits": s.riding_commits,
    });
    let mut counts = vec![
        ("polls", stats.polls),
        ("commits", stats.commits),
        ("fenced", stats.fenced),
        ("redelivered", run.redelivered.load(Ordering::Relaxed)),
        ("rejoins", stats.rejoins),
    ];
    let mut histograms = vec![("poll", stats.poll)];
    let (latency, latency_of) = match load {
        GroupLoad::Backlog { count } => {
            settings["mode"] = json!("backlog");
            settings["count"] = json!(count);
            (stats.commit, "commit")
        }
        GroupLoad::Live { publishers, duration } => {
            settings["mode"] = json!("live");
            settings["publishers"] = json!(publishers);
            settings["duration"] = json!(duration.as_secs_f64());
            counts.push(("published", published.acked));
            histograms.push(("commit", stats.commit));
            histograms.push(("publish", published.latency));
            (stats.delivery, "delivery")
        }
    };
    if missing > 0 {
        counts.push(("missing", missing));
    }
    Report {
        workload: "group",
        settings,
        events: run.delivered.load(Ordering::Relaxed),
        bytes: run.bytes.load(Ordering::Relaxed),
        requests: stats.polls,
        errors: stats.errors + published.failed + missing,
        elapsed,
        latency,
        latency_of,
        counts,
        histograms,
        extra: Vec::new(),
        failure: None,
    }
}
