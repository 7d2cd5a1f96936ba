//! The Confluent REST subset over [`Store`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use docflow_events::CompatibilityLevel;
use serde::Deserialize;
use serde_json::json;

use crate::error::RegistryError;
use crate::store::{CandidateSchema, Store, SubjectVersion, VersionRef};

pub use crate::response::CONTENT_TYPE;
use crate::response::json;

const ACCEPTED_CONTENT_TYPES: [&str; 4] = [
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
];

type Shared = State<Arc<Store>>;
type ApiResult = Result<Response, RegistryError>;

fn ok(body: serde_json::Value) -> ApiResult {
    Ok(json(StatusCode::OK, &body))
}

/// The registry's routes.
pub fn router(store: Arc<Store>) -> Router {
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
        .with_state(store)
}

#[derive(Debug, Default, Deserialize)]
struct Flags {
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    permanent: bool,
    #[serde(default)]
    verbose: bool,
    #[serde(default, rename = "defaultToGlobal")]
    default_to_global: bool,
}

#[derive(Debug, Deserialize)]
struct SchemaRequest {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct ConfigRequest {
    compatibility: String,
}

fn check_content_type(headers: &HeaderMap) -> Result<(), RegistryError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct.to_str().unwrap_or("");
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if ACCEPTED_CONTENT_TYPES.contains(&essence.as_str()) {
        Ok(())
    } else {
        Err(RegistryError::UnsupportedMediaType(ct.to_owned()))
    }
}

fn body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<T, RegistryError> {
    check_content_type(headers)?;
    serde_json::from_slice(bytes).map_err(|e| RegistryError::BadBody(e.to_string()))
}

fn candidate(headers: &HeaderMap, bytes: &Bytes) -> Result<CandidateSchema, RegistryError> {
    let req: SchemaRequest = body(headers, bytes)?;
    if !req.references.is_empty() {
        return Err(RegistryError::InvalidSchema(
            "schema references are not supported by this registry".to_owned(),
        ));
    }
    CandidateSchema::parse(&req.schema, req.schema_type.as_deref())
}

fn parse_id(id: &str) -> Result<i64, RegistryError> {
    id.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| RegistryError::SchemaNotFound(id.to_owned()))
}

fn version_json(v: &SubjectVersion) -> serde_json::Value {
    json!({"subject": v.subject, "version": v.version, "id": v.id, "schema": v.schema})
}

fn raw(text: String) -> ApiResult {
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

async fn schema_by_id(State(s): Shared, Path(id): Path<String>) -> ApiResult {
    let schema = s.schema_by_id(parse_id(&id)?).await?;
    ok(json!({"schema": schema}))
}

async fn raw_schema_by_id(State(s): Shared, Path(id): Path<String>) -> ApiResult {
    raw(s.schema_by_id(parse_id(&id)?).await?)
}

async fn versions_of_id(
    State(s): Shared,
    Path(id): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let pairs = s.subject_versions_of_id(parse_id(&id)?, f.deleted).await?;
    ok(pairs
        .into_iter()
        .map(|(subject, version)| json!({"subject": subject, "version": version}))
        .collect())
}

async fn subjects_of_id(
    State(s): Shared,
    Path(id): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let mut subjects: Vec<String> = s
        .subject_versions_of_id(parse_id(&id)?, f.deleted)
        .await?
        .into_iter()
        .map(|(subject, _)| subject)
        .collect();
    subjects.dedup();
    ok(json!(subjects))
}

async fn subjects(State(s): Shared, Query(f): Query<Flags>) -> ApiResult {
    ok(json!(s.subjects(f.deleted).await?))
}

async fn versions(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let v: Vec<i64> = s
        .versions(&subject, f.deleted)
        .await?
        .iter()
        .map(|v| v.version)
        .collect();
    ok(json!(v))
}

async fn version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    ok(version_json(&v))
}

async fn raw_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    raw(v.schema)
}

async fn register(
    State(s): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&headers, &bytes)?;
    let id = s.register(&subject, &schema).await?;
    ok(json!({"id": id}))
}

async fn lookup(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&headers, &bytes)?;
    let v = s.lookup(&subject, &schema, f.deleted).await?;
    ok(version_json(&v))
}

async fn delete_subject(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    ok(json!(s.delete_subject(&subject, f.permanent).await?))
}

async fn delete_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
) -> ApiResult {
    let n = s
        .delete_version(&subject, VersionRef::parse(&version)?, f.permanent)
        .await?;
    ok(json!(n))
}

fn compat_response(reasons: Vec<String>, verbose: bool) -> ApiResult {
    if verbose {
        ok(json!({"is_compatible": reasons.is_empty(), "messages": reasons}))
    } else {
        ok(json!({"is_compatible": reasons.is_empty()}))
    }
}

async fn check_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query<Flags>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let against = VersionRef::parse(&version)?;
    let schema = candidate(&headers, &bytes)?;
    compat_response(s.check(&subject, Some(against), &schema).await?, f.verbose)
}

async fn check_all(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&headers, &bytes)?;
    compat_response(s.check(&subject, None, &schema).await?, f.verbose)
}

fn parse_level(headers: &HeaderMap, bytes: &Bytes) -> Result<CompatibilityLevel, RegistryError> {
    let req: ConfigRequest = body(headers, bytes)?;
    req.compatibility
        .parse()
        .map_err(|_| RegistryError::InvalidCompatibilityLevel(req.compatibility.clone()))
}

async fn get_global(State(s): Shared) -> ApiResult {
    ok(json!({"compatibilityLevel": s.level(None).await?.as_str()}))
}

async fn put_global(State(s): Shared, headers: HeaderMap, bytes: Bytes) -> ApiResult {
    let level = parse_level(&headers, &bytes)?;
    s.set_level(None, level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

async fn delete_global(State(s): Shared) -> ApiResult {
    let before = s.clear_level(None).await?;
    let level = match before {
        Some(l) => l,
        None => s.level(None).await?,
    };
    ok(json!({"compatibilityLevel": level.as_str()}))
}

async fn get_subject_config(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query<Flags>,
) -> ApiResult {
    match s.subject_level(&subject).await? {
        Some(l) => ok(json!({"compatibilityLevel": l.as_str()})),
        None if f.default_to_global => {
            ok(json!({"compatibilityLevel": s.level(None).await?.as_str()}))
        }
        None => Err(RegistryError::SubjectLevelNotConfigured(subject)),
    }
}

async fn put_subject_config(
    State(s): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let level = parse_level(&headers, &bytes)?;
    s.set_level(Some(&subject), level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

async fn delete_subject_config(State(s): Shared, Path(subject): Path<String>) -> ApiResult {
    match s.clear_level(Some(&subject)).await? {
        Some(l) => ok(json!({"compatibilityLevel": l.as_str()})),
        None => Err(RegistryError::SubjectLevelNotConfigured(subject)),
    }
}
