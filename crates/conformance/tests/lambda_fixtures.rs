//! The API Gateway v2 fixtures in tests/fixtures (the ones `cargo lambda invoke
//! --data-file` replays) parsed as lambda_http parses them on Lambda, and served
//! by the router of the function each route belongs to.

use axum::body::Body;
use axum::Router;
use serde_json::Value;
use sluice_api::Config;
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
    let log = sluice_api::open_embedded(&config).unwrap();
    let (admin, publish, read) =
        (sluice_api::admin_router(log.clone()), sluice_api::publish_router(log.clone()), sluice_api::read_router(log));

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
    // A function serves only its own routes.
    assert_eq!(call(&read, "apigw-v2-publish.json").await.0, 404);
}
