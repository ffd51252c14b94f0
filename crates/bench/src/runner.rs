//! The shared runner: points the bench at the server, runs the workload the command line
//! names, and prints its [`Report`] as a table or as JSON.

use crate::args::{BenchArgs, QueueArgs, Workload};
use crate::report::Report;
use crate::target::Target;
use crate::workloads;
use crate::BoxError;

pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(1024).tcp_nodelay(true).build()?;
    let target = Target { http, base: args.url.trim_end_matches('/').to_owned(), topic: args.topic.clone() };
    if !matches!(args.workload, Workload::Queue(QueueArgs { embedded: Some(_), .. })) {
        target.ensure_topic(args.partitions).await?;
    }
    let report = match args.workload {
        Workload::Publish(a) => workloads::publish::run(&target, a).await?,
        Workload::Replay(a) => workloads::replay::replay(&target, a.limit).await?,
        Workload::Latency(a) => workloads::latency::run(&target, a).await?,
        Workload::Produce(a) => workloads::produce::run(&target, a).await?,
        Workload::Work(a) => workloads::work::run(&target, a).await?,
        Workload::Push(a) => workloads::push::run(&target, a).await?,
        Workload::Group(a) => workloads::group::run(&target, a).await?,
        Workload::Queue(a) => workloads::queue::run(&target, a, args.partitions).await?,
    };
    print(&report, args.json)?;
    match report.failure {
        Some(failure) => Err(failure.into()),
        None => Ok(()),
    }
}

fn print(report: &Report, json: bool) -> Result<(), BoxError> {
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        report.print_table();
    }
    Ok(())
}
