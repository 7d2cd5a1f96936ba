//! The Confluent REST subset over [`Store`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::error::RegistryError;
use crate::references::SchemaReference;
use crate::store::Store;

pub use crate::response::CONTENT_TYPE;
use crate::response::json;

mod config;
mod request;
mod schemas;
mod subjects;

use config::{
    check_all, check_version, delete_global, delete_subject_config, get_global, get_mode,
    get_subject_config, put_global, put_mode, put_subject_config,
};
use schemas::{raw_schema_by_id, schema_by_id, subjects_of_id, versions_of_id};
use subjects::{
    delete_subject, delete_version, lookup, raw_version, referenced_by, register, subjects,
    version, versions,
};

/// Media types a response can be sent as, in the order this registry prefers them.
const RESPONSE_TYPES: [&str; 3] = [
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
];

type Shared = State<Arc<Store>>;
type ApiResult = Result<Response, RegistryError>;

fn ok(body: serde_json::Value) -> ApiResult {
    Ok(json(StatusCode::OK, &body))
}

/// Adds `references` to a schema answer when there are any (Confluent leaves it out
/// otherwise).
fn with_references(out: &mut serde_json::Value, references: &[SchemaReference]) {
    if !references.is_empty() {
        out["references"] = json!(references);
    }
}

fn raw(text: String) -> ApiResult {
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

/// The registry's routes, with Confluent's edges: JSON errors for unknown paths and methods,
/// content negotiation on `Accept`.
pub fn router(store: Arc<Store>) -> Router {
    routes()
        .fallback(|uri: Uri| async move { RegistryError::NoSuchEndpoint(uri.path().to_owned()) })
        .method_not_allowed_fallback(|req: Request| async move {
            RegistryError::MethodNotAllowed(format!("{} {}", req.method(), req.uri().path()))
        })
        .layer(middleware::from_fn(negotiate))
        .with_state(store)
}

/// Drops a trailing slash (`/subjects/` is `/subjects`), as Confluent's registry does; the
/// router never sees one. Used in front of [`router`] by [`crate::serve`].
pub fn trim_trailing_slash(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        let pq = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_owned(),
        };
        let mut parts = req.uri().clone().into_parts();
        if let Ok(pq) = pq.parse() {
            parts.path_and_query = Some(pq);
            if let Ok(uri) = Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
    req
}

/// Picks the response media type from `Accept` (406 when none fits) and labels the answer
/// with it.
async fn negotiate(req: Request, next: Next) -> Response {
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
    let chosen = match accept.as_deref() {
        None => RESPONSE_TYPES[0],
        Some(a) => match choose_media_type(a) {
            Some(t) => t,
            None => return RegistryError::NotAcceptable(a.to_owned()).into_response(),
        },
    };
    let mut resp = next.run(req).await;
    if chosen != CONTENT_TYPE
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.as_bytes())
            == Some(CONTENT_TYPE.as_bytes())
    {
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(chosen));
    }
    resp
}

/// The media type to answer with for an `Accept` header: the acceptable range with the
/// highest quality (ties: the client's order), `*/*` and `application/*` meaning the
/// registry's own type. `None` when nothing the registry sends is acceptable.
pub fn choose_media_type(accept: &str) -> Option<&'static str> {
    let mut best: Option<(f32, &'static str)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in parts {
            if let Some((k, v)) = p.split_once('=')
                && k.trim().eq_ignore_ascii_case("q")
            {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if q <= 0.0 || essence.is_empty() {
            continue;
        }
        let t = match essence.as_str() {
            "*/*" | "application/*" => Some(RESPONSE_TYPES[0]),
            e => RESPONSE_TYPES.iter().copied().find(|t| *t == e),
        };
        if let Some(t) = t
            && best.is_none_or(|(bq, _)| q > bq)
        {
            best = Some((q, t));
        }
    }
    best.map(|(_, t)| t)
}

fn routes() -> Router<Arc<Store>> {
    Router::new()
        .route("/", get(|| async { json(StatusCode::OK, &json!({})) }))
        .route(
            "/schemas/types",
            get(|| async { json(StatusCode::OK, &json!(["AVRO"])) }),
        )
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_of_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_of_id))
        .route("/subjects", get(subjects))
        .route(
            "/subjects/{subject}",
            axum::routing::post(lookup).delete(delete_subject),
        )
        .route("/subjects/{subject}/versions", get(versions).post(register))
        .route(
            "/subjects/{subject}/versions/{version}",
            get(version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(raw_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/referencedby",
            get(referenced_by),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            axum::routing::post(check_version),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            axum::routing::post(check_all),
        )
        .route(
            "/config",
            get(get_global).put(put_global).delete(delete_global),
        )
        .route(
            "/config/{subject}",
            get(get_subject_config)
                .put(put_subject_config)
                .delete(delete_subject_config),
        )
        .route("/mode", get(get_mode).put(put_mode))
        .route("/mode/{subject}", get(get_mode).put(put_mode))
}
