//! API errors: JSON `{"error": code, "message": ...}` with the status that fits.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Everything a request can fail with; each says who is at fault.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: no or unknown bearer token.
    #[error("missing or unknown bearer token")]
    Unauthorized,
    /// 404: no such job for this tenant (other tenants' jobs are not found either).
    #[error("job {0} not found")]
    NotFound(String),
    /// 404: the job exists but the asked-for result is not there yet (or its stage failed).
    #[error("{0}")]
    NotReady(String),
    /// 400: malformed request.
    #[error("{0}")]
    BadRequest(String),
    /// 413: over the size limit.
    #[error("document is larger than the {limit} byte limit")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// 415: not a PDF, PNG, JPEG or TIFF.
    #[error("unsupported document type: only PDF, PNG, JPEG and TIFF are accepted")]
    UnsupportedType,
    /// 422: a PDF that fails the sanity check.
    #[error("invalid PDF: {0}")]
    InvalidPdf(#[from] crate::sniff::PdfError),
    /// 503: the broker, registry, database or object store is unavailable; retry later.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    /// 500.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// HTTP status and the stable error code of the body.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NotReady(_) => (StatusCode::NOT_FOUND, "not_ready"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::UnsupportedType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_type"),
            ApiError::InvalidPdf(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_pdf"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if docflow_store::is_unavailable(&e) {
            ApiError::Unavailable(format!("database: {e}"))
        } else {
            ApiError::Internal(format!("database: {e}"))
        }
    }
}

impl From<docflow_store::StoreError> for ApiError {
    fn from(e: docflow_store::StoreError) -> Self {
        if e.is_unavailable() {
            ApiError::Unavailable(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut resp = (
            status,
            axum::Json(json!({"error": code, "message": self.to_string()})),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
