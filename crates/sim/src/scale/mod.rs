//! The scale model of the AWS deployment (issue 45): the real core, as many Lambda
//! execution environments, over stores that behave at the port as DynamoDB and S3 do
//! (latency drawn from published figures, DynamoDB's conflict rule, per-item throughput,
//! S3's per-prefix rates), behind Lambda's concurrency and API Gateway's throttles, all in
//! virtual time on one thread: a seed gives one history and one JSON line.
//!
//! `cargo run -p sluice-sim --release -- scale --workload publish --partitions 64 --clients 1000 --seconds 10`
//!
//! Below everything: [`params`] (every figure, with its source), [`cloud`] (clock, chance,
//! meter, trace), [`meter`]; then the services ([`dynamo`], [`s3`], [`lambda`]); then the
//! workloads, which drive them as clients would.

pub mod cloud;
pub mod dynamo;
pub mod lambda;
pub mod meter;
pub mod params;
pub mod report;
pub mod s3;
mod workloads;

use std::sync::Arc;

use sluice_core::{Clock, Log, LogConfig, TopicSpec};
use sluice_testkit::{MemObjects, MemStore};

pub use report::{ScaleArgs, Workload};

use cloud::Cloud;
use dynamo::Dynamo;
use lambda::Platform;
use report::Tally;
use s3::S3;

/// The topic every workload uses.
pub const TOPIC: &str = "t";

/// A deployment in the model: the services, and a log with no latency for setting up.
pub struct Rig {
    pub cloud: Arc<Cloud>,
    pub platform: Arc<Platform>,
    pub dynamo: Arc<Dynamo>,
    /// Straight on the stores, unmetered: creating topics and subscriptions.
    pub admin: Log,
}

impl Rig {
    fn new(args: &ScaleArgs) -> Self {
        let cloud = Cloud::new(args.seed, args.trace);
        let clock: Arc<dyn Clock> = cloud.clock.clone();
        let mem = MemStore::new(clock.clone());
        let objects = MemObjects::new(clock.clone());
        let dynamo = Dynamo::new(cloud.clone(), mem.clone());
        let s3 = S3::new(cloud.clone(), objects.clone());
        let platform = Platform::new(cloud.clone(), dynamo.clone(), s3, [args.stage, args.long_poll]);
        let admin = Log::new(Arc::new(mem), Arc::new(objects), clock, LogConfig::default());
        Self { cloud, platform, dynamo, admin }
    }
}

/// Runs one workload on a fresh single-threaded runtime in paused time and answers its
/// JSON line.
pub fn run(args: &ScaleArgs) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async {
        let rig = Rig::new(args);
        let spec = TopicSpec { partitions: args.partitions, retention_ms: None, retention_bytes: None };
        rig.admin.create_topic(TOPIC, spec).await.expect("create the topic");
        let tally = Arc::new(Tally::default());
        workloads::run(&rig, args, tally.clone()).await;
        let meter = rig.cloud.meter.lock().unwrap().clone();
        let seen = tally.0.lock().unwrap();
        if args.trace {
            eprintln!("{meter:?}");
        }
        report::line(args, &seen, &meter)
    })
}
