//! The shape of every answer: JSON with the registry's content type. Both the routes and the
//! errors build their responses here, so neither depends on the other.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Content type of every response, as Confluent's registry answers.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A JSON response with the registry content type.
pub(crate) fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        Body::from(body.to_string()),
    )
        .into_response()
}
