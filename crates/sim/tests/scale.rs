//! The scale model's command: its JSON line, its determinism, and a small run of each
//! workload (seconds of real time, even in a debug build).

use sluice_sim::scale::{run, ScaleArgs, Workload};

const FIELDS: [&str; 13] = [
    "workload",
    "partitions",
    "clients",
    "batch",
    "seconds",
    "throughput_per_s",
    "p50_ms",
    "p99_ms",
    "conflicts",
    "throttles",
    "errors",
    "requests_per_event",
    "dollars_per_million",
];

fn small(workload: Workload) -> ScaleArgs {
    ScaleArgs {
        partitions: 4,
        clients: 4,
        seconds: 2,
        batch: 10,
        subscriptions: 2,
        rate: 200.0,
        ..ScaleArgs::new(workload)
    }
}

/// The line's keys in order, and its value.
fn parse(line: &str) -> (Vec<String>, serde_json::Value) {
    let value: serde_json::Value = serde_json::from_str(line).expect("one JSON object");
    let mut keys = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("\"") {
        let after = &rest[start + 1..];
        let end = after.find('"').expect("a closed string");
        if after[end + 1..].starts_with(':') {
            keys.push(after[..end].to_owned());
        }
        rest = &after[end + 1..];
    }
    (keys, value)
}

#[test]
fn the_line_has_every_field_in_order() {
    let args = small(Workload::Publish);
    let (keys, value) = parse(&run(&args));
    assert_eq!(keys, FIELDS);
    assert_eq!(value["workload"], "publish");
    assert_eq!(value["partitions"], 4);
    assert_eq!(value["batch"], 10);
    assert!(value["throughput_per_s"].as_f64().unwrap() > 0.0, "{value}");
    assert!(value["p99_ms"].as_f64().unwrap() >= value["p50_ms"].as_f64().unwrap());
    assert!(value["requests_per_event"].as_f64().unwrap() > 0.0);
    assert!(value["dollars_per_million"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_seed_gives_the_same_line_every_run_and_seeds_differ() {
    let args = ScaleArgs { batch: 1, ..small(Workload::Publish) };
    let first = run(&args);
    assert_eq!(run(&args), first, "the same seed, the same line");
    let others: Vec<String> = (1..4).map(|seed| run(&ScaleArgs { seed, ..args.clone() })).collect();
    assert!(others.iter().any(|o| *o != first), "other seeds draw other latencies");
}

#[test]
fn each_workload_runs_small() {
    for workload in [Workload::Publish, Workload::Queue, Workload::Group, Workload::Push] {
        let (_, value) = parse(&run(&small(workload)));
        assert_eq!(value["workload"], workload.name());
        assert!(value["throughput_per_s"].as_f64().unwrap() > 0.0, "{value}");
        assert_eq!(value["errors"], 0, "{value}");
    }
}

#[test]
fn concurrent_publishers_conflict_on_the_heads_they_share() {
    // Eight publishers over eight partitions meet on partitions' heads (a publish no longer
    // checks the topic's record, but two publishes to one partition still name its head):
    // the model's conflict rule must fire, or its figures would flatter the design. Batches
    // of 100 are blobs, committed by transaction (single events are one conditional write
    // of the head: a loser fails its condition, which is no conflict).
    let args = ScaleArgs { batch: 100, clients: 8, partitions: 8, ..small(Workload::Publish) };
    let (_, value) = parse(&run(&args));
    assert!(value["conflicts"].as_u64().unwrap() > 0, "{value}");
}

#[test]
fn the_models_prices_agree_with_aws_md_within_five_percent() {
    // docs/AWS.md's cost model, per million 1 KiB events: $3.90 at batch 1 (inline), $0.28
    // at batch 100 keyed over 8 partitions. A change to the commit path changes both: then
    // docs/AWS.md's table is what to update (and these figures with it).
    for (partitions, batch, keyed, aws_md) in [(1, 1, false, 3.90), (8, 100, true, 0.28)] {
        let args = ScaleArgs { partitions, clients: 1, seconds: 5, batch, keyed, ..ScaleArgs::new(Workload::Publish) };
        let (_, value) = parse(&run(&args));
        let model = value["dollars_per_million"].as_f64().unwrap();
        assert!((model / aws_md - 1.0).abs() <= 0.05, "batch {batch}: the model says ${model}, docs/AWS.md ${aws_md}");
    }
}
