//! Path parameters, refused as every bad request is: a `400` with a JSON error (axum's own
//! extractor answers plain text, e.g. for a segment that is not UTF-8 after decoding).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use sluice_core::Code;

use crate::ApiError;

/// [`axum::extract::Path`] with a JSON `400 invalid_path` rejection.
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::bad_request(Code::InvalidPath, rejection.body_text())),
        }
    }
}
