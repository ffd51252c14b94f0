//! Rotating a push subscription's signing secret (Standard Webhooks): the new secret signs
//! every delivery from the rotation on, and the one it replaced signs beside it
//! (`webhook-signature: v1,<new> v1,<old>`) until the overlap ends, judged on the clock of
//! the process delivering, so a receiver can switch to the new secret without refusing
//! a delivery.
//!
//! Why no fence on the cursors, as a change of settings has (`patch.rs`): a dispatcher reads
//! the subscription's record afresh before each receive and ends its work on settings that
//! differ (`Queues::current_for_push`), so every batch received after the rotation's record
//! write is signed with both secrets. A batch whose receive read the record before it (a
//! long poll under way) goes out signed with the old secret alone, which receivers accept
//! throughout the overlap: the late switch costs liveness, never a refused delivery, as
//! long as the overlap outlasts a receive. A second rotation within the overlap replaces
//! the previous secret: only the last two sign.

use serde::{Deserialize, Serialize};

use super::push::{check_secret, generated_secret};
use super::*;
use crate::Code;

/// How long the replaced secret keeps signing: by default, and at most.
pub const DEFAULT_SECRET_OVERLAP_MS: u64 = 24 * 3_600_000;
pub const MAX_SECRET_OVERLAP_MS: u64 = 7 * 24 * 3_600_000;

/// A secret a rotation replaced: it signs beside the new one until `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousSecret {
    pub secret: String,
    pub expires_ms: i64,
}

/// A rotation as asked: the new secret (generated if not given) and how long the old one
/// keeps signing ([`DEFAULT_SECRET_OVERLAP_MS`] if not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretRotation {
    pub secret: Option<String>,
    pub overlap_ms: Option<u64>,
}

/// A rotation's answer: the secret that signs from now on (shown here only), and when the
/// one it replaced stops signing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    pub secret: String,
    pub previous_expires_ms: i64,
}

impl SecretRotation {
    /// Checks what was asked, before anything is read.
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.overlap_ms.is_some_and(|ms| ms > MAX_SECRET_OVERLAP_MS) {
            return Err(Error::invalid(
                Code::InvalidPush,
                format!("overlap_ms must be at most {MAX_SECRET_OVERLAP_MS} (7 days)"),
            ));
        }
        self.secret.as_deref().map_or(Ok(()), |s| check_secret("secret", s))
    }
}

impl PushSpec {
    /// The secrets that sign a delivery made at `now_ms`: the current one, then the one a
    /// rotation replaced while its overlap lasts. None for a Lambda target.
    pub fn signing_secrets(&self, now_ms: i64) -> Vec<&str> {
        let Some(current) = self.secret() else { return Vec::new() };
        let previous = self.previous_secret.as_ref().filter(|p| now_ms < p.expires_ms);
        std::iter::once(current).chain(previous.map(|p| p.secret.as_str())).collect()
    }
}

/// What a rotation does to a push target.
#[derive(Debug, PartialEq)]
enum Planned {
    /// The given secret already signs (a retry of this rotation): nothing changes.
    Same(Rotated),
    Rotate(PushSpec, Rotated),
}

fn not_signed(why: &str) -> Error {
    Error::invalid(Code::InvalidRequest, format!("only a push subscription to a URL has a secret: {why}"))
}

/// The push settings `push` becomes under `rotation` at `now_ms`.
fn plan(
    push: &PushSpec,
    rotation: &SecretRotation,
    now_ms: i64,
    random: impl FnMut() -> u64,
) -> Result<Planned, Error> {
    let PushTarget::Url { secret: current, .. } = &push.target else {
        return Err(not_signed("this subscription pushes to a function"));
    };
    if rotation.secret.as_ref() == Some(current) {
        let previous_expires_ms = push.previous_secret.as_ref().map_or(now_ms, |p| p.expires_ms);
        return Ok(Planned::Same(Rotated { secret: current.clone(), previous_expires_ms }));
    }
    let overlap_ms = rotation.overlap_ms.unwrap_or(DEFAULT_SECRET_OVERLAP_MS).min(MAX_SECRET_OVERLAP_MS);
    let new = rotation.secret.clone().unwrap_or_else(|| generated_secret(random));
    let previous = PreviousSecret { secret: current.clone(), expires_ms: now_ms.saturating_add(overlap_ms as i64) };
    let rotated = Rotated { secret: new.clone(), previous_expires_ms: previous.expires_ms };
    let mut push = push.clone();
    if let PushTarget::Url { secret, .. } = &mut push.target {
        *secret = new;
    }
    push.previous_secret = Some(previous);
    Ok(Planned::Rotate(push, rotated))
}

impl Queues {
    /// Rotates a push subscription's signing secret: answers the new one (shown only
    /// here); the replaced one signs beside it until the overlap ends. Given the secret
    /// that already signs, answers as the rotation that set it did (a retry is safe).
    pub async fn rotate_secret(&self, topic: &str, name: &str, rotation: &SecretRotation) -> Result<Rotated, Error> {
        rotation.validate()?;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let sub = self.sub(topic, name).await?;
            let Some(push) = &sub.record.spec.push else {
                return Err(not_signed("this is a pull subscription"));
            };
            let (push, rotated) = match plan(push, rotation, self.now(), || self.nonce())? {
                Planned::Same(rotated) => return Ok(rotated),
                Planned::Rotate(push, rotated) => (push, rotated),
            };
            let spec = SubscriptionSpec { push: Some(push), ..sub.record.spec.clone() };
            let record = SubscriptionRecord { spec, ..sub.record.clone() };
            let key = crate::keys::subscription_key(sub.topic.id, name);
            match self.store().write(vec![WriteOp::replace(key, layout::encode(&record), Some(sub.version))]).await {
                Ok(()) => {
                    self.forget_sub(topic, name);
                    let expires_ms = rotated.previous_expires_ms;
                    tracing::info!(topic, subscription = name, previous_expires_ms = expires_ms, "push secret rotated");
                    return Ok(rotated);
                }
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;

    use super::*;

    fn key_of(byte: u8) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode([byte; 24]))
    }

    fn url(previous: Option<PreviousSecret>) -> PushSpec {
        PushSpec { previous_secret: previous, ..PushSpec::url("https://example.com/", Some(key_of(1))) }
    }

    fn rotation(secret: Option<String>, overlap_ms: Option<u64>) -> SecretRotation {
        SecretRotation { secret, overlap_ms }
    }

    fn rotated(secret: String, previous: Option<(String, i64)>) -> PushSpec {
        let previous = previous.map(|(secret, expires_ms)| PreviousSecret { secret, expires_ms });
        PushSpec { previous_secret: previous, ..PushSpec::url("https://example.com/", Some(secret)) }
    }

    #[test]
    fn a_rotation_keeps_the_replaced_secret_for_the_overlap_and_a_retry_changes_nothing() {
        let generated = generated_secret(|| 5);
        let day = DEFAULT_SECRET_OVERLAP_MS as i64;
        let before = Some(PreviousSecret { secret: key_of(0), expires_ms: 50 });
        // (stored, asked, now) → the settings written and the answer, or `Same`.
        let cases = [
            (
                url(None),
                rotation(None, None),
                1_000,
                Some((rotated(generated.clone(), Some((key_of(1), 1_000 + day))), generated.clone(), 1_000 + day)),
            ),
            (
                url(None),
                rotation(Some(key_of(2)), Some(0)),
                1_000,
                Some((rotated(key_of(2), Some((key_of(1), 1_000))), key_of(2), 1_000)),
            ),
            // A second rotation replaces the previous secret.
            (
                url(before.clone()),
                rotation(Some(key_of(2)), Some(10)),
                1_000,
                Some((rotated(key_of(2), Some((key_of(1), 1_010))), key_of(2), 1_010)),
            ),
            // The secret that signs already: a retry, answered as the rotation was.
            (url(before.clone()), rotation(Some(key_of(1)), Some(10)), 1_000, None),
        ];
        for (stored, asked, now, want) in cases {
            let got = plan(&stored, &asked, now, || 5).unwrap();
            let want = match want {
                Some((push, secret, previous_expires_ms)) => {
                    Planned::Rotate(push, Rotated { secret, previous_expires_ms })
                }
                None => Planned::Same(Rotated { secret: key_of(1), previous_expires_ms: 50 }),
            };
            assert_eq!(got, want, "{asked:?} at {now}");
        }
        let lambda = plan(&PushSpec::lambda("f"), &rotation(None, None), 0, || 5);
        assert!(matches!(lambda, Err(Error::Invalid { code: Code::InvalidRequest, .. })), "{lambda:?}");
    }

    #[test]
    fn bad_rotations_are_refused_saying_why() {
        let cases = [
            (rotation(None, Some(MAX_SECRET_OVERLAP_MS + 1)), "overlap_ms must be at most"),
            (rotation(Some("abc".into()), None), "secret must start with \"whsec_\""),
            (rotation(Some("whsec_AAAA".into()), None), "secret must hold a key of 24 to 64 bytes"),
        ];
        for (asked, why) in cases {
            let err = asked.validate().expect_err(why).to_string();
            assert!(err.contains(why), "{err} should say {why}");
        }
        rotation(Some(key_of(3)), Some(MAX_SECRET_OVERLAP_MS)).validate().unwrap();
        rotation(None, None).validate().unwrap();
    }

    #[test]
    fn the_replaced_secret_signs_until_its_expiry_only() {
        let push = rotated(key_of(2), Some((key_of(1), 1_000)));
        let (new, old) = (key_of(2), key_of(1));
        assert_eq!(push.signing_secrets(999), vec![new.as_str(), old.as_str()]);
        assert_eq!(push.signing_secrets(1_000), vec![new.as_str()]);
        assert_eq!(url(None).signing_secrets(0), vec![old.as_str()]);
        assert!(PushSpec::lambda("f").signing_secrets(0).is_empty());
    }
}
