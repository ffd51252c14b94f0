//! moto's server for tests: started once per test binary by
//! `infra/local_aws.py` (bucket and table made from template.yaml), stopped
//! when the test binary exits (the script watches its standard input).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

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
    start_with(&[])
}

/// A moto server of the caller's own, `infra/local_aws.py` given `args` besides
/// (`--realism`: infra/moto_realism.py's latency and conflict rule), stopped when the
/// returned [`Moto`] is dropped or the test binary exits.
pub fn start_with(args: &[&str]) -> Moto {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(python.exists(), "{} is missing: run infra/setup.sh first", python.display());
    let mut child = Command::new(python)
        .arg(root.join("infra/local_aws.py"))
        .args(["--watch-stdin", "--bucket", "sluice-test", "--table", "sluice-test"])
        .args(args)
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

/// Deadlines for requests to moto. It serves one request at a time, and under a
/// loaded test machine a request can wait behind others for longer than AWS
/// ever would ([`sluice_aws::Deadlines::AWS`] gives an attempt 5 s): the tests
/// check outcomes, and a deadline hit only because moto was busy would fail one
/// for nothing. Stalls are tested by fault injection, not by these deadlines.
pub const MOTO_DEADLINES: sluice_aws::Deadlines = sluice_aws::Deadlines {
    connect: Duration::from_secs(10),
    attempt: Duration::from_secs(60),
    operation: Duration::from_secs(120),
};

/// New AWS adapters on the moto server, with fake static credentials, reading time from `clock`.
pub async fn adapters(settings: &AwsSettings, clock: Arc<dyn Clock>) -> (Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    adapters_over(settings, clock, sluice_aws::http_client()).await
}

/// [`adapters`] sending through `http` (a client that injects faults).
pub async fn adapters_over(
    settings: &AwsSettings,
    clock: Arc<dyn Clock>,
    http: aws_smithy_runtime_api::client::http::SharedHttpClient,
) -> (Arc<DynamoStateStore>, Arc<S3ObjectStore>) {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).test_credentials();
    if let Some(region) = &settings.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    sluice_aws::from_sdk_config(&loader.load().await, settings, clock, MOTO_DEADLINES)
}

/// The AWS adapters against this binary's moto server.
pub struct MotoBackend;

#[async_trait]
impl Backend for MotoBackend {
    async fn open_with(&self, clock: Arc<dyn Clock>) -> Stores {
        // As the AWS functions run: segments of small commits inline up to their bound.
        crate::segments_inline_up_to(sluice_core::AWS_INLINE_SEGMENT_BYTES);
        crate::commits_in_one_write();
        let (state, objects) = adapters(&moto().settings, clock).await;
        (state, objects)
    }

    /// A fortieth of the embedded bulk: moto serves one request at a time and
    /// parses every expression in Python (a 100-item write takes about a
    /// second); the scale itself is tested on the embedded backend.
    fn large_count(&self) -> usize {
        2_500
    }
}
