//! A subscription's push target: where a dispatcher delivers its messages instead of
//! clients receiving them (EventBridge's and SNS's model over an SQS-like queue). Checked
//! here, when the subscription is created; delivered by [`crate::push`].

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::PreviousSecret;
use crate::ports::deliver::{TargetError, Targets};
use crate::{Code, Error};

/// Messages per delivery: at most, and by default.
pub const MAX_PUSH_BATCH: u32 = 100;
pub const DEFAULT_PUSH_BATCH: u32 = 10;
/// How long one delivery may take before it counts as failed.
pub const MIN_PUSH_TIMEOUT_MS: u64 = 1_000;
pub const MAX_PUSH_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_PUSH_TIMEOUT_MS: u64 = 10_000;
/// Deliveries of one subscription under way at once.
pub const MAX_PUSH_IN_FLIGHT: u32 = 100;
pub const DEFAULT_PUSH_IN_FLIGHT: u32 = 4;
/// When a subscription that set no `push.suspend_after` is suspended (`crate::push::flow`).
pub const DEFAULT_SUSPEND_AFTER: SuspendAfter = SuspendAfter { failures: 20, spanning_ms: 5 * 60_000 };
/// Bounds of `push.suspend_after`.
pub const MAX_SUSPEND_FAILURES: u32 = 10_000;
pub const MAX_SUSPEND_SPANNING_MS: u64 = 7 * 24 * 3_600_000;
/// Standard Webhooks' secret prefix; the key is the base64 after it.
pub const SECRET_PREFIX: &str = "whsec_";
/// Bytes of a signing key a subscription may be given (Standard Webhooks' bounds).
pub const MIN_SECRET_BYTES: usize = 24;
pub const MAX_SECRET_BYTES: usize = 64;
/// Bytes of a generated signing key (as Svix's, the standard's reference service).
const SECRET_BYTES: usize = 24;
const MAX_URL_LEN: usize = 2048;
const MAX_FUNCTION_LEN: usize = 256;

/// Where deliveries go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushTarget {
    /// An HTTP(S) endpoint, sent a signed `POST` (Standard Webhooks).
    Url {
        url: String,
        /// `whsec_<base64 key>`: never shown after the create answer.
        secret: String,
    },
    /// A Lambda function (ARN, or its name under `cargo lambda watch`), invoked
    /// synchronously with the same body.
    Lambda { function: String },
}

/// When an endpoint counts as dead and its subscription is suspended: this many failed
/// attempts in a row, the first at least `spanning_ms` before the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendAfter {
    pub failures: u32,
    pub spanning_ms: u64,
}

/// A push subscription's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSpec {
    pub target: PushTarget,
    pub max_batch: u32,
    pub timeout_ms: u64,
    /// The ceiling of the adaptive in-flight limit (`crate::push::flow`).
    pub max_in_flight: u32,
    /// When to suspend; [`DEFAULT_SUSPEND_AFTER`] if not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_after: Option<SuspendAfter>,
    /// The secret the last rotation replaced (`secret.rs`), signing beside the new one
    /// until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<PreviousSecret>,
}

impl PushSpec {
    /// A URL target with defaults, its secret to be generated (empty) unless given.
    pub fn url(url: impl Into<String>, secret: Option<String>) -> Self {
        Self::with(PushTarget::Url { url: url.into(), secret: secret.unwrap_or_default() })
    }

    /// A Lambda target with defaults.
    pub fn lambda(function: impl Into<String>) -> Self {
        Self::with(PushTarget::Lambda { function: function.into() })
    }

    fn with(target: PushTarget) -> Self {
        Self {
            target,
            max_batch: DEFAULT_PUSH_BATCH,
            timeout_ms: DEFAULT_PUSH_TIMEOUT_MS,
            max_in_flight: DEFAULT_PUSH_IN_FLIGHT,
            suspend_after: None,
            previous_secret: None,
        }
    }

    /// When to suspend the subscription.
    pub fn suspend_after(&self) -> SuspendAfter {
        self.suspend_after.unwrap_or(DEFAULT_SUSPEND_AFTER)
    }

    /// The signing key, for a URL target.
    pub fn secret(&self) -> Option<&str> {
        match &self.target {
            PushTarget::Url { secret, .. } => Some(secret),
            PushTarget::Lambda { .. } => None,
        }
    }

    /// Whether the secret is still to be generated.
    pub(super) fn wants_secret(&self) -> bool {
        self.secret().is_some_and(str::is_empty)
    }

    /// Gives a URL target without a secret one made of `random` bytes.
    pub(super) fn generate_secret(&mut self, random: impl FnMut() -> u64) {
        if let PushTarget::Url { secret, .. } = &mut self.target {
            *secret = generated_secret(random);
        }
    }

    /// The same settings as `requested`, where a request without a secret asks for any (a
    /// rotation's previous secret is not a setting a create names).
    pub(super) fn satisfies(&self, requested: &PushSpec) -> bool {
        let mut stored = self.clone();
        stored.previous_secret.clone_from(&requested.previous_secret);
        if requested.wants_secret() {
            if let PushTarget::Url { secret, .. } = &mut stored.target {
                secret.clear();
            }
        }
        &stored == requested
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::invalid(Code::InvalidPush, message));
        if !(1..=MAX_PUSH_BATCH).contains(&self.max_batch) {
            return invalid(format!("push.max_batch must be between 1 and {MAX_PUSH_BATCH}"));
        }
        if !(MIN_PUSH_TIMEOUT_MS..=MAX_PUSH_TIMEOUT_MS).contains(&self.timeout_ms) {
            return invalid(format!("push.timeout_ms must be between {MIN_PUSH_TIMEOUT_MS} and {MAX_PUSH_TIMEOUT_MS}"));
        }
        if !(1..=MAX_PUSH_IN_FLIGHT).contains(&self.max_in_flight) {
            return invalid(format!("push.max_in_flight must be between 1 and {MAX_PUSH_IN_FLIGHT}"));
        }
        if let Some(s) = &self.suspend_after {
            if !(1..=MAX_SUSPEND_FAILURES).contains(&s.failures) {
                return invalid(format!("push.suspend_after.failures must be between 1 and {MAX_SUSPEND_FAILURES}"));
            }
            if s.spanning_ms > MAX_SUSPEND_SPANNING_MS {
                return invalid(format!(
                    "push.suspend_after.spanning_ms must be at most {MAX_SUSPEND_SPANNING_MS} (7 days)"
                ));
            }
        }
        match &self.target {
            PushTarget::Url { url, secret } => {
                check_url(url).or_else(|m| invalid(format!("push.url {m}")))?;
                if !secret.is_empty() {
                    check_secret("push.secret", secret)?;
                }
                Ok(())
            }
            PushTarget::Lambda { function } => {
                let ok = !function.is_empty()
                    && function.len() <= MAX_FUNCTION_LEN
                    && function.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_:.$".contains(&b));
                if ok {
                    Ok(())
                } else {
                    invalid(format!(
                        "push.lambda must be a function name or ARN (1 to {MAX_FUNCTION_LEN} letters, digits, '-', '_', ':', '.', '$')"
                    ))
                }
            }
        }
    }
}

/// Refuses a Lambda target whose function may run longer than an attempt: the dispatcher
/// would push the batch again (or, keyed, the key's next one) while the timed-out
/// invocation still runs. `targets` reads the function's timeout (on AWS; without it,
/// nothing is asked).
pub(super) async fn check_target(push: &PushSpec, targets: Option<&dyn Targets>) -> Result<(), Error> {
    let (PushTarget::Lambda { function }, Some(targets)) = (&push.target, targets) else { return Ok(()) };
    match targets.lambda_timeout_ms(function).await {
        Ok(function_ms) => outlives(push.timeout_ms, function, function_ms),
        Err(TargetError::Refused(why)) => Err(Error::invalid(
            Code::InvalidPush,
            format!("push.lambda: the configuration of function {function:?} could not be read: {why}"),
        )),
        Err(TargetError::Unavailable(why)) => {
            Err(Error::Unavailable(crate::StorageError::Unavailable { message: why, source: None }))
        }
        Err(TargetError::Unsupported(how)) => Err(Error::invalid(Code::InvalidPush, format!("push.lambda: {how}"))),
    }
}

/// The refusal of a `timeout_ms` below the function's own timeout, if it is.
fn outlives(timeout_ms: u64, function: &str, function_ms: u64) -> Result<(), Error> {
    if timeout_ms >= function_ms {
        return Ok(());
    }
    Err(Error::invalid(
        Code::InvalidPush,
        format!(
            "push.timeout_ms ({timeout_ms}) is below the timeout of function {function:?} ({function_ms} ms): an \
             invocation the dispatcher stopped waiting for could still run while the batch (or, ordered by key, \
             the key's next one) is pushed again; set push.timeout_ms to at least {function_ms} or lower the \
             function's timeout"
        ),
    ))
}

fn check_url(raw: &str) -> Result<(), String> {
    if raw.len() > MAX_URL_LEN {
        return Err(format!("must be at most {MAX_URL_LEN} characters"));
    }
    let url = url::Url::parse(raw).map_err(|e| format!("is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be http:// or https://".into());
    }
    if url.host().is_none() {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials (sign with the secret)".into());
    }
    Ok(())
}

/// A secret `field` names, checked as a create checks one: `whsec_` and a key of
/// [`MIN_SECRET_BYTES`] to [`MAX_SECRET_BYTES`] bytes.
pub(super) fn check_secret(field: &str, secret: &str) -> Result<(), Error> {
    let key = secret_key(secret).map_err(|m| Error::invalid(Code::InvalidPush, format!("{field} {m}")))?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(Error::invalid(
            Code::InvalidPush,
            format!(
                "{field} must hold a key of {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes (Standard Webhooks); \
                 this one has {}",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// A new `whsec_` secret made of `random` bytes.
pub(super) fn generated_secret(mut random: impl FnMut() -> u64) -> String {
    let key: Vec<u8> = (0..SECRET_BYTES / 8).flat_map(|_| random().to_le_bytes()).collect();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key of a `whsec_<base64>` secret (Standard Webhooks). Its length is checked when a
/// subscription is created ([`MIN_SECRET_BYTES`] to [`MAX_SECRET_BYTES`]), not here: a key
/// stored before that bound still signs.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or_else(|| format!("must start with {SECRET_PREFIX:?}"))?;
    let key = STANDARD.decode(encoded).map_err(|_| format!("must be {SECRET_PREFIX} followed by base64"))?;
    if key.is_empty() {
        return Err("must hold a key".into());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(bytes: usize) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(vec![7u8; bytes]))
    }

    #[test]
    fn bad_targets_and_bounds_are_refused_with_the_reason() {
        let cases: Vec<(PushSpec, &str)> = vec![
            (PushSpec::url("ftp://example.com/x", None), "http"),
            (PushSpec::url("not a url", None), "not a URL"),
            (PushSpec::url("https://user:pw@example.com/", None), "credentials"),
            (PushSpec::url("https://example.com/", Some("abc".into())), "whsec_"),
            (
                PushSpec::url("https://example.com/", Some("whsec_AAAA".into())),
                "24 to 64 bytes (Standard Webhooks); this one has 3",
            ),
            (
                PushSpec::url("https://example.com/", Some(key_of(16))),
                "24 to 64 bytes (Standard Webhooks); this one has 16",
            ),
            (PushSpec::url("https://example.com/", Some(key_of(23))), "this one has 23"),
            (PushSpec::url("https://example.com/", Some(key_of(65))), "this one has 65"),
            (PushSpec::lambda(""), "function name"),
            (PushSpec::lambda("my fn"), "function name"),
            (PushSpec { max_batch: 0, ..PushSpec::lambda("f") }, "max_batch"),
            (PushSpec { max_batch: 101, ..PushSpec::lambda("f") }, "max_batch"),
            (PushSpec { timeout_ms: 999, ..PushSpec::lambda("f") }, "timeout_ms"),
            (PushSpec { max_in_flight: 0, ..PushSpec::lambda("f") }, "max_in_flight"),
            (
                PushSpec { suspend_after: Some(SuspendAfter { failures: 0, spanning_ms: 0 }), ..PushSpec::lambda("f") },
                "suspend_after.failures",
            ),
            (
                PushSpec {
                    suspend_after: Some(SuspendAfter { failures: 1, spanning_ms: MAX_SUSPEND_SPANNING_MS + 1 }),
                    ..PushSpec::lambda("f")
                },
                "suspend_after.spanning_ms",
            ),
        ];
        for (spec, why) in cases {
            let err = spec.validate().expect_err(why).to_string();
            assert!(err.contains(why), "{err} should say {why}");
        }
        PushSpec::url("http://localhost:3000/hook", None).validate().unwrap();
        PushSpec::url("http://localhost:3000/hook", Some(key_of(24))).validate().unwrap();
        PushSpec::url("http://localhost:3000/hook", Some(key_of(64))).validate().unwrap();
        PushSpec::lambda("arn:aws:lambda:eu-west-1:123456789012:function:consumer").validate().unwrap();
    }

    #[test]
    fn a_generated_secret_is_a_valid_one_and_a_request_without_one_matches_it() {
        let requested = PushSpec::url("https://example.com/", None);
        let mut stored = requested.clone();
        let mut n = 0u64;
        stored.generate_secret(|| {
            n += 1;
            n
        });
        assert_eq!(secret_key(stored.secret().unwrap()).unwrap().len(), SECRET_BYTES);
        stored.validate().unwrap();
        assert!(stored.satisfies(&requested));
        assert!(!stored.satisfies(&PushSpec::url("https://example.com/", Some("whsec_x".into()))));
    }

    /// A Lambda function's timeout as a fake `Targets` reads it.
    struct Function(Result<u64, TargetError>);

    #[async_trait::async_trait]
    impl Targets for Function {
        async fn lambda_timeout_ms(&self, _: &str) -> Result<u64, TargetError> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn given_a_lambda_function_that_outlives_the_attempt_then_its_subscription_is_refused_saying_why() {
        let with = |timeout_ms| PushSpec { timeout_ms, ..PushSpec::lambda("consumer") };
        let refusal = |r: Result<(), Error>| match r {
            Err(Error::Invalid { code: Code::InvalidPush, message }) => message,
            other => panic!("not refused as invalid_push: {other:?}"),
        };
        let fifteen = Function(Ok(15_000));
        let why = refusal(check_target(&with(10_000), Some(&fifteen)).await);
        assert!(
            why.contains("push.timeout_ms (10000) is below the timeout of function \"consumer\" (15000 ms)"),
            "{why}"
        );
        assert!(why.contains("at least 15000"), "{why}");
        check_target(&with(15_000), Some(&fifteen)).await.unwrap();
        check_target(&with(30_000), Some(&fifteen)).await.unwrap();
        // Not asked: a URL target, or no way to ask (the embedded backend).
        check_target(&PushSpec::url("https://example.com/", None), Some(&fifteen)).await.unwrap();
        check_target(&with(1_000), None).await.unwrap();
        let missing = Function(Err(TargetError::Refused("ResourceNotFoundException: no such function".into())));
        let why = refusal(check_target(&with(10_000), Some(&missing)).await);
        assert!(why.contains("could not be read: ResourceNotFoundException"), "{why}");
        let throttled = Function(Err(TargetError::Unavailable("throttled".into())));
        assert!(matches!(check_target(&with(10_000), Some(&throttled)).await, Err(Error::Unavailable(_))));
    }
}
