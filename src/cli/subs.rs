//! `sluice subs …`: create (with every setting as a flag), list, describe, update, delete,
//! pause, resume, seek and purge a topic's subscriptions, and rotate a push secret.

use clap::Subcommand;
use serde_json::{json, Value};
use sluice_client::{Client, Error};

use super::output::{parse_time, print_change, print_json, print_table, say};

#[derive(Subcommand, Debug)]
pub enum SubVerb {
    /// Create a subscription (or find it with exactly these settings).
    #[command(
        after_help = "Examples:\n  sluice subs create orders billing --start earliest --max-receive-count 3\n  \
                            sluice subs create orders paid --filter '{\"value\": {\"status\": [\"paid\"]}}'\n  \
                            sluice subs create orders hooks --push-url http://localhost:3000/hooks/orders --rate 50/100\n  \
                            sluice subs create orders audit --start 2026-12-01T00:00:00Z --ordering key"
    )]
    Create(CreateArgs),
    /// List a topic's subscriptions.
    #[command(after_help = "Example:\n  sluice subs list orders")]
    List { topic: String },
    /// A subscription with its backlog: visible, in flight, delayed, dead, expired, filtered.
    #[command(after_help = "Example:\n  sluice subs describe orders billing")]
    Describe { topic: String, sub: String },
    /// Change a subscription's settings in place; those not given stay. Prints it as
    /// `describe` does.
    #[command(
        after_help = "Examples:\n  sluice subs update orders billing --visibility-timeout-ms 60000 --max-receive-count 3\n  \
                            sluice subs update orders paid --filter '{\"value\": {\"status\": [\"paid\"]}}'\n  \
                            sluice subs update orders paid --no-filter\n  \
                            sluice subs update orders hooks --rate 20 (or --no-rate)\n  \
                            sluice subs update orders hooks --push-url http://localhost:3000/v2/hooks"
    )]
    Update(UpdateArgs),
    /// Delete a subscription.
    #[command(after_help = "Example:\n  sluice subs delete orders billing")]
    Delete { topic: String, sub: String },
    /// Pause a subscription: it keeps counting new events and delivers nothing until resumed.
    #[command(after_help = "Example:\n  sluice subs pause orders billing")]
    Pause { topic: String, sub: String },
    /// Resume a paused subscription: it delivers again.
    #[command(after_help = "Example:\n  sluice subs resume orders billing")]
    Resume { topic: String, sub: String },
    /// Move a subscription's queue: messages before the target are passed over, those from
    /// it on delivered again. Prints how many per partition.
    #[command(after_help = "Examples:\n  sluice subs seek orders billing --to earliest --dry-run\n  \
                            sluice subs seek orders billing --to 2026-12-01T00:00:00Z\n  \
                            sluice subs seek orders billing --to 120,98,0,7")]
    Seek {
        topic: String,
        sub: String,
        /// `earliest`, `latest`, an RFC 3339 time, or one offset per partition (`o0,o1,…`).
        #[arg(long)]
        to: String,
        /// Count only: change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Purge a subscription's queue: everything not yet delivered or acked is passed over.
    /// Its dead letters stay.
    #[command(after_help = "Example:\n  sluice subs purge orders billing")]
    Purge { topic: String, sub: String },
    /// Rotate a push subscription's signing secret: the new one (generated unless given) is
    /// printed once; the old one signs beside it until the overlap ends.
    #[command(after_help = "Examples:\n  sluice subs rotate-secret orders hooks\n  \
                            sluice subs rotate-secret orders hooks --overlap-ms 3600000\n  \
                            sluice subs rotate-secret orders hooks --secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    RotateSecret {
        topic: String,
        sub: String,
        /// The new secret (`whsec_` and the base64 of a 24- to 64-byte key); generated if absent.
        #[arg(long)]
        secret: Option<String>,
        /// How long the old secret keeps signing (default 86400000, 24 h; at most 7 days).
        #[arg(long)]
        overlap_ms: Option<u64>,
    },
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    topic: String,
    sub: String,
    /// Where the queue begins: `latest` (the server's default), `earliest`, or an RFC 3339
    /// time (each partition's first event at or after it, as `tail --from`).
    #[arg(long)]
    start: Option<String>,
    /// How long a received message stays hidden from other receivers (default 30000).
    #[arg(long)]
    visibility_timeout_ms: Option<u64>,
    /// Deliveries before a message goes to the dead-letter queue (default 5).
    #[arg(long)]
    max_receive_count: Option<u32>,
    /// `key`: a key's messages one at a time, in order; `none` (default): any order.
    #[arg(long, value_parser = ["none", "key"])]
    ordering: Option<String>,
    /// New messages become visible this long after their timestamp (default 0).
    #[arg(long)]
    delay_ms: Option<u64>,
    /// An event pattern, as JSON: only matching events become messages (docs/API.md, Filters).
    #[arg(long)]
    filter: Option<String>,
    /// Push each message to this HTTP endpoint, signed (Standard Webhooks), instead of
    /// waiting for receivers.
    #[arg(long, conflicts_with = "push_lambda")]
    push_url: Option<String>,
    /// Push each batch to this Lambda function (its name or ARN) instead; `serve` needs
    /// `--lambda-endpoint` for it.
    #[arg(long)]
    push_lambda: Option<String>,
    /// At most N messages a second handed out, across every receiver and push delivery:
    /// `N` or `N/BURST` (BURST, how many at once after a quiet spell, defaults to N).
    #[arg(long)]
    rate: Option<String>,
    /// Any other settings, as the JSON body docs/API.md describes (e.g. redelivery_backoff_ms);
    /// the flags above win over it.
    #[arg(long)]
    settings: Option<String>,
}

impl CreateArgs {
    /// The request body: `--settings`, then each flag given over it.
    fn body(&self) -> Result<Value, Error> {
        let mut body: Value = match &self.settings {
            Some(text) => json_flag("--settings", text)?,
            None => json!({}),
        };
        let start = match self.start.as_deref() {
            None => None,
            Some(named @ ("earliest" | "latest")) => Some(Value::from(named)),
            Some(time) => Some(json!({ "timestamp_ms": parse_time("--start", time)? })),
        };
        let filter = self.filter.as_deref().map(|f| json_flag("--filter", f)).transpose()?;
        for (name, value) in [
            ("start", start),
            ("visibility_timeout_ms", self.visibility_timeout_ms.map(Value::from)),
            ("max_receive_count", self.max_receive_count.map(Value::from)),
            ("ordering", self.ordering.clone().map(Value::from)),
            ("delay_ms", self.delay_ms.map(Value::from)),
            ("filter", filter),
            ("rate", self.rate.as_deref().map(rate_flag).transpose()?),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        let push = [("url", &self.push_url), ("lambda", &self.push_lambda)];
        for (name, target) in push {
            if let Some(target) = target {
                if !body["push"].is_object() {
                    body["push"] = json!({});
                }
                body["push"][name] = Value::from(target.as_str());
            }
        }
        Ok(body)
    }
}

#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    topic: String,
    sub: String,
    /// How long a message received from now on stays hidden from other receivers.
    #[arg(long)]
    visibility_timeout_ms: Option<u64>,
    /// Deliveries before a message goes to the dead-letter queue.
    #[arg(long)]
    max_receive_count: Option<u32>,
    /// New messages become visible this long after their timestamp.
    #[arg(long)]
    delay_ms: Option<u64>,
    /// Waits before redeliveries, as JSON: `[ms, …]` or `{"initial_ms", "max_ms", "multiplier"}`.
    #[arg(long, conflicts_with = "no_backoff")]
    redelivery_backoff_ms: Option<String>,
    /// Redeliver at once (remove the backoff).
    #[arg(long)]
    no_backoff: bool,
    /// A new event pattern, as JSON: it applies on each partition from its cursor now.
    #[arg(long, conflicts_with = "no_filter")]
    filter: Option<String>,
    /// Remove the filter: every event becomes a message from each partition's cursor now.
    #[arg(long)]
    no_filter: bool,
    /// A push subscription's new endpoint (its secret stays).
    #[arg(long, conflicts_with = "push_lambda")]
    push_url: Option<String>,
    /// A push subscription's new Lambda function.
    #[arg(long)]
    push_lambda: Option<String>,
    /// Messages per push delivery.
    #[arg(long)]
    push_max_batch: Option<u32>,
    /// How long one push delivery may take.
    #[arg(long)]
    push_timeout_ms: Option<u64>,
    /// Push deliveries under way at once.
    #[arg(long)]
    push_max_in_flight: Option<u32>,
    /// A new rate: `N` or `N/BURST` messages a second (BURST defaults to N).
    #[arg(long, conflicts_with = "no_rate")]
    rate: Option<String>,
    /// Remove the rate: no limit.
    #[arg(long)]
    no_rate: bool,
}

impl UpdateArgs {
    /// The request body: each flag given.
    fn body(&self) -> Result<Value, Error> {
        let mut body = json!({});
        let filter = match (&self.filter, self.no_filter) {
            (Some(f), _) => Some(json_flag("--filter", f)?),
            (None, true) => Some(Value::Null),
            (None, false) => None,
        };
        let rate = match (&self.rate, self.no_rate) {
            (Some(r), _) => Some(rate_flag(r)?),
            (None, true) => Some(Value::Null),
            (None, false) => None,
        };
        let backoff = match (&self.redelivery_backoff_ms, self.no_backoff) {
            (Some(b), _) => Some(json_flag("--redelivery-backoff-ms", b)?),
            (None, true) => Some(Value::Null),
            (None, false) => None,
        };
        for (name, value) in [
            ("visibility_timeout_ms", self.visibility_timeout_ms.map(Value::from)),
            ("max_receive_count", self.max_receive_count.map(Value::from)),
            ("delay_ms", self.delay_ms.map(Value::from)),
            ("redelivery_backoff_ms", backoff),
            ("filter", filter),
            ("rate", rate),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        let push = [
            ("url", self.push_url.clone().map(Value::from)),
            ("lambda", self.push_lambda.clone().map(Value::from)),
            ("max_batch", self.push_max_batch.map(Value::from)),
            ("timeout_ms", self.push_timeout_ms.map(Value::from)),
            ("max_in_flight", self.push_max_in_flight.map(Value::from)),
        ];
        for (name, value) in push {
            if let Some(value) = value {
                if !body["push"].is_object() {
                    body["push"] = json!({});
                }
                body["push"][name] = value;
            }
        }
        Ok(body)
    }
}

/// `--rate N` or `--rate N/BURST` as the API takes it (the server checks the bounds).
fn rate_flag(text: &str) -> Result<Value, Error> {
    let number = |n: &str| {
        n.trim().parse::<u32>().map_err(|_| Error::Invalid(format!("--rate is N or N/BURST, whole numbers: {text:?}")))
    };
    let (per_second, burst) = match text.split_once('/') {
        Some((n, burst)) => (number(n)?, number(burst)?),
        None => (number(text)?, number(text)?),
    };
    Ok(json!({ "per_second": per_second, "burst": burst }))
}

/// A subscription's rate for people: `rate: 50/s, burst 100, waited 1200 ms for it`.
fn rate_line(sub: &Value) -> Option<String> {
    let rate = sub.get("rate").filter(|r| r.is_object())?;
    let mut line = format!("rate: {}/s, burst {}", rate["per_second"], rate["burst"]);
    if let Some(waited) = sub.get("throttled_ms").and_then(Value::as_u64) {
        line += &format!(", waited {waited} ms for it");
    }
    Some(line)
}

fn json_flag(flag: &str, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::Invalid(format!("{flag} is not JSON: {e}")))
}

pub async fn subs(client: &Client, verb: SubVerb, text: bool) -> Result<(), Error> {
    match verb {
        SubVerb::Create(args) => create(client, args, text).await?,
        SubVerb::List { topic } => {
            let subs = client.list_subscriptions(&topic).await?;
            if !text {
                print_json(&json!({ "subscriptions": subs }));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = subs.iter().map(row).collect();
            print_table(&["name", "start", "visibility ms", "max receives", "ordering", "delivery"], &rows);
        }
        SubVerb::Describe { topic, sub } => {
            let described = client.describe_subscription(&topic, &sub).await?;
            if text {
                print_description(&described);
            } else {
                print_json(&described);
            }
        }
        SubVerb::Update(args) => {
            let updated = client.patch_subscription(&args.topic, &args.sub, &args.body()?).await?;
            if text {
                print_description(&updated);
            } else {
                print_json(&updated);
            }
        }
        SubVerb::Delete { topic, sub } => {
            client.delete_subscription(&topic, &sub).await?;
            let deleted = json!({"topic": topic, "subscription": sub, "deleted": true});
            print_change(text, &format!("deleted subscription {topic}/{sub}"), &deleted);
        }
        SubVerb::Pause { topic, sub } => {
            let paused = client.pause(&topic, &sub).await?;
            let waiting = paused["backlog"]["visible"].as_u64().unwrap_or_default();
            let sentence = format!("paused subscription {topic}/{sub} ({waiting} visible messages wait for a resume)");
            print_change(text, &sentence, &paused);
        }
        SubVerb::Seek { topic, sub, to, dry_run } => {
            let sought = client.seek(&topic, &sub, seek_target(&to)?, dry_run).await?;
            print_sought(text, &sought);
        }
        SubVerb::Purge { topic, sub } => print_sought(text, &client.purge(&topic, &sub).await?),
        SubVerb::RotateSecret { topic, sub, secret, overlap_ms } => {
            let rotation = sluice_client::wire::RotateSecret { secret, overlap_ms };
            let rotated = client.rotate_secret(&topic, &sub, &rotation).await?;
            if !text {
                print_json(&rotated);
                return Ok(());
            }
            let until = super::output::rfc3339(rotated.previous_expires_ms);
            say!("rotated the push secret of {topic}/{sub}; the old one signs beside it until {until}");
            say!("push signing secret (shown once: store it now):");
            say!("{}", rotated.secret);
        }
        SubVerb::Resume { topic, sub } => {
            let resumed = client.resume(&topic, &sub).await?;
            let waiting = resumed["backlog"]["visible"].as_u64().unwrap_or_default();
            print_change(text, &format!("resumed subscription {topic}/{sub} ({waiting} visible messages)"), &resumed);
        }
    }
    Ok(())
}

/// Creates it, saying whether it was made now or found with these settings (a look first:
/// the API answers both with the subscription), and a new push secret on its own line.
async fn create(client: &Client, args: CreateArgs, text: bool) -> Result<(), Error> {
    let body = args.body()?;
    let (topic, sub) = (&args.topic, &args.sub);
    let existed = match client.describe_subscription(topic, sub).await {
        Ok(_) => true,
        Err(e) if e.code() == Some(sluice_client::Code::SubscriptionNotFound) => false,
        Err(e) => return Err(e),
    };
    let created = client.create_subscription(topic, sub, &body).await?;
    if !text {
        print_json(&created);
        return Ok(());
    }
    if existed {
        say!("subscription {topic}/{sub} already exists with these settings");
        return Ok(());
    }
    say!("created subscription {topic}/{sub} ({})", summary(&created));
    if let Some(secret) = created["push"]["secret"].as_str() {
        say!("push signing secret (shown once: store it now):");
        say!("{secret}");
    }
    Ok(())
}

/// `from earliest, push to http://…`: what a subscription does, in a few words.
fn summary(sub: &Value) -> String {
    let start = match &sub["start"] {
        Value::String(s) => format!("from {s}"),
        Value::Object(o) if o.contains_key("timestamp_ms") => {
            format!("from {}", super::output::rfc3339(o["timestamp_ms"].as_i64().unwrap_or_default()))
        }
        other => format!("from {other}"),
    };
    let mut parts = vec![start, delivery(sub)];
    if sub["filter"].is_object() {
        parts.push("filtered".into());
    }
    if sub["ordering"] == "key" {
        parts.push("ordered by key".into());
    }
    if let Some(per_second) = sub["rate"]["per_second"].as_u64() {
        parts.push(format!("at most {per_second}/s"));
    }
    parts.join(", ")
}

fn delivery(sub: &Value) -> String {
    match (&sub["push"]["url"], &sub["push"]["lambda"]) {
        (Value::String(url), _) => format!("push to {url}"),
        (_, Value::String(lambda)) => format!("push to Lambda {lambda}"),
        _ => "pull".into(),
    }
}

fn row(sub: &Value) -> Vec<String> {
    let start = match &sub["start"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let number = |v: &Value| v.as_u64().map_or("-".into(), |n| n.to_string());
    vec![
        sub["name"].as_str().unwrap_or_default().to_owned(),
        start,
        number(&sub["visibility_timeout_ms"]),
        number(&sub["max_receive_count"]),
        sub["ordering"].as_str().unwrap_or("none").to_owned(),
        delivery(sub)
            + if sub["filter"].is_object() { ", filtered" } else { "" }
            + match sub["state"].as_str() {
                Some("paused") => ", paused",
                Some("suspended") => ", suspended",
                _ => "",
            },
    ]
}

/// A push subscription's flow state for people: `push: in-flight limit 2 of 8, …`.
fn delivery_line(sub: &Value) -> Option<String> {
    let d = sub.get("delivery").filter(|d| d.is_object())?;
    let mut line = format!(
        "push: in-flight limit {} of {}",
        d["in_flight_limit"].as_u64().unwrap_or_default(),
        sub["push"]["max_in_flight"].as_u64().unwrap_or_default()
    );
    if let Some(until) = d["retry_after_until_ms"].as_i64() {
        line += &format!(", nothing sent before {until} (Retry-After)");
    }
    match d["consecutive_failures"].as_u64() {
        Some(0) | None => {}
        Some(n) => line += &format!(", {n} failed attempts in a row"),
    }
    if let Some(since) = d["suspended_since_ms"].as_i64() {
        line += &format!(", suspended since {since} (one probe a minute)");
    }
    Some(line)
}

/// A subscription's description for people: what it is, its backlog, then per partition.
fn print_description(sub: &Value) {
    let backlog = &sub["backlog"];
    let n = |v: &Value| v.as_u64().unwrap_or_default();
    say!(
        "subscription {}/{}  ({}){}",
        sub["topic"].as_str().unwrap_or_default(),
        sub["name"].as_str().unwrap_or_default(),
        summary(sub),
        match sub["state"].as_str() {
            Some("paused") => "  PAUSED",
            Some("suspended") => "  SUSPENDED",
            _ => "",
        }
    );
    for line in [rate_line(sub), delivery_line(sub)].into_iter().flatten() {
        say!("{line}");
    }
    let unscanned = backlog.get("unscanned").and_then(Value::as_u64).map(|u| format!(", {u} unscanned"));
    say!(
        "backlog: {} visible, {} in flight, {} delayed, {} scheduled, {} dead, {} expired, {} filtered{}",
        n(&backlog["visible"]),
        n(&backlog["in_flight"]),
        n(&backlog["delayed"]),
        n(&backlog["scheduled"]),
        n(&backlog["dead"]),
        n(&backlog["expired"]),
        n(&backlog["filtered"]),
        unscanned.unwrap_or_default(),
    );
    let columns = ["visible", "in_flight", "delayed", "scheduled", "dead", "expired", "filtered"];
    let mut header = vec!["partition", "cursor", "high mark"];
    header.extend(columns);
    let partitions = sub["partitions"].as_array().map(Vec::as_slice).unwrap_or_default();
    // Where a changed filter applies from (`subs update --filter`).
    let since = partitions.iter().any(|p| p.get("filter_since").is_some());
    if since {
        header.push("filter since");
    }
    let rows: Vec<Vec<String>> = partitions
        .iter()
        .map(|p| {
            let mut row = vec![n(&p["partition"]).to_string(), n(&p["cursor"]).to_string()];
            row.push(n(&p["high_watermark"]).to_string());
            row.extend(columns.iter().map(|c| n(&p["backlog"][c]).to_string()));
            if since {
                row.push(p["filter_since"].as_u64().map_or("-".into(), |o| o.to_string()));
            }
            row
        })
        .collect();
    print_table(&header, &rows);
}

/// `--to`'s value as the API takes it.
fn seek_target(to: &str) -> Result<Value, Error> {
    if to == "earliest" || to == "latest" {
        return Ok(json!(to));
    }
    if to.split(',').all(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit())) {
        let offsets: Result<Vec<u64>, _> = to.split(',').map(str::parse).collect();
        return offsets.map(|o| json!({ "offsets": o })).map_err(|e| Error::Invalid(format!("--to {to}: {e}")));
    }
    Ok(json!({ "timestamp_ms": parse_time("--to", to)? }))
}

/// A seek's or a purge's counts: a table per partition and a total line, or the JSON answer.
fn print_sought(text: bool, sought: &sluice_client::wire::SeekOutcome) {
    if !text {
        return print_json(sought);
    }
    let rows: Vec<Vec<String>> = sought
        .partitions
        .iter()
        .map(|p| [u64::from(p.partition), p.from, p.to, p.redeliver, p.skip].iter().map(u64::to_string).collect())
        .collect();
    print_table(&["partition", "from", "to", "redeliver", "skip"], &rows);
    let done = if sought.applied { "applied" } else { "dry run: nothing changed" };
    say!("{} to redeliver, {} to skip ({done})", sought.redeliver, sought.skip);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_subscription_s_flow_state_reads_as_one_line() {
        let sub = |delivery: Value| json!({"push": {"max_in_flight": 8}, "delivery": delivery});
        let cases = [
            (json!({"in_flight_limit": 8, "consecutive_failures": 0}), "push: in-flight limit 8 of 8"),
            (
                json!({"in_flight_limit": 2, "retry_after_until_ms": 1767225630000_i64, "consecutive_failures": 3}),
                "push: in-flight limit 2 of 8, nothing sent before 1767225630000 (Retry-After), 3 failed attempts in a row",
            ),
            (
                json!({"in_flight_limit": 1, "consecutive_failures": 25, "suspended_since_ms": 5}),
                "push: in-flight limit 1 of 8, 25 failed attempts in a row, suspended since 5 (one probe a minute)",
            ),
        ];
        for (delivery, want) in cases {
            assert_eq!(delivery_line(&sub(delivery)).as_deref(), Some(want));
        }
        assert_eq!(delivery_line(&json!({"push": null})), None, "a pull subscription has none");
    }

    #[test]
    fn a_rate_flag_reads_as_the_api_takes_it_and_its_description_as_one_line() {
        assert_eq!(rate_flag("50").unwrap(), json!({"per_second": 50, "burst": 50}));
        assert_eq!(rate_flag("50/200").unwrap(), json!({"per_second": 50, "burst": 200}));
        for bad in ["", "x", "5/", "-1", "1.5", "5/x"] {
            assert!(matches!(rate_flag(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
        let sub = json!({"rate": {"per_second": 50, "burst": 100}, "throttled_ms": 1200});
        assert_eq!(rate_line(&sub).as_deref(), Some("rate: 50/s, burst 100, waited 1200 ms for it"));
        assert_eq!(rate_line(&json!({"rate": null})), None);
    }
}
