//! The push suite on the AWS adapters against a moto server of its own: its dispatcher
//! drains in many short rounds, and a server that serves one request at a time is best
//! not shared with the other suites' concurrent cases (its own lane in infra/test.sh).

async fn moto() -> sluice_conformance::moto::MotoBackend {
    sluice_conformance::moto::MotoBackend
}

sluice_conformance::push_conformance_suite!(moto());

/// A request moto routes to `service` (it reads the service from the credential scope and
/// checks no signature).
fn on_moto(request: reqwest::RequestBuilder, service: &str) -> reqwest::RequestBuilder {
    let scope = format!("Credential=test/20250101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0");
    request.header("authorization", format!("AWS4-HMAC-SHA256 {scope}"))
}

/// The Lambda adapter reads a function's configured timeout (`GetFunctionConfiguration`,
/// which moto answers without Docker), and refuses a function that is not there.
#[tokio::test]
async fn given_a_function_on_moto_then_its_timeout_is_read_and_a_missing_one_is_refused() {
    use sluice_core::ports::deliver::{TargetError, Targets};
    let endpoint = sluice_conformance::moto::moto().settings.endpoint_url.clone().expect("moto's endpoint");
    let http = reqwest::Client::new();
    let role = sluice_conformance::unique_topic("push-role");
    let created = on_moto(http.post(&endpoint), "iam")
        .form(&[
            ("Action", "CreateRole"),
            ("Version", "2010-05-08"),
            ("RoleName", role.as_str()),
            ("AssumeRolePolicyDocument", "{}"),
        ])
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());
    let function = sluice_conformance::unique_topic("push-target");
    let spec = serde_json::json!({
        "FunctionName": function, "Runtime": "provided.al2023", "Handler": "bootstrap", "Timeout": 20,
        "Role": format!("arn:aws:iam::123456789012:role/{role}"), "Code": {"ZipFile": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA=="},
    });
    let created = on_moto(http.post(format!("{endpoint}/2015-03-31/functions")), "lambda").json(&spec).send().await;
    let created = created.unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());

    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(sluice_aws::http_client())
        .test_credentials()
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .load()
        .await;
    let lambda = sluice_aws::LambdaInvoker::from_sdk_config(&config);
    assert_eq!(lambda.lambda_timeout_ms(&function).await, Ok(20_000), "the function's 20 s");
    match lambda.lambda_timeout_ms("sluice-no-such-function").await {
        Err(TargetError::Refused(why)) => assert!(why.contains("ResourceNotFound"), "{why}"),
        other => panic!("a missing function: {other:?}"),
    }
}
