//! Registry errors with Confluent's HTTP statuses and error codes, so every Confluent client
//! (Java, librdkafka's libserdes, schema_registry_converter) understands them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use docflow_store::StoreError;

/// Everything a registry request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// 40401.
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    /// 40402.
    #[error("Version {version} not found.")]
    VersionNotFound {
        /// Version asked for.
        version: String,
    },
    /// 40403.
    #[error("Schema {0} not found")]
    SchemaNotFound(String),
    /// 40403 from a lookup: the schema is not registered under the subject.
    #[error("Schema not found")]
    SchemaNotRegistered,
    /// 40404.
    #[error("Subject '{0}' was soft deleted. Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    /// 40405.
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    /// 40406.
    #[error(
        "Subject '{subject}' Version {version} was soft deleted. Set permanent=true to delete permanently"
    )]
    VersionSoftDeleted {
        /// Subject.
        subject: String,
        /// Version.
        version: i64,
    },
    /// 40407.
    #[error(
        "Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )]
    VersionNotSoftDeleted {
        /// Subject.
        subject: String,
        /// Version.
        version: i64,
    },
    /// 40408.
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectLevelNotConfigured(String),
    /// 409.
    #[error("Schema being registered is incompatible with an earlier schema for subject \"{subject}\": {}", reasons.join("; "))]
    Incompatible {
        /// Subject.
        subject: String,
        /// Why.
        reasons: Vec<String>,
    },
    /// 42201.
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    /// 42202.
    #[error(
        "The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
    )]
    InvalidVersion(String),
    /// 42203.
    #[error(
        "Invalid compatibility level. Valid values are NONE, BACKWARD, FORWARD, FULL, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, and FULL_TRANSITIVE: {0:?}"
    )]
    InvalidCompatibilityLevel(String),
    /// 42206.
    #[error(
        "One or more references exist to the schema {{subject='{subject}', version={version}}}: schema ids {ids:?}"
    )]
    ReferenceExists {
        /// Subject.
        subject: String,
        /// Version.
        version: i64,
        /// Schemas that refer to it.
        ids: Vec<i64>,
    },
    /// 400: a query parameter has a value the endpoint cannot take.
    #[error("Bad query parameter {name}={value:?}: {expected}")]
    BadQuery {
        /// Parameter.
        name: String,
        /// Value as sent.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// 404 (`error_code` 404): a schema id that is not a number a schema could have (not
    /// an integer, or past 2^31-1), answered as Confluent's JAX-RS path conversion does.
    #[error("HTTP 404 Not Found")]
    IdNotANumber,
    /// 404: no such endpoint.
    #[error("HTTP 404 Not Found: no endpoint {0}")]
    NoSuchEndpoint(String),
    /// 405: the endpoint exists, the method does not.
    #[error("HTTP 405 Method Not Allowed: {0}")]
    MethodNotAllowed(String),
    /// 406: no media type the client accepts.
    #[error(
        "HTTP 406 Not Acceptable: {0:?}; this registry answers application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json or application/json"
    )]
    NotAcceptable(String),
    /// 42204.
    #[error("Invalid mode {0:?}: this registry runs READWRITE only")]
    InvalidMode(String),
    /// 422: the request body is not the JSON the endpoint takes.
    #[error("Unprocessable request body: {0}")]
    BadBody(String),
    /// 415.
    #[error(
        "Unsupported content type {0:?}; use application/vnd.schemaregistry.v1+json or application/json"
    )]
    UnsupportedMediaType(String),
    /// 50001 as 503: the database cannot be reached.
    #[error("Error in the backend data store: unavailable: {0}")]
    StoreUnavailable(#[source] StoreError),
    /// 50001.
    #[error("Error in the backend data store: {0}")]
    Store(#[source] StoreError),
}

impl From<StoreError> for RegistryError {
    fn from(e: StoreError) -> Self {
        if e.is_unavailable() {
            RegistryError::StoreUnavailable(e)
        } else {
            RegistryError::Store(e)
        }
    }
}

impl From<sqlx::Error> for RegistryError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::from(e).into()
    }
}

impl RegistryError {
    /// HTTP status and Confluent error code.
    pub fn status_and_code(&self) -> (StatusCode, u32) {
        use RegistryError::*;
        match self {
            SubjectNotFound(_) => (StatusCode::NOT_FOUND, 40401),
            VersionNotFound { .. } => (StatusCode::NOT_FOUND, 40402),
            SchemaNotFound(_) | SchemaNotRegistered => (StatusCode::NOT_FOUND, 40403),
            SubjectSoftDeleted(_) => (StatusCode::NOT_FOUND, 40404),
            SubjectNotSoftDeleted(_) => (StatusCode::NOT_FOUND, 40405),
            VersionSoftDeleted { .. } => (StatusCode::NOT_FOUND, 40406),
            VersionNotSoftDeleted { .. } => (StatusCode::NOT_FOUND, 40407),
            SubjectLevelNotConfigured(_) => (StatusCode::NOT_FOUND, 40408),
            Incompatible { .. } => (StatusCode::CONFLICT, 409),
            InvalidSchema(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42201),
            InvalidVersion(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42202),
            InvalidCompatibilityLevel(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42203),
            ReferenceExists { .. } => (StatusCode::UNPROCESSABLE_ENTITY, 42206),
            InvalidMode(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42204),
            BadQuery { .. } => (StatusCode::BAD_REQUEST, 400),
            NoSuchEndpoint(_) | IdNotANumber => (StatusCode::NOT_FOUND, 404),
            MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, 405),
            NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, 406),
            BadBody(_) => (StatusCode::UNPROCESSABLE_ENTITY, 422),
            UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, 415),
            StoreUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 50001),
            Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, 50001),
        }
    }
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(error = %self, "registry request failed");
        }
        let body = serde_json::json!({"error_code": code, "message": self.to_string()});
        let mut resp = crate::response::json(status, &body);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("5"),
            );
        }
        resp
    }
}
