//! SigV4 for the AWS deployment: API Gateway checks each request's signature (IAM auth)
//! for the service `execute-api`. Signing is aws-sigv4's; credentials come from
//! aws-config's default chain and are kept until shortly before they expire.

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use tokio::sync::Mutex;

use crate::Error;

/// Signs requests with the credentials and region of the standard AWS chain.
pub(crate) struct Signer {
    provider: SharedCredentialsProvider,
    region: String,
    cached: Mutex<Option<Credentials>>,
}

impl Signer {
    pub async fn from_env() -> Result<Self, Error> {
        let config = aws_config::load_from_env().await;
        let provider = config
            .credentials_provider()
            .ok_or_else(|| Error::Signing("no AWS credentials provider is configured".into()))?;
        let region = config.region().map(|r| r.to_string()).unwrap_or_else(|| "us-east-1".into());
        Ok(Self::new(provider, region))
    }

    pub fn new(provider: SharedCredentialsProvider, region: String) -> Self {
        Self { provider, region, cached: Mutex::new(None) }
    }

    async fn credentials(&self) -> Result<Credentials, Error> {
        let mut cached = self.cached.lock().await;
        let fresh = |c: &Credentials| c.expiry().is_none_or(|at| at > SystemTime::now() + Duration::from_secs(300));
        if let Some(credentials) = cached.as_ref().filter(|c| fresh(c)) {
            return Ok(credentials.clone());
        }
        let credentials = self.provider.provide_credentials().await.map_err(|e| Error::Signing(e.to_string()))?;
        *cached = Some(credentials.clone());
        Ok(credentials)
    }

    /// Adds the `authorization`, `x-amz-date` (and `x-amz-security-token`) headers.
    pub async fn sign(&self, request: &mut reqwest::Request, body: &[u8]) -> Result<(), Error> {
        let identity: Identity = self.credentials().await?.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("execute-api")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| Error::Signing(e.to_string()))?
            .into();
        let headers: Vec<(&str, &str)> =
            request.headers().iter().filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))).collect();
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| Error::Signing(e.to_string()))?;
        let (instructions, _) = sign(signable, &params).map_err(|e| Error::Signing(e.to_string()))?.into_parts();
        let (added, _) = instructions.into_parts();
        for header in added {
            let value =
                reqwest::header::HeaderValue::from_str(header.value()).map_err(|e| Error::Signing(e.to_string()))?;
            let name = reqwest::header::HeaderName::from_bytes(header.name().as_bytes())
                .map_err(|e| Error::Signing(e.to_string()))?;
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn given_static_credentials_then_the_request_carries_an_execute_api_signature() {
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test");
        let signer = Signer::new(SharedCredentialsProvider::new(credentials), "eu-west-1".into());
        let http = reqwest::Client::new();
        let signed = |body: &'static [u8]| {
            let mut request = http.post("https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1/topics/t/events");
            request = request.body(body);
            let mut request = request.build().unwrap();
            let signer = &signer;
            async move {
                signer.sign(&mut request, body).await.unwrap();
                request
            }
        };
        let one = signed(b"{\"events\":[]}").await;
        let auth = one.headers()["authorization"].to_str().unwrap().to_owned();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{auth}");
        assert!(auth.contains("/eu-west-1/execute-api/aws4_request"), "{auth}");
        assert!(auth.contains("SignedHeaders=host;x-amz-date;x-amz-security-token"), "{auth}");
        assert_eq!(one.headers()["x-amz-security-token"], "token");
        let other = signed(b"{\"events\":[1]}").await;
        let signature =
            |r: &reqwest::Request| r.headers()["authorization"].to_str().unwrap().rsplit('=').next().map(str::to_owned);
        assert_ne!(signature(&one), signature(&other), "the body is part of the signature");
    }
}
