//! [`ObjectStore`] on S3: each blob is a new object under `segments/`, created
//! with `If-None-Match: *` so nothing is ever overwritten, and read back with
//! ranged GETs, so a reader fetches one partition's segment out of an object
//! that holds the segments of every partition a publish touched.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use sluice_core::ports::objects::{BlobRef, ObjectInfo};
use sluice_core::{ObjectStore, StorageError};

use crate::{send_counted, unexpected, RequestCounts};

/// Fresh names tried before a put gives up (a clash of 128 random bits means something is wrong).
const NAME_ATTEMPTS: u32 = 3;
/// Where every segment object lives.
const PREFIX: &str = "segments/";
/// The most keys one ListObjectsV2 request returns.
const MAX_LIST_KEYS: usize = 1000;

/// Segment objects in one S3 bucket.
pub struct S3ObjectStore {
    client: aws_sdk_s3::Client,
    bucket: String,
    requests: RequestCounts,
}

impl S3ObjectStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: String) -> Self {
        Self { client, bucket, requests: RequestCounts::default() }
    }

    /// The S3 requests this store has sent.
    pub fn requests(&self) -> &RequestCounts {
        &self.requests
    }
}

/// `segments/<ms since epoch>-<128 random bits>`: unique without coordination,
/// and time-ordered, so listing finds old objects first.
fn object_name() -> String {
    format!("{PREFIX}{:013}-{:032x}", now_ms(), rand::random::<u128>())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[async_trait]
impl ObjectStore for S3ObjectStore {
    #[tracing::instrument(level = "debug", skip_all, fields(bytes = bytes.len()))]
    async fn put(&self, bytes: Bytes) -> Result<BlobRef, StorageError> {
        for _ in 0..NAME_ATTEMPTS {
            let key = object_name();
            let sent = send_counted(&self.requests, "s3:PutObject", || {
                self.client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(&key)
                    .if_none_match("*")
                    .body(ByteStream::from(bytes.clone()))
                    .send()
            })
            .await;
            match sent {
                Ok(_) => return Ok(BlobRef { object: key, position: 0 }),
                // The name is taken (412), or another conditional write to it is in flight (409).
                Err(e) if matches!(e.code(), Some("PreconditionFailed" | "ConditionalRequestConflict")) => {
                    tracing::warn!(object = %key, "object name already taken; choosing another");
                }
                Err(e) => return Err(unexpected("s3:PutObject", e)),
            }
        }
        Err(StorageError::Unavailable {
            message: "s3:PutObject: every fresh object name was taken".into(),
            source: None,
        })
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn read(&self, object: &str, position: u64, len: u64) -> Result<Bytes, StorageError> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let range = format!("bytes={position}-{}", position + len - 1);
        let sent = send_counted(&self.requests, "s3:GetObject", || {
            self.client.get_object().bucket(&self.bucket).key(object).range(&range).send()
        })
        .await;
        let output = match sent {
            Ok(o) => o,
            Err(e) if matches!(e.as_service_error(), Some(GetObjectError::NoSuchKey(_))) => {
                return Err(StorageError::NotFound(format!("object {object}")));
            }
            Err(e) if e.code() == Some("InvalidRange") => {
                return Err(StorageError::Corrupt(format!("object {object} holds no bytes at {position}")));
            }
            Err(e) => return Err(unexpected("s3:GetObject", e)),
        };
        let data = output
            .body
            .collect()
            .await
            .map_err(|e| StorageError::unavailable(format!("s3:GetObject {object}: reading the body"), e))?
            .into_bytes();
        if data.len() as u64 != len {
            return Err(StorageError::Corrupt(format!(
                "object {object} holds {} bytes at {position}, expected {len}",
                data.len()
            )));
        }
        Ok(data)
    }

    /// One ListObjectsV2 page (at most 1000 keys): the caller pages on with `after`.
    #[tracing::instrument(level = "debug", skip(self))]
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<Vec<ObjectInfo>, StorageError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let max_keys = i32::try_from(limit.min(MAX_LIST_KEYS)).unwrap_or(1000);
        let sent = send_counted(&self.requests, "s3:ListObjectsV2", || {
            self.client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(PREFIX)
                .set_start_after(after.map(str::to_owned))
                .max_keys(max_keys)
                .send()
        })
        .await;
        let output = sent.map_err(|e| unexpected("s3:ListObjectsV2", e))?;
        let objects = output
            .contents()
            .iter()
            .filter_map(|o| {
                let name = o.key()?.to_owned();
                // No LastModified (S3 always sends one): young, so the grace period applies.
                let created_ms = o.last_modified().and_then(|t| t.to_millis().ok()).unwrap_or_else(now_ms);
                Some(ObjectInfo { name, size: o.size().map_or(0, |n| u64::try_from(n).unwrap_or(0)), created_ms })
            })
            .take(limit)
            .collect();
        Ok(objects)
    }

    /// Succeeds for an absent key too (S3 answers 204 either way). Refuses keys outside
    /// `segments/`: nothing else in the bucket is this store's to delete.
    #[tracing::instrument(level = "debug", skip(self))]
    async fn delete(&self, object: &str) -> Result<(), StorageError> {
        if object.len() <= PREFIX.len() || !object.starts_with(PREFIX) {
            return Err(StorageError::Invalid(format!("object name {object:?} is not under {PREFIX}")));
        }
        let sent = send_counted(&self.requests, "s3:DeleteObject", || {
            self.client.delete_object().bucket(&self.bucket).key(object).send()
        })
        .await;
        sent.map(|_| ()).map_err(|e| unexpected("s3:DeleteObject", e))
    }
}
