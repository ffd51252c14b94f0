//! The API Gateway v2 fixtures in tests/fixtures (the ones `cargo lambda invoke
//! --data-file` replays) parsed as lambda_http parses them on Lambda, and served
//! by the router of the function each route belongs to (publish, read, admin, queues).

use axum::body::Body;
use axum::Router;
use serde_json::Value;
use sluice_runtime::Config;
use tower::ServiceExt;

fn fixture(name: &str) -> lambda_http::Request {
    let path = sluice_conformance::moto::workspace_root().join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lambda_http::request::from_str(&text).unwrap_or_else(|e| panic!("{name} is not an API Gateway event: {e}"))
}

async fn call(router: &Router, name: &str) -> (u16, Value) {
    let request = fixture(name).map(|body| Body::from(body.to_vec()));
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn given_api_gateway_v2_fixtures_then_each_function_router_serves_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_env().map(|c| Config { data_dir: dir.path().to_owned(), ..c }).unwrap();
    let log = sluice_runtime::open_embedded(&config).unwrap();
    let (admin, publish, read) = (
        sluice_api::admin_router(log.clone()),
        sluice_api::publish_router(log.clone()),
        sluice_api::read_router(log.clone()),
    );
    let queues = sluice_api::queues_router(log);

    let (status, _) = call(&admin, "apigw-v2-create-topic.json").await;
    assert!(status == 200 || status == 201, "create topic: {status}");
    let (status, published) = call(&publish, "apigw-v2-publish.json").await;
    assert_eq!(status, 200, "{published}");
    let results = published["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[1], serde_json::json!({"partition": 2, "offset": 0}));
    let (status, again) = call(&publish, "apigw-v2-publish.json").await;
    assert_eq!((status, &again), (200, &published), "the fixture's Idempotency-Key makes a retry a no-op");

    let (status, replay) = call(&read, "apigw-v2-replay.json").await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["events"].as_array().unwrap().len(), 1);
    assert_eq!(replay["events"][0]["value"], "hello");
    let (status, topics) = call(&admin, "apigw-v2-list-topics.json").await;
    assert_eq!(status, 200);
    assert!(topics.to_string().contains("orders"), "{topics}");

    // A work queue on the topic, from its start: both events, each with a receipt.
    let (status, subscription) = call(&queues, "apigw-v2-create-subscription.json").await;
    assert_eq!(status, 201, "{subscription}");
    assert_eq!(
        (subscription["start"].clone(), subscription["max_receive_count"].clone()),
        ("earliest".into(), 3.into())
    );
    let (status, again) = call(&queues, "apigw-v2-create-subscription.json").await;
    assert_eq!((status, &again), (200, &subscription), "the same settings again: no change");
    let (status, received) = call(&queues, "apigw-v2-receive.json").await;
    assert_eq!(status, 200, "{received}");
    let messages = received["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{received}");
    assert!(messages.iter().all(|m| m["receipt"].is_string() && m["receive_count"] == 1), "{received}");
    assert!(messages.iter().any(|m| m["value"] == "hello" && m["partition"] == 2), "{received}");
    let (status, empty) = call(&queues, "apigw-v2-receive.json").await;
    assert_eq!((status, empty), (200, serde_json::json!({"messages": []})), "both are in flight");

    // A function serves only its own routes.
    assert_eq!(call(&read, "apigw-v2-publish.json").await.0, 404);
    assert_eq!(call(&queues, "apigw-v2-publish.json").await.0, 404);
    assert_eq!(call(&read, "apigw-v2-receive.json").await.0, 404);
}
