//! The work-queue verbs: peek, ack, nack and visibility by receipt, `dlq delete` and
//! `dlq redrive --max`, and `subs create`'s flags.

use serde_json::Value;

use crate::common::Server;
use crate::{json, ndjson, ok, sluice, stderr};

/// A topic `jobs` with a subscription `w` from the start, and three jobs published.
fn three_jobs(server: &Server, max_receive_count: &str) {
    ok(server, &["topics", "create", "jobs"], None);
    let create = ["subs", "create", "jobs", "w", "--start", "earliest", "--max-receive-count", max_receive_count];
    ok(server, &create, None);
    ok(server, &["publish", "jobs"], Some(b"{\"job\":1}\n{\"job\":2}\n{\"job\":3}\n"));
}

fn receipts(server: &Server, count: &str) -> Vec<String> {
    let received = ndjson(&ok(server, &["receive", "jobs", "w", "--count", count, "--wait-ms", "0"], None));
    received.iter().map(|m| m["receipt"].as_str().expect("a receipt").to_owned()).collect()
}

fn backlog(server: &Server) -> Value {
    json(&ok(server, &["subs", "describe", "jobs", "w"], None))["backlog"].clone()
}

#[test]
fn given_received_messages_when_acked_nacked_and_hidden_then_each_verb_settles_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "5");
    let r = receipts(&server, "3");
    assert_eq!(r.len(), 3);

    let acked = ok(&server, &["ack", "jobs", "w", &r[0], "-o", "text"], None);
    assert_eq!(acked.trim(), "acked 1 message of jobs/w");
    let nacked = json(&ok(&server, &["nack", "jobs", "w", &r[1], "--delay-ms", "0"], None));
    assert_eq!(nacked["results"][0]["ok"], true, "{nacked}");
    let hidden = json(&ok(&server, &["visibility", "jobs", "w", &r[2], "--timeout-ms", "600000"], None));
    let renewed = hidden["results"][0]["receipt"].as_str().expect("the receipt to use from now on").to_owned();
    let b = backlog(&server);
    assert_eq!((b["visible"].as_u64(), b["in_flight"].as_u64()), (Some(1), Some(1)), "the nacked one is back: {b}");

    // The nacked message comes back with a new receipt: its old one is stale now, and a
    // receipt that did nothing makes the exit 1, after the others were settled.
    // On a terminal (`-o text`), each message's receipt is on a line under it.
    let shown = ok(&server, &["receive", "jobs", "w", "--wait-ms", "0", "-o", "text"], None);
    let lines: Vec<&str> = shown.lines().collect();
    assert!(lines[0].starts_with("[receive 2] jobs/0@1 ") && lines[0].ends_with(r#"{"job":2}"#), "{shown}");
    let again = [lines[1].strip_prefix("  receipt ").expect("the receipt under the message").to_owned()];
    let stale = sluice(&server, &["ack", "jobs", "w", &r[1], &again[0], &renewed], None);
    assert_eq!(stale.status.code(), Some(1), "{stale:?}");
    let results = json(&String::from_utf8_lossy(&stale.stdout))["results"].clone();
    let oks: Vec<Option<bool>> = (0..3).map(|n| results[n]["ok"].as_bool()).collect();
    assert_eq!(oks, [Some(false), Some(true), Some(true)], "{results}");
    let told = stderr(&stale);
    assert!(told.starts_with(&format!("error: 1 receipt did nothing: {} (stale_receipt: ", r[1])), "{told}");
    assert_eq!(backlog(&server)["in_flight"], 0);
}

#[test]
fn given_visible_messages_when_peeked_then_they_are_shown_and_nothing_is_received() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "5");
    let peeked = ndjson(&ok(&server, &["peek", "jobs", "w", "--count", "2"], None));
    assert_eq!(peeked.len(), 2, "{peeked:?}");
    assert!(peeked.iter().all(|m| m["receive_count"] == 0 && m.get("receipt").is_none()), "{peeked:?}");
    assert_eq!((peeked[0]["value"]["job"].as_u64(), peeked[0]["topic"].as_str()), (Some(1), Some("jobs")));
    let shown = ok(&server, &["peek", "jobs", "w", "-o", "text"], None);
    assert_eq!(shown.lines().count(), 3, "{shown}");
    assert!(shown.starts_with("[0 receives] jobs/0@0 "), "{shown}");
    let b = backlog(&server);
    assert_eq!((b["visible"].as_u64(), b["in_flight"].as_u64()), (Some(3), Some(0)), "nothing received: {b}");
    let received = ndjson(&ok(&server, &["receive", "jobs", "w", "--count", "3", "--wait-ms", "0"], None));
    assert!(received.iter().all(|m| m["receive_count"] == 1), "the first delivery still: {received:?}");
    assert_eq!(ok(&server, &["peek", "jobs", "w", "-o", "text"], None).trim(), "no visible messages in jobs/w");
}

#[test]
fn given_dead_letters_when_one_is_deleted_and_one_redriven_then_one_stays_dead() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "1");
    // Given back at once, with one delivery allowed: the next receive dead-letters them.
    let r = receipts(&server, "3");
    ok(&server, &[&["nack", "jobs", "w"][..], &r.iter().map(String::as_str).collect::<Vec<_>>()].concat(), None);
    assert!(receipts(&server, "3").is_empty(), "every message was dead-lettered");
    let dead = ndjson(&ok(&server, &["dlq", "list", "jobs", "w"], None));
    assert_eq!(dead.len(), 3, "{dead:?}");

    let id = dead[0]["id"].as_str().unwrap();
    let deleted = ok(&server, &["dlq", "delete", "jobs", "w", id, "-o", "text"], None);
    assert_eq!(deleted.trim(), "deleted 1 dead letter of jobs/w");
    let redriven = json(&ok(&server, &["dlq", "redrive", "jobs", "w", "--max", "1"], None));
    assert_eq!(redriven["redriven"], 1, "{redriven}");
    let b = backlog(&server);
    assert_eq!((b["dead"].as_u64(), b["visible"].as_u64()), (Some(1), Some(1)), "{b}");
    let listed = ok(&server, &["dlq", "list", "jobs", "w", "-o", "text"], None);
    assert!(listed.contains("max_receive_count_exceeded after 1 receive,"), "{listed}");
}

#[test]
fn given_subs_create_flags_then_the_subscription_has_those_settings() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "orders", "--partitions", "2"], None);
    let args = [
        "subs",
        "create",
        "orders",
        "paid",
        "--filter",
        r#"{"value": {"status": ["paid"]}}"#,
        "--ordering",
        "key",
        "--delay-ms",
        "10",
        "--start",
        "2026-01-01T00:00:00Z",
        "--visibility-timeout-ms",
        "1000",
    ];
    let created = json(&ok(&server, &args, None));
    assert_eq!(created["filter"]["value"]["status"][0], "paid", "{created}");
    assert_eq!((created["ordering"].as_str(), created["delay_ms"].as_u64()), (Some("key"), Some(10)), "{created}");
    assert_eq!(created["start"]["timestamp_ms"], 1_767_225_600_000_i64, "{created}");
    let again = ok(&server, &[&args[..], &["-o", "text"]].concat(), None);
    assert_eq!(again.trim(), "subscription orders/paid already exists with these settings");

    // A push target: the secret on a line of its own, once.
    let push = ["subs", "create", "orders", "hooks", "--push-url", "http://127.0.0.1:9/hooks", "-o", "text"];
    let out = ok(&server, &push, None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "created subscription orders/hooks (from latest, push to http://127.0.0.1:9/hooks)");
    assert!(lines[1].contains("shown once: store it now"), "{out}");
    assert!(lines[2].starts_with("whsec_") && !lines[2].contains(' '), "the secret alone: {out}");
    let listed = ok(&server, &["subs", "list", "orders", "-o", "text"], None);
    assert!(
        listed.lines().any(|l| l.starts_with("hooks") && l.ends_with("push to http://127.0.0.1:9/hooks")),
        "{listed}"
    );
    let described = ok(&server, &["subs", "describe", "orders", "hooks", "-o", "text"], None);
    assert_eq!(described.lines().nth(1), Some("push: in-flight limit 4 of 4"), "{described}");
    let bad = sluice(&server, &["subs", "create", "orders", "x", "--filter", "{not json"], None);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).starts_with("error: --filter is not JSON"), "{}", stderr(&bad));
}

#[test]
fn given_a_paused_subscription_then_it_delivers_nothing_until_resumed_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "5");
    let held = receipts(&server, "1");
    let paused = ok(&server, &["subs", "pause", "jobs", "w", "-o", "text"], None);
    assert_eq!(paused.trim(), "paused subscription jobs/w (2 visible messages wait for a resume)");
    let again = json(&ok(&server, &["subs", "pause", "jobs", "w"], None));
    assert_eq!((again["state"].as_str(), again["backlog"]["visible"].as_u64()), (Some("paused"), Some(2)), "{again}");
    ok(&server, &["publish", "jobs"], Some(b"{\"job\":4}\n"));
    assert!(receipts(&server, "10").is_empty(), "a paused subscription delivers nothing");
    assert!(ok(&server, &["subs", "describe", "jobs", "w", "-o", "text"], None)
        .lines()
        .next()
        .unwrap()
        .ends_with("PAUSED"));
    ok(&server, &["ack", "jobs", "w", &held[0]], None);

    let resumed = ok(&server, &["subs", "resume", "jobs", "w", "-o", "text"], None);
    assert_eq!(resumed.trim(), "resumed subscription jobs/w (3 visible messages)");
    assert_eq!(receipts(&server, "10").len(), 3, "everything it held, once resumed");
    let missing = sluice(&server, &["subs", "pause", "jobs", "nope"], None);
    assert!(stderr(&missing).contains("subscription_not_found"), "{}", stderr(&missing));
}

#[test]
fn given_an_acked_message_then_seek_dry_run_counts_it_and_purge_passes_over_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "5");
    let held = receipts(&server, "3");
    ok(&server, &["ack", "jobs", "w", &held[0]], None);

    let dry = ok(&server, &["subs", "seek", "jobs", "w", "--to", "earliest", "--dry-run", "-o", "text"], None);
    assert_eq!(
        dry.lines().next().map(str::split_whitespace).map(Vec::from_iter),
        Some(vec!["partition", "from", "to", "redeliver", "skip"]),
        "{dry}"
    );
    assert_eq!(dry.lines().last(), Some("1 to redeliver, 0 to skip (dry run: nothing changed)"), "{dry}");
    assert_eq!(backlog(&server)["in_flight"], 2, "a dry run changes nothing");

    let purged = json(&ok(&server, &["subs", "purge", "jobs", "w"], None));
    assert_eq!((purged["applied"].as_bool(), purged["skip"].as_u64()), (Some(true), Some(2)), "{purged}");
    assert!(receipts(&server, "10").is_empty(), "purged");
    let bad = sluice(&server, &["subs", "seek", "jobs", "w", "--to", "99"], None);
    assert!(stderr(&bad).contains("invalid_seek"), "{}", stderr(&bad));
}

#[test]
fn given_subs_update_then_the_settings_change_a_filter_applies_from_its_cursor_and_start_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    three_jobs(&server, "5");
    let update = ["subs", "update", "jobs", "w", "--visibility-timeout-ms", "60000", "--max-receive-count", "2"];
    let updated = json(&ok(&server, &update, None));
    assert_eq!(
        (updated["visibility_timeout_ms"].as_u64(), updated["max_receive_count"].as_u64()),
        (Some(60000), Some(2))
    );
    assert_eq!(updated["backlog"]["visible"], 3, "answered as describe shows it: {updated}");

    let filter = ["subs", "update", "jobs", "w", "--filter", r#"{"value": {"job": [3]}}"#, "-o", "text"];
    let shown = ok(&server, &filter, None);
    assert!(shown.starts_with("subscription jobs/w  (from earliest, pull, filtered)"), "{shown}");
    assert!(shown.contains("filter since"), "the position the filter applies from: {shown}");
    let got = ndjson(&ok(&server, &["receive", "jobs", "w", "--count", "10", "--wait-ms", "0"], None));
    assert_eq!(got.len(), 1, "only what the new filter matches: {got:?}");
    let removed = json(&ok(&server, &["subs", "update", "jobs", "w", "--no-filter"], None));
    assert!(removed["filter"].is_null(), "{removed}");

    let start = sluice(&server, &["subs", "update", "jobs", "w", "--push-url", "http://localhost:1/x"], None);
    assert!(stderr(&start).contains("invalid_request"), "a pull subscription stays one: {}", stderr(&start));
    let missing = sluice(&server, &["subs", "update", "jobs", "nope", "--delay-ms", "1"], None);
    assert!(stderr(&missing).contains("subscription_not_found"), "{}", stderr(&missing));
}

#[test]
fn given_subs_create_and_update_with_a_rate_then_it_is_set_shown_changed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "jobs"], None);
    let created = json(&ok(&server, &["subs", "create", "jobs", "r", "--rate", "50"], None));
    assert_eq!(created["rate"], serde_json::json!({"per_second": 50, "burst": 50}), "{created}");
    let shown = ok(&server, &["subs", "update", "jobs", "r", "--rate", "20/40", "-o", "text"], None);
    assert!(shown.contains("at most 20/s"), "{shown}");
    assert!(shown.contains("rate: 20/s, burst 40, waited 0 ms for it"), "{shown}");
    let bad = sluice(&server, &["subs", "update", "jobs", "r", "--rate", "0"], None);
    assert!(stderr(&bad).contains("invalid_request") && stderr(&bad).contains("rate."), "{}", stderr(&bad));
    let removed = json(&ok(&server, &["subs", "update", "jobs", "r", "--no-rate"], None));
    assert!(removed["rate"].is_null() && removed.get("throttled_ms").is_none(), "{removed}");
}

#[test]
fn given_a_push_subscription_when_its_secret_is_rotated_then_the_new_one_is_printed_once_and_the_overlap_shown() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "jobs"], None);
    ok(&server, &["subs", "create", "jobs", "hooks", "--push-url", "http://127.0.0.1:9/hooks"], None);

    let rotated =
        ok(&server, &["subs", "rotate-secret", "jobs", "hooks", "--overlap-ms", "3600000", "-o", "text"], None);
    let lines: Vec<&str> = rotated.lines().collect();
    assert!(
        lines[0].starts_with("rotated the push secret of jobs/hooks; the old one signs beside it until "),
        "{rotated}"
    );
    assert_eq!(lines[1], "push signing secret (shown once: store it now):");
    assert!(lines[2].starts_with("whsec_"), "{rotated}");

    let key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let given =
        json(&ok(&server, &["subs", "rotate-secret", "jobs", "hooks", "--secret", key, "--overlap-ms", "0"], None));
    assert_eq!(given["secret"], key, "{given}");
    let described = json(&ok(&server, &["subs", "describe", "jobs", "hooks"], None));
    assert_eq!(described["push"]["previous_secret_expires_ms"], given["previous_expires_ms"], "{described}");
    let bad = sluice(&server, &["subs", "rotate-secret", "jobs", "hooks", "--secret", "whsec_AAAA"], None);
    assert!(stderr(&bad).contains("invalid_push"), "{}", stderr(&bad));
}

#[test]
fn given_publish_with_a_schedule_then_tail_shows_it_and_a_receive_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "jobs", "--retention-ms", "86400000"], None);
    ok(&server, &["subs", "create", "jobs", "w", "--start", "earliest"], None);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let at = (now + 7_200_000).to_string();
    ok(&server, &["publish", "jobs", "--deliver-at", &at, "later"], None);
    ok(&server, &["publish", "jobs", "--delay-ms", "3600000", "in an hour"], None);
    ok(&server, &["publish", "jobs", "now"], None);
    let both = sluice(&server, &["publish", "jobs", "--deliver-at", "1", "--delay-ms", "1", "x"], None);
    assert!(!both.status.success(), "both a time and a delay: refused");
    let far = sluice(&server, &["publish", "jobs", "--deliver-at", "2100-01-01T00:00:00Z", "x"], None);
    assert!(!far.status.success() && stderr(&far).contains("invalid_event"), "{}", stderr(&far));
    let events = ndjson(&ok(&server, &["tail", "jobs", "--from", "earliest"], None));
    let schedules: Vec<Option<i64>> = events.iter().map(|e| e["deliver_at_ms"].as_i64()).collect();
    assert_eq!(schedules.len(), 3, "{events:?}");
    assert_eq!(schedules[0], at.parse().ok());
    assert!(schedules[1].is_some() && schedules[2].is_none(), "{schedules:?}");
    let received = ndjson(&ok(&server, &["receive", "jobs", "w", "--count", "10", "--wait-ms", "0"], None));
    let values: Vec<&Value> = received.iter().map(|m| &m["value"]).collect();
    assert_eq!(values, [&Value::from("now")], "only what is due");
}
