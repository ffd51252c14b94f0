//! moto's server for tests: started once per test binary by
//! `infra/local_aws.py` (bucket and table made from template.yaml), stopped
//! when the test binary exits (the script watches its standard input).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use sluice_aws::{AwsSettings, DynamoStateStore, S3ObjectStore};
use sluice_core::Clock;

use crate::{Backend, Stores};

/// A running moto server and the bucket and table it holds.
pub struct Moto {
    pub settings: AwsSettings,
    /// Held open for the life of the test binary; closing it stops the server.
    _stdin: Mutex<ChildStdin>,
    _child: Mutex<Child>,
}

/// The repository root (infra/ and template.yaml live there). `cargo test` sets
/// `CARGO_MANIFEST_DIR` when it runs a test, so a moved checkout still finds it.
pub fn workspace_root() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    PathBuf::from(crate_dir).join("../..")
}

/// The moto server of this test binary, started on first use.
pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(start)
}

fn start() -> Moto {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(python.exists(), "{} is missing: run infra/setup.sh first", python.display());
    let mut child = Command::new(python)
        .arg(root.join("infra/local_aws.py"))
        .args(["--watch-stdin", "--bucket", "sluice-test", "--table", "sluice-test"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start infra/local_aws.py");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read moto's ready line");
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("moto did not start (no {name} in {line:?})"))
            .to_owned()
    };
    let settings = AwsSettings {
        bucket: field("bucket"),
        table: field("table"),
        region: Some("us-east-1".into()),
        endpoint_url: Some(field("endpoint")),
    };
    let stdin = child.stdin.take().expect("piped stdin");
    Moto { settings, _stdin: Mutex::new(stdin), _child: Mutex::new(child) }
}

/// New AWS adapters on the moto server, with fake static credentials, reading time from `clock`.
pub async fn adapters(settings: &AwsSettings, clock: Arc<dyn Clock>) -> (Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).test_credentials();
    if let Some(region) = &settings.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    sluice_aws::from_sdk_config(&loader.load().await, settings, clock)
}

/// The AWS adapters against this binary's moto server.
pub struct MotoBackend;

#[async_trait]
impl Backend for MotoBackend {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        let (state, objects) = adapters(&moto().settings, clock).await;
        (state, objects)
    }

    /// A tenth of the embedded bulk: moto serves one request at a time.
    fn large_count(&self) -> usize {
        10_000
    }
}
