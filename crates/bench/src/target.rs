//! The Sluice under load: its base URL, the topic the workloads use, a pooled HTTP client
//! for their set-up requests, and the names of the fresh groups and subscriptions they make.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::BoxError;

/// Where the workloads point: a Sluice and one topic of it.
#[derive(Clone)]
pub struct Target {
    pub http: reqwest::Client,
    pub base: String,
    pub topic: String,
}

impl Target {
    pub async fn ensure_topic(&self, partitions: u32) -> Result<(), BoxError> {
        let url = format!("{}/v1/topics/{}", self.base, self.topic);
        let r = self.http.put(&url).json(&json!({ "partitions": partitions })).send().await?;
        // 409: it exists with other settings; benchmark it as it is.
        if !(r.status().is_success() || r.status() == 409) {
            return Err(format!("creating topic {}: {} {}", self.topic, r.status(), r.text().await?).into());
        }
        Ok(())
    }

    pub async fn partitions(&self) -> Result<Vec<(u32, u64)>, BoxError> {
        let d: Value = self.http.get(format!("{}/v1/topics/{}", self.base, self.topic)).send().await?.json().await?;
        let states = d["partition_states"].as_array().ok_or("describe: no partition_states")?;
        Ok(states
            .iter()
            .map(|p| (p["partition"].as_u64().unwrap_or(0) as u32, p["high_watermark"].as_u64().unwrap_or(0)))
            .collect())
    }
}

/// Each partition's high watermark, indexed by partition.
pub async fn high_watermarks(t: &Target) -> Result<Vec<u64>, BoxError> {
    let mut ends = Vec::new();
    for (p, hw) in t.partitions().await? {
        ends.resize(ends.len().max(p as usize + 1), 0);
        ends[p as usize] = hw;
    }
    Ok(ends)
}

/// A group name no earlier run used, so every run starts with no members and no offsets.
pub fn unique_group_name() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("bench-{}-{ms}", std::process::id())
}
