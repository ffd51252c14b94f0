//! What the fuzz targets share: one tokio runtime, embedded backends in scratch
//! directories, clocks that make runs repeatable, calls into the HTTP router and the
//! checks every HTTP answer must pass. The targets are in `fuzz_targets/`; the seed
//! corpus is made by `examples/seed_corpus.rs`.

pub mod receipts;
pub mod stored;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_core::{Clock, Limits, Log, LogConfig, SeededRandom};
use tempfile::TempDir;
use tower::ServiceExt;

/// Runs `future` to completion on the targets' one runtime. A current-thread runtime:
/// the log's background tasks run only while a target waits on it, so an input's work
/// is done when its call returns.
pub fn block_on<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime for the targets")
        })
        .block_on(future)
}

/// Where scratch data directories go: `SLUICE_FUZZ_DIR` if set, else `/dev/shm` (the
/// embedded backend fsyncs every write, which costs nothing in memory), else the temp dir.
fn scratch_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("SLUICE_FUZZ_DIR") {
        return dir.into();
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// A scratch data directory, removed when dropped.
pub fn scratch_dir() -> TempDir {
    tempfile::Builder::new().prefix("sluice-fuzz-").tempdir_in(scratch_root()).expect("a scratch data directory")
}

/// A scratch data directory for the life of the process: removed when the fuzzer exits
/// (not after a crash, which leaves the data behind for a look).
pub fn lasting_scratch_dir() -> PathBuf {
    static LASTING: Mutex<Vec<TempDir>> = Mutex::new(Vec::new());
    static AT_EXIT: Once = Once::new();
    extern "C" fn remove_lasting() {
        if let Ok(mut dirs) = LASTING.lock() {
            dirs.clear();
        }
    }
    extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    // SAFETY: `remove_lasting` is a plain function that lives as long as the process.
    AT_EXIT.call_once(|| unsafe {
        atexit(remove_lasting);
    });
    let dir = scratch_dir();
    let path = dir.path().to_owned();
    LASTING.lock().expect("scratch directory list").push(dir);
    path
}

/// Starts a log on the embedded backend in `dir`, with repeatable ids (`seed`). Call it
/// inside [`block_on`]: the log spawns its committer on the runtime.
pub fn open_log(dir: &Path, clock: Arc<dyn Clock>, seed: u64, limits: Limits) -> Log {
    // The backend is opened on a thread outside the runtime, so its periodic sync of deferred
    // writes is not started: under a [`VirtualClock`] that task would move time forward a
    // tick per turn for as long as the runtime waits on the writer thread. Deferred writes
    // are synced by the next synced commit instead (and fsyncs in /dev/shm cost nothing).
    let opened = std::thread::scope(|s| s.spawn(|| sluice_local::open(dir, clock.clone())).join());
    let (store, objects) = opened.expect("the opening thread").expect("open the embedded backend");
    let config = LogConfig { limits, ..LogConfig::default() };
    Log::with_random(store, objects, clock, Arc::new(SeededRandom::new(seed)), config)
}

/// The targets' clock, on which waiting takes no time ([`sluice_core::SteppingClock`]).
pub use sluice_core::SteppingClock as VirtualClock;

/// Sends `request` through `app` and reads the whole answer.
pub async fn call(app: &Router, request: Request<Body>) -> (StatusCode, Bytes) {
    let response = match app.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status();
    let body = response.into_body().collect().await.expect("an in-memory answer body").to_bytes();
    (status, body)
}

/// What every answer must be, whatever was asked: never a server error, and always a
/// JSON document (`{"error": {"code", "message"}}` for a refusal). Answers the document.
pub fn check_answer(status: StatusCode, body: &[u8]) -> Value {
    assert!(!status.is_server_error(), "server error {status} for client input: {}", String::from_utf8_lossy(body));
    let document: Value = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(e) => panic!("{status} answer is not JSON ({e}): {}", String::from_utf8_lossy(body)),
    };
    if !status.is_success() {
        let error = &document["error"];
        assert!(
            error["code"].as_str().is_some_and(|c| !c.is_empty()) && error["message"].is_string(),
            "{status} answer is not an error document: {document}"
        );
    }
    document
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex text, if it is one.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// The body of an answer as text, for assertion messages.
pub fn text(body: &Bytes) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(body)
}
