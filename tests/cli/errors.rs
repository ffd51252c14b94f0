//! Errors as a user meets them: one `error:` line, a `hint:` line where one helps, exit 1
//! (2 for a usage error, as clap's), and nothing of a stranger's answer but its status
//! and type.

use std::io::{Read, Write};
use std::net::TcpListener;

use crate::common::Server;
use crate::{sluice, sluice_at, stderr};

/// The lines of `sluice ARGS`'s stderr, with its exit code.
fn failed(url: &str, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let out = sluice_at(url, args, None);
    (out.status.code(), stderr(&out).lines().map(str::to_owned).collect())
}

#[test]
fn given_nobody_listening_and_a_url_without_scheme_then_the_error_names_the_url_and_hints_at_serve() {
    // A port that was free a moment ago: nobody listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, lines) = failed(&format!("127.0.0.1:{port}"), &["topics", "list"]);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with(&format!("error: could not connect to http://127.0.0.1:{port}: ")), "{lines:?}");
    assert!(lines[0].to_lowercase().contains("refused"), "the cause, not \"error sending request\": {lines:?}");
    assert!(lines[1].starts_with("hint: ") && lines[1].contains("sluice serve"), "{lines:?}");
    assert!(lines[1].contains("--url") && lines[1].contains("SLUICE_URL"), "{lines:?}");

    let (code, lines) = failed("ftp://127.0.0.1:21", &["topics", "list"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        lines,
        ["error: --url ftp://127.0.0.1:21: the scheme must be http or https, not ftp (e.g. http://127.0.0.1:21)"]
    );
}

#[test]
fn given_a_web_server_that_is_not_sluice_then_its_status_and_type_are_told_without_its_page() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Answers every connection with an HTML 404 page, until the test ends.
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let page = "<html><body><h1>Not Found</h1><p>nginx</p></body></html>";
            let head = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                page.len()
            );
            let _ = stream.write_all(format!("{head}{page}").as_bytes());
        }
    });
    let (code, lines) = failed(&url, &["topics", "describe", "orders"]);
    assert_eq!(code, Some(1));
    assert_eq!(lines[0], format!("error: {url} answered 404 (text/html), which is not an answer of the Sluice API"));
    assert!(lines[1].starts_with("hint: check --url"), "{lines:?}");
    assert!(!lines.concat().contains("nginx"), "no page dumped: {lines:?}");
}

#[test]
fn given_an_api_error_or_a_usage_error_then_one_line_a_hint_and_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (code, lines) = failed(&server.base, &["subs", "describe", "missing", "s"]);
    assert_eq!(code, Some(1));
    assert!(lines[0].starts_with("error: topic_not_found (404): "), "{lines:?}");
    assert_eq!(lines[1], "hint: `sluice topics list` shows the topics; `sluice topics create NAME` makes one");
    let out = sluice(&server, &["ack", "jobs"], None);
    assert_eq!(out.status.code(), Some(2), "a usage error: {out:?}");
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    let out = sluice(&server, &["groups", "seek", "g", "--to", "yesterday"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error: --to yesterday: not earliest, latest"), "{}", stderr(&out));
}

#[test]
fn given_empty_or_blank_stdin_when_publish_then_an_error_says_nothing_was_published_and_nothing_is() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    crate::ok(&server, &["topics", "create", "t", "--partitions", "2"], None);
    for input in [&b""[..], b"\n  \n\n"] {
        let out = sluice(&server, &["publish", "t"], Some(input));
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(out.stdout.is_empty(), "no offsets printed: {out:?}");
        let lines: Vec<String> = stderr(&out).lines().map(str::to_owned).collect();
        assert_eq!(
            lines,
            ["error: nothing published: stdin had no events (blank lines are skipped); give events as \
              arguments or one per line on stdin"]
        );
    }
    let described = crate::json(&crate::ok(&server, &["topics", "describe", "t"], None));
    let ends: Vec<u64> = (0..2).map(|p| described["partition_states"][p]["high_watermark"].as_u64().unwrap()).collect();
    assert_eq!(ends, [0, 0]);
}
