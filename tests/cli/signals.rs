//! Ctrl-C on `sluice tail --group G --follow`: what was printed is committed and the
//! member leaves, so the group has no member once the process has exited; a join in
//! flight is let finish (and then left), and a second Ctrl-C exits at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::Server;
use crate::{json, ok};

#[test]
fn given_a_following_group_tail_when_interrupted_then_it_commits_and_leaves_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(&server, &["topics", "create", "t", "--partitions", "2"], None);
    ok(&server, &["publish", "t", "1", "2", "3", "4", "5"], None);
    let mut tail = group_tail(&server.base, &["-o", "json"], Stdio::piped());
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();
    for _ in 0..5 {
        lines.next().expect("an event line").expect("read stdout");
    }
    // Printed, so joined; it is now waiting for more.
    let group = json(&ok(&server, &["groups", "describe", "g"], None));
    assert_eq!(group["members"].as_array().map(Vec::len), Some(1), "{group}");

    interrupt(&tail);
    // It exits by itself (a condition, not a sleep): the long poll is dropped at once.
    let status = exit_of(&mut tail, "tail --group did not exit after Ctrl-C");
    assert!(status.success(), "{status:?}");
    let group = json(&ok(&server, &["groups", "describe", "g"], None));
    assert_eq!(group["members"], serde_json::json!([]), "no ghost member: {group}");
    assert_eq!(group["lag"], 0, "what it printed was committed: {group}");
}

#[test]
fn given_a_group_tail_stuck_joining_when_interrupted_twice_then_the_second_exits_at_once() {
    // A server that takes the join's poll and never answers it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut tail = group_tail(&format!("http://{}", listener.local_addr().unwrap()), &[], Stdio::null());
    // The poll came in: the signals are listened for by now.
    let (_held, _) = listener.accept().unwrap();
    interrupt(&tail);
    let mut stderr = BufReader::new(tail.stderr.take().unwrap()).lines();
    let said = stderr.next().expect("a line").unwrap();
    assert!(said.starts_with("stopping: committing and leaving"), "{said}");
    // The first Ctrl-C lets the join finish (else the member would be a ghost); the second quits.
    assert_eq!(tail.try_wait().unwrap(), None, "still waiting for the join's answer");
    interrupt(&tail);
    let status = exit_of(&mut tail, "the second Ctrl-C did not exit");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn given_ctrl_c_while_joining_then_the_join_is_let_finish_and_the_member_leaves() {
    // A stand-in server: it holds the join's poll until the test answers it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut tail = group_tail(&format!("http://{}", listener.local_addr().unwrap()), &[], Stdio::null());
    let (mut join, _) = listener.accept().unwrap();
    assert!(read_request(&mut join).starts_with("POST /v1/groups/g/poll "));
    interrupt(&tail);
    let said = BufReader::new(tail.stderr.take().unwrap()).lines().next().expect("a line").unwrap();
    assert!(said.starts_with("stopping: "), "{said}");
    // The join lands after the Ctrl-C: the member it made must still leave.
    answer(&mut join, r#"{"member_id":"m-1","generation":1,"assignment":[],"events":[]}"#);
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut leave = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(_) => assert!(Instant::now() < deadline, "no leave came: the member would be a ghost"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    leave.set_nonblocking(false).unwrap();
    let request = read_request(&mut leave);
    assert!(request.starts_with("POST /v1/groups/g/leave ") && request.contains("m-1"), "{request}");
    answer(&mut leave, "{}");
    assert!(tail.wait().unwrap().success());
}

/// `sluice tail t --group g --follow ARGS` against `url`, stderr piped.
fn group_tail(url: &str, args: &[&str], stdout: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["tail", "t", "--group", "g", "--follow"])
        .args(args)
        .env("SLUICE_URL", url)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice tail")
}

/// Ctrl-C, as a terminal sends it.
fn interrupt(child: &Child) {
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
}

/// How `child` exits, which it must within 10 s (`why` otherwise).
fn exit_of(child: &mut Child, why: &str) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP/1.1 request, head and body, as text.
fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
        head.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

fn answer(stream: &mut TcpStream, json: &str) {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        json.len()
    );
    stream.write_all(format!("{head}{json}").as_bytes()).unwrap();
}
