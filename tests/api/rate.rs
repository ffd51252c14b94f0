//! A subscription's `rate` over HTTP: set on create, shown by describe with its throttled
//! time, changed and removed by PATCH; a bad one refused `400 invalid_request` naming the
//! field, nothing written.

use serde_json::{json, Value};

use crate::common::{client, create_topic, Server};

async fn call(c: &reqwest::Client, s: &Server, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let r = c.request(method, s.url(path)).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn given_a_rate_then_created_shown_changed_removed_and_bad_ones_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let c = client();
    create_topic(&c, &s, "rated", 2).await;
    let sub = "/v1/topics/rated/subscriptions/s";
    for bad in [
        json!({"per_second": 0, "burst": 1}),
        json!({"per_second": 10001, "burst": 1}),
        json!({"per_second": 5}),
        json!({"per_second": 5, "burst": 0}),
        json!(5),
    ] {
        let (status, err) = call(&c, &s, reqwest::Method::PUT, sub, json!({ "rate": bad })).await;
        assert_eq!((status, err["error"]["code"].as_str()), (400, Some("invalid_request")), "{bad}: {err}");
        assert!(err["error"]["message"].as_str().unwrap().contains("rate"), "names the field: {err}");
        assert_eq!(call(&c, &s, reqwest::Method::GET, sub, Value::Null).await.0, 404, "{bad}: nothing created");
    }
    let rate = json!({"per_second": 20, "burst": 5});
    let (status, created) = call(&c, &s, reqwest::Method::PUT, sub, json!({ "rate": rate })).await;
    assert_eq!((status, &created["rate"]), (201, &rate), "{created}");
    let (_, described) = call(&c, &s, reqwest::Method::GET, sub, Value::Null).await;
    assert_eq!((&described["rate"], &described["throttled_ms"]), (&rate, &json!(0)), "{described}");

    let (status, err) = call(&c, &s, reqwest::Method::PATCH, sub, json!({"rate": {"per_second": 0, "burst": 1}})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (400, Some("invalid_request")), "{err}");
    let (_, unchanged) = call(&c, &s, reqwest::Method::GET, sub, Value::Null).await;
    assert_eq!(unchanged["rate"], rate, "a refused change writes nothing");

    let faster = json!({"per_second": 10000, "burst": 20000});
    let (status, patched) = call(&c, &s, reqwest::Method::PATCH, sub, json!({ "rate": faster })).await;
    assert_eq!((status, &patched["rate"]), (200, &faster), "{patched}");
    let (status, removed) = call(&c, &s, reqwest::Method::PATCH, sub, json!({ "rate": null })).await;
    assert_eq!((status, &removed["rate"], removed.get("throttled_ms")), (200, &Value::Null, None), "{removed}");
}
