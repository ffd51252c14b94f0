//! End to end on the AWS path: the push dispatcher function runs under `cargo lambda
//! watch` on moto, woken as template.yaml wires it on AWS, by `infra/stream_trigger.py`
//! (the table stream's event source mapping, with its filter and batching window; the
//! sweep's schedule when this test asks), and delivers to a webhook receiver in this test.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use sluice_conformance::moto::{adapters, moto, workspace_root};
use sluice_conformance::unique_topic;
use sluice_conformance::watch::{free_port, start, Watch, BUILD_TIMEOUT};
use sluice_core::push::webhook;
use sluice_core::queues::{secret_key, Backoff, PushSpec, Queues, StartAt, SubscriptionSpec};
use sluice_core::{Log, LogConfig, NewEvent, SystemClock, TopicSpec};

/// A fixed secret, so the receiver can check signatures from the first attempt.
const SECRET: &str = "whsec_c2x1aWNlLXB1c2gtYXdzLXRlc3Qta2V5";

/// What the receiver saw: per attempt, the message ids and whether the signature held;
/// what it acked, and the messages pushed again after it had acked them.
#[derive(Default)]
struct Seen {
    attempts: Vec<(Vec<String>, bool)>,
    acked: HashSet<String>,
    after_ack: Vec<String>,
}

/// Fails its first attempt with a 500, acknowledges every other.
async fn hook(State(seen): State<Arc<Mutex<Seen>>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let key = secret_key(SECRET).unwrap();
    let valid = webhook::verify(
        &key,
        &header("webhook-id"),
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        &body,
        now_s,
    );
    let parsed: Value = serde_json::from_slice(&body).unwrap_or_default();
    let ids = parsed["messages"].as_array().into_iter().flatten();
    let ids: Vec<String> = ids.map(|m| m["id"].as_str().unwrap_or_default().to_owned()).collect();
    let mut seen = seen.lock().unwrap();
    let again: Vec<String> = ids.iter().filter(|id| seen.acked.contains(*id)).cloned().collect();
    seen.after_ack.extend(again);
    seen.attempts.push((ids.clone(), valid));
    if seen.attempts.len() == 1 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        seen.acked.extend(ids);
        StatusCode::OK
    }
}

/// `infra/stream_trigger.py`, with the lines it prints (one per invocation); stops with the test.
struct Trigger {
    child: Child,
    stdin: ChildStdin,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Drop for Trigger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Trigger {
    fn start(invoke: &str) -> Self {
        let root = workspace_root();
        let s = &moto().settings;
        let mut child = Command::new(root.join(".venv/bin/python"))
            .arg(root.join("infra/stream_trigger.py"))
            .args(["--endpoint", s.endpoint_url.as_deref().unwrap(), "--table", &s.table, "--invoke", invoke])
            .arg("--watch-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start infra/stream_trigger.py");
        let stdin = child.stdin.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let sink = lines.clone();
        std::thread::spawn(move || out.lines().map_while(Result::ok).for_each(|l| sink.lock().unwrap().push(l)));
        Self { child, stdin, lines }
    }

    /// The answers of the invocations from `source` (`stream` or `schedule`) so far.
    fn results(&self, source: &str) -> Vec<Value> {
        let prefix = format!("invoked source={source} ");
        let lines = self.lines.lock().unwrap();
        let mine = lines.iter().filter(|l| l.starts_with(&prefix));
        mine.map(|l| l.split_once(" result=").and_then(|(_, r)| serde_json::from_str(r).ok()).unwrap_or_default())
            .collect()
    }

    /// Waits until a whole poll of the stream that began after this call had nothing left to
    /// invoke: every record written before the call has had its wake.
    async fn quiet(&self, limit: Duration) {
        let idle = |lines: &[String]| lines.iter().filter(|l| *l == "stream idle").count();
        let before = idle(&self.lines.lock().unwrap());
        // The next line may end a poll that began before the call: wait for the one after it.
        eventually("the stream quiet", limit, || idle(&self.lines.lock().unwrap()) >= before + 2).await;
    }

    /// Runs one sweep, as the schedule would, and waits for its answer.
    async fn sweep(&mut self, limit: Duration) -> Value {
        let before = self.results("schedule").len();
        writeln!(self.stdin, "sweep").unwrap();
        eventually("a sweep's answer", limit, || self.results("schedule").len() > before).await;
        self.results("schedule").pop().unwrap()
    }
}

/// Waits in real time (the function runs on the system clock) until `done` holds.
async fn eventually(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_dispatcher_function_woken_by_the_stream_then_commits_are_pushed_and_an_idle_one_sends_nothing() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new().route("/hook", post(hook)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let port = free_port();
    let watch = start("sluice-dispatcher", port, &["SLUICE_PUSH_ALLOW_PRIVATE=true".into()]);
    let mut trigger = Trigger::start(&format!("http://127.0.0.1:{port}"));
    eventually("the stream read", Duration::from_secs(60), || trigger.lines.lock().unwrap().contains(&"ready".into()))
        .await;
    // The function is built on first use (an invocation meanwhile may fail).
    let start = Instant::now();
    while trigger.sweep(BUILD_TIMEOUT).await["deliveries"] != 0 {
        assert!(start.elapsed() < BUILD_TIMEOUT, "the dispatcher never answered a sweep");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    let (log, queues, topic, published) = hooked_topic(&hook_url).await;
    // What the receiver acknowledged (every attempt but the first), and the first's ids.
    let acked = || -> (HashSet<String>, Vec<String>) {
        let seen = seen.lock().unwrap();
        let first = seen.attempts.first().map(|a| a.0.clone()).unwrap_or_default();
        (seen.attempts.iter().skip(1).flat_map(|a| a.0.iter().cloned()).collect(), first)
    };

    // Commits wake the dispatcher through the stream; no sweep has run since they were made.
    eventually("everything but the failed attempt pushed, woken by the stream", Duration::from_secs(60), || {
        let (acked, first) = acked();
        !first.is_empty() && published.iter().all(|id| first.contains(id) || acked.contains(id))
    })
    .await;
    let pushed_by_wakes = || trigger.results("stream").iter().map(|r| r["messages"].as_u64().unwrap_or(0)).sum::<u64>();
    eventually("the wakes' answers count every event", Duration::from_secs(60), || pushed_by_wakes() >= 20).await;
    let woken = trigger.results("stream");
    assert!(woken.iter().all(|r| r["topics"] == 1), "each stream wake names the one topic: {woken:?}");

    // The failed attempt's messages come back: with a later wake, or else with a sweep.
    for _ in 0..20 {
        let (acked, first) = acked();
        if first.iter().all(|id| acked.contains(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.sweep(Duration::from_secs(60)).await;
    }
    let (acked, first) = acked();
    assert!(first.iter().all(|id| acked.contains(id)), "the failed attempt's messages pushed again");
    assert!(seen.lock().unwrap().attempts.iter().all(|(_, valid)| *valid), "every delivery signed with the secret");

    // Idle: nothing published, so the stream wakes nothing and nothing is sent; sweeps run
    // and find nothing due. First the wakes of records already written, still in the
    // trigger's hands (a batch per poll, since the mapping has no batching window), land.
    trigger.quiet(Duration::from_secs(60)).await;
    let (woken, attempts) = (trigger.results("stream").len(), seen.lock().unwrap().attempts.len());
    for _ in 0..2 {
        let swept = trigger.sweep(Duration::from_secs(60)).await;
        assert_eq!(swept["deliveries"], 0, "{swept}");
    }
    assert_eq!(trigger.results("stream").len(), woken, "no wake while nothing is published");
    assert_eq!(seen.lock().unwrap().attempts.len(), attempts, "an idle push subscription sends nothing");
    let after_ack = seen.lock().unwrap().after_ack.clone();
    assert!(after_ack.is_empty(), "pushed again after the receiver acked them: {after_ack:?}");
    let described = queues.describe(&topic, "hook").await.unwrap();
    let deliveries = described.deliveries.expect("a push subscription's counts");
    assert!(deliveries.failed >= 1 && deliveries.succeeded >= 1, "{deliveries:?}");
    assert_eq!(described.backlog.visible + described.backlog.in_flight, 0, "{:?}", described.backlog);

    kill_9_mid_delivery(&queues, &log, watch, port, &mut trigger).await;
}

/// A topic on moto with a push subscription to `hook_url` (signed with `SECRET`, redelivered
/// after 200 ms), and 20 keyed events published to it in four commits: the log, its queues,
/// the topic, and the published messages' ids.
async fn hooked_topic(hook_url: &str) -> (Log, Queues, String, Vec<String>) {
    let (state, objects) = adapters(&moto().settings, Arc::new(SystemClock)).await;
    let log = Log::new(state, objects, Arc::new(SystemClock), LogConfig::default());
    let queues = Queues::new(log.clone());
    let topic = unique_topic("push-aws");
    log.create_topic(&topic, TopicSpec { partitions: 2, retention_ms: None, retention_bytes: None }).await.unwrap();
    let spec = SubscriptionSpec {
        start: StartAt::Earliest,
        redelivery_backoff: Some(Backoff::Steps(vec![200])),
        push: Some(PushSpec::url(hook_url, Some(SECRET.into()))),
        ..SubscriptionSpec::default()
    };
    queues.create(&topic, "hook", spec).await.unwrap();
    let mut published = Vec::new();
    for round in 0..4 {
        let events = (0..5)
            .map(|i| NewEvent {
                key: Some(format!("k{i}").into()),
                headers: Vec::new(),
                value: format!("{{\"n\": {}}}", round * 5 + i).into(),
                value_is_json: true,
                timestamp_ms: None,
                partition: None,
            })
            .collect();
        let at = log.publish(&topic, events, None).await.unwrap();
        published.extend(at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)));
    }
    (log, queues, topic, published)
}

/// An attempt as the hanging receiver saw it: when it arrived, its webhook-id, and its
/// messages' ids with their receive counts.
type HungAttempt = (Instant, String, Vec<(String, u64)>);

/// What the hanging receiver saw.
#[derive(Default)]
struct Hung {
    attempts: Vec<HungAttempt>,
    first_arrived: Option<Arc<tokio::sync::Notify>>,
}

/// Never answers the first attempt (its dispatcher is about to die); acknowledges the rest.
async fn hang_first(State(hung): State<Arc<Mutex<Hung>>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or_default();
    let items = parsed["messages"].as_array().into_iter().flatten();
    let items =
        items.map(|m| (m["id"].as_str().unwrap_or_default().to_owned(), m["receive_count"].as_u64().unwrap_or(0)));
    let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let first = {
        let mut hung = hung.lock().unwrap();
        hung.attempts.push((Instant::now(), id, items.collect()));
        (hung.attempts.len() == 1).then(|| hung.first_arrived.clone()).flatten()
    };
    if let Some(arrived) = first {
        arrived.notify_one();
        std::future::pending::<()>().await;
    }
    StatusCode::OK
}

/// Kill -9 of the dispatcher function while its delivery is under way, then a fresh one:
/// the batch it held is pushed again once its window has passed (the attempt's timeout, 2 s,
/// and the settling margin, 5 s, in real time: the function runs on the system clock), as
/// the same batch (the same webhook-id) with the receive count raised; nothing is lost.
async fn kill_9_mid_delivery(queues: &Queues, log: &Log, watch: Watch, port: u16, trigger: &mut Trigger) {
    let arrived = Arc::new(tokio::sync::Notify::new());
    let hung = Arc::new(Mutex::new(Hung { first_arrived: Some(arrived.clone()), ..Hung::default() }));
    let app = axum::Router::new().route("/hang", post(hang_first)).with_state(hung.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_url = format!("http://{}/hang", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let topic = unique_topic("push-aws-kill");
    log.create_topic(&topic, TopicSpec { partitions: 1, retention_ms: None, retention_bytes: None }).await.unwrap();
    let spec = SubscriptionSpec {
        start: StartAt::Earliest,
        visibility_timeout_ms: 1000,
        redelivery_backoff: Some(Backoff::Steps(vec![0])),
        push: Some(PushSpec { timeout_ms: 2000, ..PushSpec::url(&hang_url, Some(SECRET.into())) }),
        ..SubscriptionSpec::default()
    };
    queues.create(&topic, "hang", spec).await.unwrap();
    let events = (0..3)
        .map(|n| NewEvent {
            key: None,
            headers: Vec::new(),
            value: format!("{{\"n\": {n}}}").into(),
            value_is_json: true,
            timestamp_ms: None,
            partition: None,
        })
        .collect();
    let at = log.publish(&topic, events, None).await.unwrap();
    let ids: HashSet<String> = at.iter().map(|p| webhook::message_id(&topic, p.partition, p.offset)).collect();
    // The stream wakes the function; kill it as soon as its delivery reaches the receiver
    // (well inside the attempt's 2 s timeout).
    tokio::time::timeout(Duration::from_secs(60), arrived.notified()).await.expect("the first delivery arrived");
    watch.kill9();
    let _watch = start("sluice-dispatcher", port, &["SLUICE_PUSH_ALLOW_PRIVATE=true".into()]);
    let acked = || {
        let hung = hung.lock().unwrap();
        hung.attempts.iter().skip(1).flat_map(|a| a.2.iter().map(|i| i.0.clone())).collect::<HashSet<String>>()
    };
    // The first sweep may wait for `cargo run` (the target directory's lock, under CI).
    trigger.sweep(BUILD_TIMEOUT).await;
    let start = Instant::now();
    while !ids.is_subset(&acked()) {
        assert!(start.elapsed() < Duration::from_secs(60), "the held batch was not pushed again");
        tokio::time::sleep(Duration::from_millis(500)).await;
        trigger.sweep(Duration::from_secs(60)).await;
    }
    {
        let hung = hung.lock().unwrap();
        let (first_at, first_id, first) = &hung.attempts[0];
        let (again_at, again_id, again) = &hung.attempts[1];
        assert_eq!(first.iter().map(|i| i.0.clone()).collect::<HashSet<_>>(), ids, "the first attempt held the batch");
        assert_eq!(first_id, again_id, "the same batch, the same webhook-id");
        assert!(again.iter().all(|(_, count)| *count == 2), "the second delivery says so: {again:?}");
        // Held for the whole window (7 s from the receive, just before the first arrival):
        // a dispatcher that lived on would have released it when its attempt timed out (2 s).
        let held = *again_at - *first_at;
        assert!(held >= Duration::from_millis(6500), "pushed again after {held:?}: the killed dispatcher lived on");
    }
    let described = queues.describe(&topic, "hang").await.unwrap();
    assert_eq!(described.backlog.visible + described.backlog.in_flight, 0, "{:?}", described.backlog);
}
