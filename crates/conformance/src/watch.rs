//! The Lambda functions under `cargo lambda watch` (its runtime emulator, function URLs
//! and Invoke API) on this test binary's moto server, for end-to-end tests of the AWS path.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::moto::{moto, workspace_root};

/// How long `cargo lambda watch` may take to build a function on first use.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// The deadline of every invocation: the longest Timeout in template.yaml.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(120);

/// One `cargo lambda watch` and the function it runs; dropping it stops both.
///
/// cargo lambda starts the function (`cargo run`) in a session of its own, so a signal to
/// watch's process group does not reach it: every signal goes to the group and to each
/// descendant, found (before any dies and is reparented) through /proc.
pub struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        self.signal("-TERM");
        let _ = self.0.wait();
    }
}

impl Watch {
    /// Kills cargo lambda watch and the function it runs with SIGKILL, as a Lambda
    /// instance dies mid-invocation: nothing runs on (no destructor, no flush).
    pub fn kill9(mut self) {
        self.signal("-KILL");
        let _ = self.0.wait();
    }

    fn signal(&mut self, signal: &str) {
        let root = self.0.id();
        let mut targets: Vec<String> = descendants(root).iter().map(u32::to_string).collect();
        targets.push(format!("-{root}"));
        let _ = Command::new("kill").arg(signal).arg("--").args(&targets).stderr(Stdio::null()).status();
    }
}

/// Every process below `root`, read from /proc (parent ids).
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces, so read after its last ')'.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    found.split_off(1)
}

/// The function API Gateway routes `path` to (template.yaml's routes).
pub fn function_for(path: &str) -> &'static str {
    if path.contains("/subscriptions") {
        "sluice-queues"
    } else if path.starts_with("/v1/groups") {
        "sluice-groups"
    } else if path.contains("/partitions/") {
        "sluice-read"
    } else if path.ends_with("/events") {
        "sluice-publish"
    } else {
        "sluice-admin"
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `cargo lambda watch` on `port` for one function package (`sluice-queues` is
/// functions/queues), on moto, with `env` (`NAME=value`) besides moto's settings.
pub fn start(function: &str, port: u16, env: &[String]) -> Watch {
    start_logged(function, port, env, None)
}

/// [`start`], with what the function writes (its JSON logs and EMF lines, and cargo
/// lambda's own output) appended to `log` when one is given.
pub fn start_logged(function: &str, port: u16, env: &[String], log: Option<&std::path::Path>) -> Watch {
    let s = &moto().settings;
    let moto_env = [
        format!("SLUICE_BUCKET={}", s.bucket),
        format!("SLUICE_TABLE={}", s.table),
        format!("SLUICE_AWS_REGION={}", s.region.as_deref().unwrap_or("us-east-1")),
        format!("SLUICE_AWS_ENDPOINT_URL={}", s.endpoint_url.as_deref().unwrap_or_default()),
        "AWS_ACCESS_KEY_ID=test".into(),
        "AWS_SECRET_ACCESS_KEY=test".into(),
        // Metrics after every invocation (the deployment's default waits 10 s or 32
        // requests): a test reads what each request recorded once it is answered.
        "SLUICE_METRICS_FLUSH_MS=0".into(),
    ];
    let package = format!("functions/{}", function.trim_start_matches("sluice-"));
    start_package_logged(&package, port, &[&moto_env[..], env].concat(), log)
}

/// Starts `cargo lambda watch` on `port` for the function package in `dir` (relative to the
/// workspace root, e.g. `examples/push-consumer`), with only `env` (`NAME=value`) set.
pub fn start_package(dir: &str, port: u16, env: &[String]) -> Watch {
    start_package_logged(dir, port, env, None)
}

fn start_package_logged(dir: &str, port: u16, env: &[String], log: Option<&std::path::Path>) -> Watch {
    let root = workspace_root();
    let cargo_lambda = root.join(".venv/bin/cargo-lambda");
    assert!(cargo_lambda.exists(), "{} is missing: run infra/setup.sh first", cargo_lambda.display());
    let mut cmd = Command::new(cargo_lambda);
    // Not the variables cargo set for this test binary (CARGO_MANIFEST_DIR, CARGO_PKG_*, …):
    // build scripts that read one (ring's does) would see it change between this build and
    // the workspace's own, and every crate above them would be rebuilt, here and again by
    // the next `cargo test`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if (name.starts_with("CARGO_") && name != "CARGO_HOME") || name == "OUT_DIR" {
            cmd.env_remove(name.as_ref());
        }
    }
    // Run from the workspace root with the package's manifest: from elsewhere cargo would
    // look for the binary in the root package only.
    let manifest = root.join(dir).join("Cargo.toml");
    cmd.current_dir(&root)
        .args(["lambda", "watch", "--ignore-changes", "--quiet", "-A", "127.0.0.1", "-P", &port.to_string()])
        // An invocation's deadline, as a function's Timeout in template.yaml gives one on AWS
        // (without it, the emulator's invocations carry none).
        .args(["--timeout", &FUNCTION_TIMEOUT.as_secs().to_string()])
        .arg("--manifest-path")
        .arg(manifest)
        .args(env.iter().flat_map(|e| ["--env-var", e.as_str()]))
        // The workspace's target directory (or the one the tests run with).
        .env("CARGO_TARGET_DIR", std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| root.join("target").into()))
        // cargo-lambda finds its zig (for cross builds) beside itself.
        .env("PATH", format!("{}:{}", root.join(".venv/bin").display(), std::env::var("PATH").unwrap_or_default()))
        .stdin(Stdio::null())
        .stdout(output(log))
        .stderr(output(log))
        .process_group(0);
    Watch(cmd.spawn().expect("start cargo lambda watch"))
}

/// Where a watch's output goes: `log` (appended), else this test's output when
/// `SLUICE_WATCH_LOGS` is set, else nowhere.
fn output(log: Option<&std::path::Path>) -> Stdio {
    match log {
        Some(path) => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
            Stdio::from(file.expect("open the watch's log file"))
        }
        None if std::env::var_os("SLUICE_WATCH_LOGS").is_some() => Stdio::inherit(),
        None => Stdio::null(),
    }
}
