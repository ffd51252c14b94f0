//! `sluice serve`'s start-up, as a user meets it: a failure is one line on stderr, before
//! anything says "listening", and exit code 1; `--addr` takes `localhost:PORT` and `:PORT`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `sluice serve` with these arguments over `data_dir`, expected to fail: its output.
fn failing_serve(addr: &str, data_dir: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--addr", addr, "--data-dir"])
        .arg(data_dir)
        .env_remove("SLUICE_BUCKET")
        .env_remove("SLUICE_TABLE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "exit 1: {out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"), "said listening: {out:?}");
    out
}

/// stderr's one line, checked to be one `error: …` line.
fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("Os {") && !stderr.contains("kind:"), "no debug dump: {stderr}");
    lines[0].to_owned()
}

#[test]
fn given_a_port_in_use_then_serve_says_so_in_one_line_and_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let line = one_error_line(&failing_serve(&addr, dir.path()));
    assert!(line.contains(&format!("cannot listen on {addr}")) && line.contains("in use"), "{line}");
    assert!(line.contains("--addr"), "a hint: {line}");
}

#[test]
fn given_a_data_dir_that_cannot_be_created_then_serve_says_so_in_one_line_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    // Free: the failure must come from the data directory, and before the bind.
    let line = one_error_line(&failing_serve("127.0.0.1:0", &file.join("data")));
    assert!(line.contains("cannot open the data directory") && line.contains("a-file/data"), "{line}");
}

#[test]
fn given_addr_localhost_or_a_bare_port_then_serve_listens_on_loopback() {
    for addr in ["localhost:0", ":0"] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--addr", addr, "--data-dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Logs go to stdout too: the first line that says where it listens.
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.map_while(Result::ok).find(|l| l.starts_with("listening on")).unwrap_or_default();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(line.starts_with("listening on http://127.0.0.1:"), "{addr}: {line}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).args(["serve", "--addr", "localhost"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error, as clap's: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOST:PORT, localhost:PORT or :PORT"), "{out:?}");
}
