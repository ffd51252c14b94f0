//! Ctrl-C on `sluice tail --group G --follow`: what was printed is committed and the
//! member leaves, so the group has no member once the process has exited.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Server;
use crate::{json, ok};

#[test]
fn given_a_following_group_tail_when_interrupted_then_it_commits_and_leaves_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "t", "--partitions", "2"], None);
    ok(&server, &["publish", "t", "1", "2", "3", "4", "5"], None);
    let mut tail = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["tail", "t", "--group", "g", "--follow", "-o", "json"])
        .env("SLUICE_URL", &server.base)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice tail");
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
    for _ in 0..5 {
        lines.next().expect("an event line").expect("read stdout");
    }
    // Printed, so joined; it is now waiting for more.
    let group = json(&ok(&server, &["groups", "describe", "g"], None));
    assert_eq!(group["members"].as_array().map(Vec::len), Some(1), "{group}");

    let interrupt = Command::new("kill").args(["-INT", &tail.id().to_string()]).status().unwrap();
    assert!(interrupt.success());
    // It exits by itself (a condition, not a sleep): the long poll is dropped at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = tail.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "tail --group did not exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let group = json(&ok(&server, &["groups", "describe", "g"], None));
    assert_eq!(group["members"], serde_json::json!([]), "no ghost member: {group}");
    assert_eq!(group["lag"], 0, "what it printed was committed: {group}");
}
