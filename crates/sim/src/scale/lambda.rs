//! Lambda and API Gateway: functions whose execution environments each run one invocation
//! at a time with core objects and caches of their own (a `Log`, `Queues`, `Groups`, as
//! `sluice_runtime::open` builds them on AWS), made on demand with a cold start, within the
//! account's concurrency and each function's reserved concurrency (throttled beyond); and
//! the HTTP API in front, with the account's and the stage's throttles and its own latency.

use std::sync::{Arc, Mutex};

use sluice_core::groups::{Groups, GroupsConfig};
use sluice_core::queues::Queues;
use sluice_core::{Clock, Log, LogConfig, SeededRandom, AWS_INLINE_SEGMENT_BYTES};

use super::cloud::{Bucket, Cloud};
use super::dynamo::{Dynamo, ModelStore};
use super::params;
use super::s3::{ModelObjects, S3};

/// One execution environment's core objects.
pub struct Instance {
    pub id: u64,
    pub log: Log,
    pub queues: Queues,
    pub groups: Groups,
}

/// A function as the template deploys it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Publish,
    Consume,
    Dispatcher,
}

impl Function {
    const ALL: [Function; 3] = [Function::Publish, Function::Consume, Function::Dispatcher];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Function::Publish => "publish",
            Function::Consume => "consume",
            Function::Dispatcher => "dispatcher",
        }
    }
}

/// An API route's own throttle, if it has one (template.yaml: the long-poll routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Stage,
    GroupPoll,
    QueueReceive,
}

#[derive(Default)]
struct Pool {
    idle: Vec<Arc<Instance>>,
    busy: u32,
    reserved: Option<u32>,
}

/// Why a call did not reach its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// API Gateway's throttle (429).
    Gateway,
    /// Lambda's concurrency (429 from Lambda, a 5xx from API Gateway).
    Lambda,
}

/// The account's functions and its API.
pub struct Platform {
    pub cloud: Arc<Cloud>,
    dynamo: Arc<Dynamo>,
    s3: Arc<S3>,
    pools: Mutex<Vec<Pool>>,
    next_id: Mutex<u64>,
    gateway: Mutex<[Bucket; 4]>,
}

impl Platform {
    pub fn new(cloud: Arc<Cloud>, dynamo: Arc<Dynamo>, s3: Arc<S3>, throttles: [(f64, f64); 2]) -> Arc<Self> {
        let [stage, poll] = throttles;
        let mut pools: Vec<Pool> = Function::ALL.iter().map(|_| Pool::default()).collect();
        pools[Function::Dispatcher.index()].reserved = params::DISPATCHER_RESERVED;
        let acc = params::APIGW_ACCOUNT;
        let gateway = [
            Bucket::new(acc.0, acc.1),
            Bucket::new(stage.0, stage.1),
            Bucket::new(poll.0, poll.1),
            Bucket::new(poll.0, poll.1),
        ];
        Arc::new(Self {
            cloud,
            dynamo,
            s3,
            pools: Mutex::new(pools),
            next_id: Mutex::new(0),
            gateway: Mutex::new(gateway),
        })
    }

    /// Sets a function's reserved concurrency (`None`: unreserved).
    pub fn reserve(&self, f: Function, reserved: Option<u32>) {
        self.pools.lock().unwrap()[f.index()].reserved = reserved;
    }

    /// A fresh environment's core objects, as the functions build them on AWS.
    fn build(&self, id: u64) -> Instance {
        let clock: Arc<dyn Clock> = self.cloud.clock.clone();
        let config = LogConfig {
            poll_interval: std::time::Duration::from_millis(500),
            inline_segment_bytes: AWS_INLINE_SEGMENT_BYTES,
            single_write_commits: true,
            ..LogConfig::default()
        };
        let random = Arc::new(SeededRandom::new(self.cloud.next_u64()));
        let store = Arc::new(ModelStore(self.dynamo.clone()));
        let objects = Arc::new(ModelObjects(self.s3.clone()));
        let log = Log::with_random(store, objects, clock, random, config);
        let queues = Queues::new(log.clone());
        let groups = Groups::with_config(log.clone(), GroupsConfig::default());
        Instance { id, log, queues, groups }
    }

    /// An environment of `f`, warm if one is idle; `None` if Lambda throttles.
    async fn acquire(&self, f: Function) -> Option<(Arc<Instance>, f64)> {
        let warm = {
            let mut pools = self.pools.lock().unwrap();
            let reserved_total: u32 = pools.iter().filter_map(|p| p.reserved).sum();
            let unreserved = params::ACCOUNT_CONCURRENCY.saturating_sub(reserved_total).max(params::UNRESERVED_MIN);
            let busy_unreserved: u32 = pools.iter().filter(|p| p.reserved.is_none()).map(|p| p.busy).sum();
            let pool = &mut pools[f.index()];
            let room = match pool.reserved {
                Some(cap) => pool.busy < cap,
                None => busy_unreserved < unreserved,
            };
            if !room {
                return None;
            }
            pool.busy += 1;
            pool.idle.pop()
        };
        let routing = self.cloud.wait_draw(&params::LAMBDA_INVOKE).await;
        if let Some(instance) = warm {
            return Some((instance, routing));
        }
        let began = self.cloud.now_ms();
        let init = self.cloud.wait_draw(&params::LAMBDA_INIT).await;
        let id = {
            let mut next = self.next_id.lock().unwrap();
            *next += 1;
            *next
        };
        self.cloud.count(|m| m.cold_starts += 1);
        self.cloud.trace(began, &format!("lambda {} init instance={id}", f.name()), "cold start");
        Some((Arc::new(self.build(id)), routing + init))
    }

    fn release(&self, f: Function, instance: Arc<Instance>) {
        let mut pools = self.pools.lock().unwrap();
        let pool = &mut pools[f.index()];
        pool.busy -= 1;
        pool.idle.push(instance);
    }

    /// Runs `handler` as one invocation of `f` (billed from its start, init included).
    pub async fn invoke<T, Fut>(&self, f: Function, handler: impl FnOnce(Arc<Instance>) -> Fut) -> Result<T, Refused>
    where
        Fut: std::future::Future<Output = T>,
    {
        let Some((instance, init)) = self.acquire(f).await else {
            self.cloud.count(|m| m.throttles += 1);
            return Err(Refused::Lambda);
        };
        let began = self.cloud.now_ms();
        let out = handler(instance.clone()).await;
        self.cloud.wait(params::HANDLER_CPU_MS).await;
        let billed = (self.cloud.now_ms() - began + init).ceil();
        self.cloud.count(|m| {
            m.lambda_invocations += 1;
            m.lambda_gb_ms += billed * f64::from(params::FUNCTION_MB) / 1024.0;
        });
        self.cloud.trace(began, &format!("lambda {} instance={}", f.name(), instance.id), "done");
        self.release(f, instance);
        Ok(out)
    }

    /// An HTTP API request on `route`, served by `f`: the gateway's throttles, then its
    /// latency around the invocation.
    pub async fn call<T, Fut>(
        &self,
        route: Route,
        f: Function,
        handler: impl FnOnce(Arc<Instance>) -> Fut,
    ) -> Result<T, Refused>
    where
        Fut: std::future::Future<Output = T>,
    {
        let now = self.cloud.now_ms();
        let admitted = {
            let mut g = self.gateway.lock().unwrap();
            let route = match route {
                Route::Stage => None,
                Route::GroupPoll => Some(2),
                Route::QueueReceive => Some(3),
            };
            // Taken only when every bucket on the way has room.
            let mut on_way: Vec<usize> = vec![0, 1];
            on_way.extend(route);
            let room = on_way.iter().all(|&b| g[b].room(now, 1.0));
            if room {
                for b in on_way {
                    g[b].take(now, 1.0);
                }
            }
            room
        };
        if !admitted {
            self.cloud.count(|m| m.throttles += 1);
            return Err(Refused::Gateway);
        }
        self.cloud.count(|m| m.apigw += 1);
        let overhead = self.cloud.draw(&params::APIGW);
        self.cloud.wait(overhead / 2.0).await;
        let out = self.invoke(f, handler).await;
        self.cloud.wait(overhead / 2.0).await;
        out
    }
}
