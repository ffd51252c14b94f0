//! Work-queue receipts as a client cannot see them: the harness reads the store's signing
//! key, so it can tell a receipt the queue issued from a forgery (with an HMAC of its own,
//! not the core's), and sign bodies of its choosing to reach the code behind the check.
//!
//! The layout repeats the core's (`crates/core/src/queues.rs`, `Receipt`): base64url
//! without padding of a 40-byte body (sub id u64, partition u32, offset u64, nonce u64,
//! due i64, receives u32, all big-endian) and the first 16 bytes of its HMAC-SHA-256.
//! Every receipt the fixture's queue issues is checked against it, so a change of layout
//! fails at once instead of silently weakening the target.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use sluice_core::ports::state::Key;
use sluice_core::queues::{Ordering, Queues, ReceiveRequest, StartAt, SubscriptionRecord, SubscriptionSpec};
use sluice_core::{layout, Limits, Log, ManualClock, NewEvent, TopicSpec};
use tempfile::TempDir;

/// Bytes of a receipt's body, and of the MAC that follows it.
pub const BODY_LEN: usize = 40;
pub const MAC_LEN: usize = 16;

pub const TOPIC: &str = "orders";
pub const PARTITIONS: u32 = 2;
pub const SUBSCRIPTION: &str = "workers";
/// Events published, and how many of them the fixture receives (the rest stay visible).
pub const EVENTS: u64 = 6;
pub const RECEIVED: usize = 4;
pub const VISIBILITY_TIMEOUT_MS: u64 = 30_000;
pub const MAX_RECEIVE_COUNT: u32 = 3;
/// The fixture's clock starts here (2024-01-01) and moves only when an input says so.
pub const START_MS: i64 = 1_704_067_200_000;

/// What a receipt names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    pub sub_id: u64,
    pub partition: u32,
    pub offset: u64,
    pub nonce: u64,
    pub due: i64,
    pub receives: u32,
}

impl Fields {
    pub fn body(&self) -> [u8; BODY_LEN] {
        let mut body = [0; BODY_LEN];
        body[0..8].copy_from_slice(&self.sub_id.to_be_bytes());
        body[8..12].copy_from_slice(&self.partition.to_be_bytes());
        body[12..20].copy_from_slice(&self.offset.to_be_bytes());
        body[20..28].copy_from_slice(&self.nonce.to_be_bytes());
        body[28..36].copy_from_slice(&self.due.to_be_bytes());
        body[36..40].copy_from_slice(&self.receives.to_be_bytes());
        body
    }

    fn parse(body: &[u8; BODY_LEN]) -> Self {
        let u64_at = |i: usize| u64::from_be_bytes(body[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_be_bytes(body[i..i + 4].try_into().unwrap_or_default());
        Self {
            sub_id: u64_at(0),
            partition: u32_at(8),
            offset: u64_at(12),
            nonce: u64_at(20),
            due: u64_at(28) as i64,
            receives: u32_at(36),
        }
    }
}

/// The key a store's receipts are signed with.
#[derive(Clone)]
pub struct ReceiptKey([u8; 32]);

impl ReceiptKey {
    fn mac(&self) -> Hmac<Sha256> {
        match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        }
    }

    /// A receipt for `body` as the queue would sign it (any length; the queue's are 40 bytes).
    pub fn sign(&self, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(body);
        let tag = mac.finalize().into_bytes();
        let mut bytes = body.to_vec();
        bytes.extend_from_slice(&tag[..MAC_LEN]);
        format!("r{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// What `text` names, if it is a receipt signed with this key.
    pub fn open(&self, text: &str) -> Option<Fields> {
        // A leading `r`, as the queue writes them; 75 characters without it, as it wrote them before.
        let text = if text.len() == 75 { text } else { text.strip_prefix('r')? };
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        let (body, tag) = bytes.split_at_checked(BODY_LEN)?;
        if tag.len() != MAC_LEN {
            return None;
        }
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_truncated_left(tag).ok()?;
        Some(Fields::parse(body.try_into().ok()?))
    }
}

/// A fresh queue with messages in flight: a store of its own, a topic of [`PARTITIONS`]
/// partitions holding [`EVENTS`] events, a subscription from the earliest offset, and
/// [`RECEIVED`] of its messages received. Ids and nonces come from a seeded generator
/// and the clock stands still, so every fixture issues the same receipts: the seed
/// corpus holds them verbatim.
pub struct Fixture {
    pub queues: Queues,
    pub clock: Arc<ManualClock>,
    pub key: ReceiptKey,
    pub sub_id: u64,
    /// The receipts of the received messages, in the order received.
    pub issued: Vec<String>,
    _dir: TempDir,
}

/// A queue made once, whose data directory each [`Fixture`] starts from a copy of
/// (making one from nothing is several times slower). Its log is kept open and idle.
struct Template {
    _log: Log,
    dir: PathBuf,
    key: ReceiptKey,
    sub_id: u64,
    issued: Vec<String>,
}

impl Fixture {
    /// A fixture whose subscription has `ordering`. Not inside [`crate::block_on`].
    pub fn new(ordering: Ordering) -> Self {
        static TEMPLATES: [OnceLock<Template>; 2] = [OnceLock::new(), OnceLock::new()];
        let slot = if ordering == Ordering::Key { 1 } else { 0 };
        let template = TEMPLATES[slot].get_or_init(|| crate::block_on(Template::new(ordering)));
        let dir = crate::scratch_dir();
        copy_data_dir(&template.dir, dir.path()).expect("copy the template's data directory");
        let clock = Arc::new(ManualClock::new(START_MS));
        // Another seed than the template's: nonces drawn from now on are not the ones it drew.
        let log = crate::block_on(async { crate::open_log(dir.path(), clock.clone(), 8, Limits::default()) });
        Self {
            queues: Queues::new(log),
            clock,
            key: template.key.clone(),
            sub_id: template.sub_id,
            issued: template.issued.clone(),
            _dir: dir,
        }
    }
}

impl Template {
    async fn new(ordering: Ordering) -> Self {
        let dir = crate::lasting_scratch_dir();
        let clock = Arc::new(ManualClock::new(START_MS));
        let log = crate::open_log(&dir, clock.clone(), 7, Limits::default());
        let spec = TopicSpec { partitions: PARTITIONS, retention_ms: None, retention_bytes: None };
        let (topic, _) = log.create_topic(TOPIC, spec).await.expect("create the fixture's topic");
        let events = (0..EVENTS)
            .map(|i| NewEvent {
                key: Some(format!("key-{}", i % 3).into()),
                headers: vec![],
                value: format!("{{\"n\":{i}}}").into(),
                value_is_json: true,
                timestamp_ms: None,
                partition: Some((i % u64::from(PARTITIONS)) as u32),
            })
            .collect();
        log.publish(TOPIC, events, None).await.expect("publish the fixture's events");

        let queues = Queues::new(log.clone());
        let spec = SubscriptionSpec {
            start: StartAt::Earliest,
            visibility_timeout_ms: VISIBILITY_TIMEOUT_MS,
            max_receive_count: MAX_RECEIVE_COUNT,
            ordering,
            ..SubscriptionSpec::default()
        };
        queues.create(TOPIC, SUBSCRIPTION, spec).await.expect("create the fixture's subscription");
        let request = ReceiveRequest { max_messages: RECEIVED, wait_ms: 0, visibility_timeout_ms: None };
        let messages = queues.receive(TOPIC, SUBSCRIPTION, &request).await.expect("receive the fixture's messages");

        let store = log.store();
        let item = store.get(&Key::new("queues", "receipt-key")).await.expect("read the receipt key");
        let key_hex = item.map(|i| String::from_utf8_lossy(&i.value).into_owned()).unwrap_or_default();
        let key = ReceiptKey(
            crate::unhex(&key_hex).and_then(|k| k.try_into().ok()).expect("the receipt key is 32 bytes of hex"),
        );
        let sub_item = store
            .get(&sluice_core::keys::subscription_key(topic.id, SUBSCRIPTION))
            .await
            .expect("read the subscription")
            .expect("the subscription exists");
        let sub: SubscriptionRecord = layout::decode("subscription", &sub_item.value).expect("a subscription record");

        for m in &messages {
            let fields = key.open(&m.receipt).expect("the queue's receipts are laid out as this harness expects");
            let expected = (sub.id, m.event.partition, m.event.offset, m.receive_count);
            assert_eq!((fields.sub_id, fields.partition, fields.offset, fields.receives), expected);
        }
        let issued = messages.into_iter().map(|m| m.receipt).collect();
        Self { _log: log, dir, key, sub_id: sub.id, issued }
    }
}

/// Copies an idle embedded backend's files. SQLite's shared-memory index (`*-shm`) is left
/// behind: the copy's first connection rebuilds it from the write-ahead log.
fn copy_data_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            again_if_interrupted(|| std::fs::create_dir_all(&target))?;
            copy_data_dir(&entry.path(), &target)?;
        } else if !entry.file_name().to_string_lossy().ends_with("-shm") {
            again_if_interrupted(|| std::fs::copy(entry.path(), &target))?;
        }
    }
    Ok(())
}

/// `f`, again while a signal interrupts it: a CI run failed on `EINTR` from `std::fs::copy`
/// under libFuzzer, which does not retry it there.
fn again_if_interrupted<T>(mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}
