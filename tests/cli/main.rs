//! The `sluice` command line, driven as a user would against a real `sluice serve`:
//! publish a 10,000-line file, tail it back in order, read a group's lag, receive, dead
//! letter and redrive, and see an error's code. The work-queue verbs (ack, nack,
//! visibility, dlq delete, `subs create`'s flags) are in `queues.rs`, errors and their
//! hints in `errors.rs`, `--output` on every verb with completions and the man page in
//! `output.rs`, and Ctrl-C on a group's tail in `signals.rs`.

#[path = "../common/mod.rs"]
mod common;
mod errors;
mod output;
mod queues;
mod signals;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::Server;
use serde_json::Value;

/// Runs `sluice ARGS` against `server`, with `stdin` as its input.
fn sluice(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> Output {
    sluice_at(&server.base, args, stdin)
}

/// Runs `sluice ARGS` with `SLUICE_URL` set to `url`.
fn sluice_at(url: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_URL", url)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin piped").write_all(input).expect("write stdin");
    }
    child.wait_with_output().expect("sluice finishes")
}

/// Runs and checks it succeeded; answers stdout.
fn ok(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = sluice(server, args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn ndjson(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// Stdout as one JSON document.
fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn given_a_file_when_published_then_tail_replays_it_in_order_and_a_group_reads_it_to_lag_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "lines", "--partitions", "1", "--retention-ms", "86400000"], None);
    // JSON lines and text lines, as a user's file would mix them.
    let file: Vec<String> = (0..10_000)
        .map(|n| if n % 10 == 0 { format!("plain line {n}") } else { format!("{{\"n\":{n},\"id\":\"k{}\"}}", n % 7) })
        .collect();
    let out = sluice(
        &server,
        &["publish", "lines", "--key-field", "id", "--header", "source=file"],
        Some(file.join("\n").as_bytes()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let published = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((published["sent"].as_u64(), published["published"].as_u64()), (Some(10_000), Some(10_000)));
    assert_eq!(published["partitions"]["0"], serde_json::json!({"first": 0, "last": 9_999}), "{published}");

    let events = ndjson(&ok(&server, &["tail", "lines", "--from", "earliest"], None));
    assert_eq!(events.len(), 10_000);
    for (n, (event, line)) in events.iter().zip(&file).enumerate() {
        assert_eq!(event["offset"], n as u64, "dense offsets in file order");
        let expected: Value = serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.clone()));
        assert_eq!(event["value"], expected, "line {n}");
        assert_eq!(event["headers"]["source"], "file");
        let key = expected.get("id").cloned().unwrap_or(Value::Null);
        assert_eq!(event["key"], key, "the key came from the id field");
    }
    // From an offset, then from a time: the tail of the file.
    assert_eq!(ndjson(&ok(&server, &["tail", "lines", "--partition", "0", "--from", "9990"], None)).len(), 10);
    assert_eq!(ndjson(&ok(&server, &["tail", "lines", "--from", "2000-01-01T00:00:00Z"], None)).len(), 10_000);

    // A group reads everything, then its lag is 0; five more events make it 5.
    assert_eq!(ndjson(&ok(&server, &["tail", "lines", "--group", "readers"], None)).len(), 10_000);
    let group: Value = serde_json::from_str(&ok(&server, &["groups", "describe", "readers"], None)).unwrap();
    assert_eq!(group["lag"], 0, "{group}");
    assert_eq!(group["partitions"][0]["committed_offset"], 10_000, "{group}");
    ok(&server, &["publish", "lines", "a", "b", "c", "d", "e"], None);
    let group: Value = serde_json::from_str(&ok(&server, &["groups", "describe", "readers"], None)).unwrap();
    assert_eq!(group["lag"], 5, "{group}");
    ok(&server, &["groups", "seek", "readers", "--topic", "lines", "--to", "latest"], None);
    let group: Value = serde_json::from_str(&ok(&server, &["groups", "describe", "readers"], None)).unwrap();
    assert_eq!(group["lag"], 0, "after the seek: {group}");
}

#[test]
fn given_messages_that_die_when_redriven_then_they_are_back_in_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "jobs", "--partitions", "2"], None);
    let settings = [
        "subs",
        "create",
        "jobs",
        "w",
        "--start",
        "earliest",
        "--max-receive-count",
        "1",
        "--visibility-timeout-ms",
        "200",
    ];
    ok(&server, &settings, None);
    ok(&server, &["publish", "jobs"], Some(b"{\"job\":1}\n{\"job\":2}\n{\"job\":3}\n"));
    // Received once and not acked: with one delivery allowed, they die when their 200 ms end.
    let received = ndjson(&ok(&server, &["receive", "jobs", "w", "--count", "3"], None));
    assert_eq!(received.len(), 3, "{received:?}");
    assert!(received.iter().all(|m| m["receive_count"] == 1 && m["receipt"].is_string()));
    let more = ndjson(&ok(&server, &["receive", "jobs", "w", "--count", "3", "--wait-ms", "0"], None));
    assert!(more.is_empty(), "messages in flight are not delivered again: {more:?}");
    let mut dead = Vec::new();
    for _ in 0..200 {
        dead = ndjson(&ok(&server, &["dlq", "list", "jobs", "w"], None));
        if dead.len() == 3 {
            break;
        }
    }
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert_eq!(dead[0]["reason"], "max_receive_count_exceeded");

    let out = sluice(&server, &["dlq", "redrive", "jobs", "w", "-o", "text"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("redrove 3 dead letters of jobs/w"), "{out:?}");
    let sub: Value = serde_json::from_str(&ok(&server, &["subs", "describe", "jobs", "w"], None)).unwrap();
    assert_eq!((sub["backlog"]["dead"].as_u64(), sub["backlog"]["visible"].as_u64()), (Some(0), Some(3)), "{sub}");
    let acked = sluice(&server, &["receive", "jobs", "w", "--count", "3", "--ack"], None);
    assert!(String::from_utf8_lossy(&acked.stderr).contains("received 3 messages, acked 3"), "{acked:?}");
}

#[test]
fn given_bad_requests_then_the_api_code_is_printed_and_the_exit_is_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let out = sluice(&server, &["topics", "describe", "missing"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: topic_not_found (404)"), "{out:?}");
    let out = sluice(&server, &["topics", "create", "bad", "--partitions", "0"], None);
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_partitions"), "{out:?}");
    let out = sluice(&server, &["tail", "missing", "--url", "http://127.0.0.1:1"], None);
    assert_eq!(out.status.code(), Some(1), "nobody listening: {out:?}");
    for verb in [
        &["topics", "create"][..],
        &["publish"],
        &["tail"],
        &["receive"],
        &["dlq", "redrive"],
        &["groups", "describe"],
        &["subs", "create"],
    ] {
        let help = ok(&server, &[verb, &["--help"]].concat(), None);
        assert!(help.contains("Example"), "{verb:?} --help has an example: {help}");
    }
}

#[test]
fn given_partitions_of_unequal_lengths_when_tailed_from_an_offset_then_each_starts_there_or_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "t", "--partitions", "2"], None);
    ok(&server, &["publish", "t", "1", "2", "3", "4", "--key", "a"], None);
    ok(&server, &["publish", "t", "5", "--key", "b"], None);
    // 4 and 1, or 5 and 0: one partition is shorter than 2 either way.
    let described = json(&ok(&server, &["topics", "describe", "t"], None));
    let ends: Vec<u64> = (0..2).map(|p| described["partition_states"][p]["high_watermark"].as_u64().unwrap()).collect();
    assert!(ends.iter().any(|&end| end < 2), "{described}");
    let expected: u64 = ends.iter().map(|end| end.saturating_sub(2)).sum();
    let events = ndjson(&ok(&server, &["tail", "t", "--from", "2"], None));
    assert_eq!(events.len() as u64, expected, "{events:?}");
    assert!(events.iter().all(|e| e["offset"].as_u64() >= Some(2)), "{events:?}");
}
