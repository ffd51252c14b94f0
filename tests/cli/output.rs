//! One output contract: `-o json` is JSON on every verb (NDJSON for streams), `-o text`
//! sentences with correct plurals; completions and the man page are generated.

use serde_json::Value;

use crate::common::Server;
use crate::{ndjson, ok};

/// `sluice ARGS -o json`'s stdout, each line parsed as JSON (a stream prints several).
fn json_lines(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> Vec<Value> {
    let lines = ndjson(&ok(server, &[args, &["-o", "json"]].concat(), stdin));
    assert!(!lines.is_empty(), "{args:?} printed no JSON");
    lines
}

#[test]
fn given_output_json_then_every_verb_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let one = |args: &[&str]| {
        let mut lines = json_lines(&server, args, None);
        assert_eq!(lines.len(), 1, "{args:?}: one document");
        lines.remove(0)
    };
    assert_eq!(one(&["topics", "create", "t", "--partitions", "2"])["partitions"], 2);
    assert_eq!(one(&["topics", "list"])["topics"][0]["name"], "t");
    assert_eq!(one(&["topics", "describe", "t"])["partition_states"].as_array().map(Vec::len), Some(2));
    assert_eq!(one(&["subs", "create", "t", "s", "--start", "earliest"])["name"], "s");
    assert_eq!(one(&["subs", "list", "t"])["subscriptions"][0]["name"], "s");
    assert_eq!(one(&["subs", "describe", "t", "s"])["backlog"]["visible"], 0);
    assert_eq!(json_lines(&server, &["publish", "t", "a", "b", "c", "d"], None)[0]["published"], 4);
    assert_eq!(json_lines(&server, &["tail", "t"], None).len(), 4, "NDJSON: one event a line");
    assert_eq!(json_lines(&server, &["tail", "t", "--group", "g"], None).len(), 4);
    assert_eq!(one(&["groups", "list"])["groups"][0], "g");
    assert_eq!(one(&["groups", "describe", "g"])["group"], "g");
    assert!(one(&["groups", "seek", "g", "--topic", "t", "--to", "earliest"])["offsets"].is_array());
    assert_eq!(json_lines(&server, &["peek", "t", "s"], None).len(), 4, "NDJSON: one message a line");
    let received = json_lines(&server, &["receive", "t", "s", "--count", "4", "--wait-ms", "0"], None);
    assert_eq!(received.len(), 4);
    let receipt = |n: usize| received[n]["receipt"].as_str().unwrap().to_owned();
    assert_eq!(one(&["ack", "t", "s", &receipt(0)])["results"][0]["ok"], true);
    assert_eq!(one(&["visibility", "t", "s", &receipt(1), "--timeout-ms", "60000"])["results"][0]["ok"], true);
    assert_eq!(one(&["nack", "t", "s", &receipt(2), &receipt(3)])["results"][1]["ok"], true);
    assert_eq!(one(&["dlq", "redrive", "t", "s"])["redriven"], 0);
    assert_eq!(one(&["dlq", "purge", "t", "s"])["purged"], 0);
    assert_eq!(ok(&server, &["dlq", "list", "t", "s", "-o", "json"], None), "", "an empty stream: no line");
    assert_eq!(one(&["groups", "delete", "g"])["deleted"], true);
    assert_eq!(one(&["subs", "delete", "t", "s"])["deleted"], true);
    assert_eq!(one(&["topics", "delete", "t"])["deleted"], true);
}

#[test]
fn given_logs_asked_for_then_they_go_to_stderr_and_stdout_stays_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["topics", "list", "-o", "json"])
        .env("SLUICE_URL", &server.base)
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(crate::json(&stdout)["topics"], serde_json::json!([]), "{stdout}");
    assert!(!out.stderr.is_empty(), "the debug logs went to stderr");
}

#[test]
fn given_output_text_then_changes_are_sentences_with_plurals_and_lists_are_tables() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let text = |args: &[&str]| ok(&server, &[args, &["-o", "text"]].concat(), None);
    assert_eq!(text(&["topics", "create", "one"]).trim(), "created topic one (1 partition)");
    assert_eq!(
        text(&["topics", "create", "orders", "--partitions", "4"]).trim(),
        "created topic orders (4 partitions)"
    );
    let again = text(&["topics", "create", "orders", "--partitions", "4"]);
    assert_eq!(again.trim(), "topic orders already exists with these settings");
    let published = text(&["publish", "one", "x"]);
    assert!(published.starts_with("published 1 of 1 event to one in "), "{published}");
    let listed = text(&["topics", "list"]);
    let rows: Vec<&str> = listed.lines().collect();
    assert!(rows[0].starts_with("name  ") && rows[0].contains("partitions"), "a header: {listed}");
    // Numbers right-aligned under their header.
    let end = rows[0].find("partitions").unwrap() + "partitions".len();
    for row in &rows[1..] {
        assert!(row[..end].ends_with(|c: char| c.is_ascii_digit()) && row[end..].starts_with("  "), "{listed}");
    }
    let tail = text(&["tail", "one"]);
    assert!(tail.starts_with("one/0@0 ") && tail.trim_end().ends_with(" \"x\""), "{tail}");
    assert_eq!(text(&["topics", "delete", "one"]).trim(), "deleted topic one");
}

#[test]
fn given_completions_and_man_then_each_shell_gets_a_script_and_the_page_is_roff() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let script = ok(&server, &["completions", shell], None);
        assert!(script.contains("sluice") && script.contains("visibility"), "{shell}: {script:.200}");
    }
    // A reader that stops at once (`| head -c 1`): no panic, exit 0. The script is larger
    // than a pipe holds, so the write meets the closed pipe.
    let mut head = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(head.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(head.stdout.take());
    let closed = head.wait_with_output().unwrap();
    assert!(closed.status.success(), "{}", String::from_utf8_lossy(&closed.stderr));
    let page = ok(&server, &["man"], None);
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{page:.200}");
    assert!(page.contains(".TH sluice 1"), "{page:.400}");
}
