//! [`ObjectStore`] on S3: each blob is a new object under `segments/`, created
//! with `If-None-Match: *` so nothing is ever overwritten, and read back with
//! ranged GETs, so a reader fetches one partition's segment out of an object
//! that holds the segments of every partition a publish touched.
//!
//! A missing object: S3 answers a GET of a missing key with `404 NoSuchKey` to a caller
//! allowed `s3:ListBucket` on the bucket, and with `403 AccessDenied` to one that is not
//! (so that it cannot learn which keys exist). template.yaml grants the functions that
//! read `s3:ListBucket` on `segments/`, so the answer is a 404 and maps to
//! [`StorageError::NotFound`]. A 403 is then a real refusal, and is not hidden: on a 403
//! the store lists the key (one `ListObjectsV2`, only then). Listed: the object exists
//! and reading it was refused, an [`StorageError::Unavailable`] an operator must see. Not
//! listed: missing, `NotFound`. The listing refused too: the policy lacks
//! `s3:ListBucket`, the 403 cannot be told from a missing key, and it is taken for one
//! (logged as a warning). That is safe for the core: a `NotFound` only makes a reader
//! look at the index again (a compaction or retention race), never skip data the index
//! still points at, so a refused object still ends the read with an error.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use sluice_core::ports::objects::{BlobRef, ObjectInfo};
use sluice_core::{ObjectStore, StorageError};

use crate::resend::{Resend, Sender};
use crate::{unexpected, Deadlines, RequestCounts};

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
    sender: Sender,
}

impl S3ObjectStore {
    /// A store in `bucket`; every request, its retries included, ends within `deadlines`.
    pub fn new(client: aws_sdk_s3::Client, bucket: String, deadlines: Deadlines) -> Self {
        Self { client, bucket, sender: Sender::new(deadlines) }
    }

    /// The S3 requests this store has sent, every attempt counted.
    pub fn requests(&self) -> &RequestCounts {
        &self.sender.counts
    }
}

impl S3ObjectStore {
    /// What a GET of `object` answered `403 AccessDenied` means: see the module's header.
    async fn refused(&self, object: &str, refused: SdkError<GetObjectError>) -> StorageError {
        let listed = self
            .sender
            .send("s3:ListObjectsV2", Resend::OnTransient, || {
                self.client.list_objects_v2().bucket(&self.bucket).prefix(object).max_keys(1).send()
            })
            .await;
        match listed {
            Ok(out) if out.contents().iter().any(|o| o.key() == Some(object)) => unexpected("s3:GetObject", refused),
            Ok(_) => StorageError::NotFound(format!("object {object}")),
            Err(e) if e.code() == Some("AccessDenied") => {
                tracing::warn!(object, "s3:GetObject refused without s3:ListBucket: taken for a missing object");
                StorageError::NotFound(format!("object {object} (refused; s3:ListBucket not granted)"))
            }
            Err(e) => unexpected("s3:ListObjectsV2", e),
        }
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
            let sent = self
                .sender
                .send("s3:PutObject", Resend::OnTransient, || {
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
        let sent = self
            .sender
            .send("s3:GetObject", Resend::OnTransient, || {
                self.client.get_object().bucket(&self.bucket).key(object).range(&range).send()
            })
            .await;
        let output = match sent {
            Ok(o) => o,
            Err(e) if matches!(e.as_service_error(), Some(GetObjectError::NoSuchKey(_))) => {
                return Err(StorageError::NotFound(format!("object {object}")));
            }
            Err(e) if e.code() == Some("AccessDenied") => return Err(self.refused(object, e).await),
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
        let sent = self
            .sender
            .send("s3:ListObjectsV2", Resend::OnTransient, || {
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
        let sent = self
            .sender
            .send("s3:DeleteObject", Resend::OnTransient, || {
                self.client.delete_object().bucket(&self.bucket).key(object).send()
            })
            .await;
        sent.map(|_| ()).map_err(|e| unexpected("s3:DeleteObject", e))
    }
}
