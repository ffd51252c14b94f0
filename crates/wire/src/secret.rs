//! Rotating a push subscription's signing secret on the wire: `POST …/secret`.

use serde::{Deserialize, Serialize};

/// `POST …/secret`: the new secret, and how long the one it replaces keeps signing beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// `whsec_` and the base64 of a 24- to 64-byte key; generated if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^whsec_"))]
    pub secret: Option<String>,
    /// How long the old secret keeps signing: 0 to 604800000 (7 days), 86400000 (24 h) if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 604800000))]
    pub overlap_ms: Option<u64>,
}

/// What a rotation answers: the secret that signs from now on (shown only here), and when
/// the one it replaced stops signing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretRotated {
    pub secret: String,
    pub previous_expires_ms: i64,
}
