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
    /// 403: a valid token that may not do this (a tenant's token on the admin API).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such job for this tenant (other tenants' jobs are not found either).
    #[error("job {0} not found")]
    NotFound(String),
    /// 404: the console watches no such consumer group.
    #[error("group {0} is not watched by the console (ingest --console-group)")]
    UnknownGroup(String),
    /// 409: the operation is already running (a DLQ redrive of the same group).
    #[error("{0}")]
    Conflict(String),
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
    /// 408: the body did not arrive within the body timeout.
    #[error("the request body did not arrive within {}s", .0.as_secs())]
    BodyTimeout(std::time::Duration),
    /// 503: as many uploads as allowed are being received; retry shortly.
    #[error("too many uploads in progress; retry shortly")]
    Busy,
    /// 415: not a PDF, PNG, JPEG or TIFF.
    #[error("unsupported document type: only PDF, PNG, JPEG and TIFF are accepted")]
    UnsupportedType,
    /// 422: a PDF that fails the sanity check.
    #[error("invalid PDF: {0}")]
    InvalidPdf(#[from] crate::sniff::PdfError),
    /// 503: the broker, registry, database or object store is unavailable; retry later.
    #[error("temporarily unavailable: {dependency}: {source}")]
    Unavailable {
        /// Which dependency (`database`, `broker`, `schema registry`, `object store`).
        dependency: &'static str,
        /// Its error.
        #[source]
        source: Cause,
    },
    /// 500: a dependency refused what it should have taken (a bad query, an encoding bug).
    #[error("internal error: {what}: {source}")]
    Failed {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: Cause,
    },
    /// 500: an invariant does not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The error of a dependency, kept as the source of an [`ApiError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

impl ApiError {
    /// 503 for `dependency`, keeping its error.
    pub fn unavailable(dependency: &'static str, source: impl Into<Cause>) -> Self {
        ApiError::Unavailable {
            dependency,
            source: source.into(),
        }
    }

    /// 500 while doing `what`, keeping the error.
    pub fn failed(what: &'static str, source: impl Into<Cause>) -> Self {
        ApiError::Failed {
            what,
            source: source.into(),
        }
    }
}

impl ApiError {
    /// HTTP status and the stable error code of the body.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NotReady(_) => (StatusCode::NOT_FOUND, "not_ready"),
            ApiError::UnknownGroup(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::UnsupportedType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_type"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            ApiError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            ApiError::InvalidPdf(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_pdf"),
            ApiError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Failed { .. } | ApiError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if docflow_store::is_unavailable(&e) {
            ApiError::unavailable("database", e)
        } else {
            ApiError::failed("database", e)
        }
    }
}

impl From<docflow_store::StoreError> for ApiError {
    fn from(e: docflow_store::StoreError) -> Self {
        if e.is_unavailable() {
            ApiError::unavailable("database", e)
        } else {
            ApiError::failed("database", e)
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
        if matches!(self, ApiError::Busy) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        } else if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still come: this connection is done.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
