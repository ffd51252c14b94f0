//! A blob store that behaves at the port as S3 does behind the AWS adapter: a PUT or a
//! ranged GET takes S3's small-object latency, and the `segments/` prefix takes at most
//! 3,500 PUTs and 5,500 GETs a second (beyond: `503 SlowDown`, which the adapter resends
//! as it resends throttling).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::ports::objects::ObjectInfo;
use sluice_core::{BlobRef, ObjectStore, StorageError};
use sluice_testkit::MemObjects;

use super::cloud::{Bucket, Cloud};
use super::params::{self, Dist};

/// The bucket every function instance shares.
pub struct S3 {
    cloud: Arc<Cloud>,
    mem: MemObjects,
    puts: Mutex<Bucket>,
    gets: Mutex<Bucket>,
}

impl S3 {
    pub fn new(cloud: Arc<Cloud>, mem: MemObjects) -> Arc<Self> {
        let puts = Mutex::new(Bucket::new(params::S3_PUT_PER_S, params::S3_PUT_PER_S));
        let gets = Mutex::new(Bucket::new(params::S3_GET_PER_S, params::S3_GET_PER_S));
        Arc::new(Self { cloud, mem, puts, gets })
    }

    /// One request, resent after `SlowDown` as the adapter does.
    async fn request(&self, what: &str, put: bool, dist: &Dist) -> Result<(), StorageError> {
        for attempt in 0..params::THROTTLED_ATTEMPTS {
            let began = self.cloud.now_ms();
            self.cloud.count(|m| if put { m.s3_put += 1 } else { m.s3_get += 1 });
            let now = self.cloud.now_ms();
            let admitted = if put { &self.puts } else { &self.gets }.lock().unwrap().take(now, 1.0);
            if admitted {
                self.cloud.wait_draw(dist).await;
                self.cloud.trace(began, what, "ok");
                return Ok(());
            }
            self.cloud.count(|m| m.throttles += 1);
            self.cloud.wait_draw(&params::S3_GET).await;
            self.cloud.trace(began, what, "SlowDown");
            let wait = params::THROTTLE_BACKOFF.wait_ms(attempt, self.cloud.next_u64());
            self.cloud.wait(wait as f64).await;
        }
        Err(StorageError::Throttled { message: format!("{what}: SlowDown"), source: None })
    }
}

/// The bucket as one function instance's adapter sees it.
#[derive(Clone)]
pub struct ModelObjects(pub Arc<S3>);

#[async_trait]
impl ObjectStore for ModelObjects {
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        self.0.request(&format!("s3 PutObject bytes={}", bytes.len()), true, &params::S3_PUT).await?;
        self.0.mem.put(bytes).await
    }

    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        self.0.request(&format!("s3 GetObject bytes={len}"), false, &params::S3_GET).await?;
        self.0.mem.read(object, position, len).await
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        self.0.cloud.count(|m| m.s3_other += 1);
        self.0.cloud.wait_draw(&params::S3_GET).await;
        self.0.mem.list(after, limit).await
    }

    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        self.0.cloud.count(|m| m.s3_other += 1);
        self.0.cloud.wait_draw(&params::S3_GET).await;
        self.0.mem.delete(object).await
    }
}
