#![cfg(feature = "aws")]
//! The API functions' metric writes through the real EMF recorder: a busy instance writes
//! once per interval (or per 32 requests) the same sums it would have written request by
//! request, in a fraction of the log bytes. (Its own test binary: the recorder is global.)

use std::sync::{Arc, Mutex};

use lambda_http::lambda_runtime::LambdaInvocation;
use lambda_http::tower::{service_fn, Layer, Service, ServiceExt};
use metrics::{counter, histogram};
use serde_json::Value;
use sluice_core::metrics as m;
use sluice_core::ManualClock;
use sluice_runtime::metrics::emf::FlushLayer;
use sluice_runtime::metrics::flush::FlushPolicy;

/// What the queues function records for a receive of 10 1 KiB messages.
fn record_a_receive() {
    let route = "/v1/topics/{topic}/subscriptions/{sub}/receive";
    counter!(m::HTTP_REQUESTS, "route" => route, "method" => "POST", "status" => "200").increment(1);
    histogram!(m::HTTP_DURATION, "route" => route, "method" => "POST").record(0.031_234_567);
    counter!(m::EVENTS_READ, "topic" => "orders", "via" => "queue").increment(10);
    counter!(m::BYTES_READ, "topic" => "orders", "via" => "queue").increment(10_240);
    counter!(m::RECEIVED, "topic" => "orders", "subscription" => "work").increment(10);
}

fn invocation(request_id: &str) -> LambdaInvocation {
    let mut context = lambda_http::Context::default();
    context.request_id = request_id.to_owned();
    let parts = lambda_http::http::Response::new(()).into_parts().0;
    LambdaInvocation { parts, body: Default::default(), context }
}

/// Runs `requests` receives `gap_ms` apart through the layer; answers the documents written.
async fn serve(
    layer: &FlushLayer,
    clock: &ManualClock,
    written: &Mutex<Vec<u8>>,
    requests: usize,
    gap_ms: i64,
) -> Vec<Value> {
    let mut service = layer.layer(service_fn(|_: LambdaInvocation| async {
        record_a_receive();
        Ok::<(), lambda_http::Error>(())
    }));
    for i in 0..requests {
        service.ready().await.unwrap().call(invocation(&format!("request-{i}"))).await.unwrap();
        clock.advance(gap_ms);
    }
    let bytes = std::mem::take(&mut *written.lock().unwrap());
    String::from_utf8(bytes).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The sum of a counter over the documents, and the values a histogram carried.
fn total(documents: &[Value], name: &str) -> (u64, usize) {
    let values = documents.iter().filter_map(|d| d.get(name));
    values.fold((0, 0), |(sum, n), v| match v {
        Value::Array(values) => (sum, n + values.len()),
        v => (sum + v.as_u64().unwrap(), n),
    })
}

fn size(documents: &[Value]) -> usize {
    documents.iter().map(|d| d.to_string().len() + 1).sum()
}

#[tokio::test]
async fn given_a_busy_instance_when_metrics_are_written_per_interval_then_the_sums_hold_in_fewer_bytes() {
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace("Sluice")
        .with_lambda_request_id("RequestId")
        .init()
        .unwrap();
    let written = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let written = written.clone();
        Arc::new(move |bytes: &[u8]| written.lock().unwrap().extend_from_slice(bytes))
    };
    let clock = Arc::new(ManualClock::new(1_000_000));

    // 40 receives 10 ms apart at the default (10 s): the first is written at once, then the
    // 32 after it together; the last 7 wait for the instance's next write.
    let batched = FlushLayer::new(collector, FlushPolicy::every(10_000), clock.clone(), sink.clone());
    let documents = serve(&batched, &clock, &written, 40, 10).await;
    assert_eq!(total(&documents, m::HTTP_REQUESTS), (33, 0), "{documents:?}");
    assert_eq!(total(&documents, m::RECEIVED), (330, 0));
    assert_eq!(total(&documents, m::HTTP_DURATION), (0, 33), "one duration per request");
    assert_eq!(documents.len(), 2 * 4, "two writes of the 4 label sets");
    assert!(documents.iter().all(|d| d.get("RequestId").is_none()), "a document of many requests names none");
    // The 7 waiting are written by the next request, 10 s later, with it.
    clock.advance(10_000);
    let later = serve(&batched, &clock, &written, 1, 10).await;
    assert_eq!(total(&later, m::HTTP_REQUESTS), (8, 0));

    // Measured: 32 busy receives written together, and one by one.
    let together = serve(&batched, &clock, &written, 32, 10).await;
    let every = FlushLayer::new(collector, FlushPolicy::every(0), clock.clone(), sink);
    let one_by_one = serve(&every, &clock, &written, 32, 10).await;
    assert_eq!(total(&one_by_one, m::HTTP_REQUESTS), (32, 0));
    assert!(one_by_one.iter().all(|d| d.get("RequestId").is_some()));
    let (per_request, batched_per_request) = (size(&one_by_one) / 32, size(&together) / 32);
    println!("EMF bytes per receive: {per_request} written after each, {batched_per_request} written per 32");
    assert!(per_request > 1_000, "{per_request}");
    assert!(batched_per_request < 100, "{batched_per_request}");
}
