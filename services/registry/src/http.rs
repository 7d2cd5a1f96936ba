//! The Confluent REST subset over [`Store`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use docflow_events::CompatibilityLevel;
use serde::Deserialize;
use serde_json::json;

use crate::error::RegistryError;
use crate::references::SchemaReference;
use crate::store::{CandidateSchema, Store, SubjectVersion, VersionRef};

pub use crate::response::CONTENT_TYPE;
use crate::response::json;

const ACCEPTED_CONTENT_TYPES: [&str; 4] = [
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
];

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

/// The query parameters. Booleans parse whatever their case (`true`, `True`, `TRUE`:
/// Confluent's Python client sends `?deleted=False`); `offset`/`limit` page a list (`limit`
/// -1: all); `subjectPrefix` filters subjects; `deletedOnly` (also `deleted_only`, as the
/// Python client spells it) lists only soft-deleted entries. Other parameters (`normalize`,
/// `format`, `subject`...) are accepted and change nothing here.
#[derive(Debug)]
struct Flags {
    deleted: bool,
    deleted_only: bool,
    permanent: bool,
    verbose: bool,
    default_to_global: bool,
    offset: usize,
    limit: Option<usize>,
    subject_prefix: Option<String>,
}

impl Flags {
    fn parse(query: Option<&str>) -> Result<Self, RegistryError> {
        let mut f = Flags {
            deleted: false,
            deleted_only: false,
            permanent: false,
            verbose: false,
            default_to_global: false,
            offset: 0,
            limit: None,
            subject_prefix: None,
        };
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match name.as_ref() {
                "offset" => {
                    f.offset = parse_number(&name, &value)?.max(0).try_into().unwrap_or(0);
                }
                "limit" => {
                    let n = parse_number(&name, &value)?;
                    f.limit = usize::try_from(n).ok().filter(|_| n >= 0);
                }
                "subjectPrefix" => f.subject_prefix = Some(value.into_owned()),
                "deleted" => f.deleted = parse_bool(&name, &value)?,
                "deletedOnly" | "deleted_only" => f.deleted_only = parse_bool(&name, &value)?,
                "permanent" => f.permanent = parse_bool(&name, &value)?,
                "verbose" => f.verbose = parse_bool(&name, &value)?,
                "defaultToGlobal" => f.default_to_global = parse_bool(&name, &value)?,
                _ => {}
            }
        }
        Ok(f)
    }

    /// Whether soft-deleted entries are read at all.
    fn with_deleted(&self) -> bool {
        self.deleted || self.deleted_only
    }

    /// One page of `items`.
    fn page<T>(&self, items: Vec<T>) -> Vec<T> {
        let rest = items.into_iter().skip(self.offset);
        match self.limit {
            Some(n) => rest.take(n).collect(),
            None => rest.collect(),
        }
    }
}

fn parse_number(name: &str, value: &str) -> Result<i64, RegistryError> {
    value.trim().parse().map_err(|_| RegistryError::BadQuery {
        name: name.to_owned(),
        value: value.to_owned(),
        expected: "an integer",
    })
}

fn parse_bool(name: &str, value: &str) -> Result<bool, RegistryError> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") || value.is_empty() {
        Ok(false)
    } else {
        Err(RegistryError::BadQuery {
            name: name.to_owned(),
            value: value.to_owned(),
            expected: "true or false",
        })
    }
}

/// The query flags of a request, refused as a JSON 400 when one is not a boolean.
struct Query(Flags);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Query {
    type Rejection = RegistryError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Flags::parse(parts.uri.query()).map(Query)
    }
}

#[derive(Debug, Deserialize)]
struct SchemaRequest {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    /// `null`, absent and `[]` all mean none.
    #[serde(default)]
    references: Option<Vec<SchemaReference>>,
}

#[derive(Debug, Deserialize)]
struct ConfigRequest {
    compatibility: String,
}

/// How a request body's text is encoded, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charset {
    Utf8,
    /// ISO-8859-1 and its subset US-ASCII: one byte, one code point.
    Latin1,
}

fn check_content_type(headers: &HeaderMap) -> Result<Charset, RegistryError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(Charset::Utf8);
    };
    let ct = ct.to_str().unwrap_or("");
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    if !ACCEPTED_CONTENT_TYPES.contains(&essence.as_str()) {
        return Err(RegistryError::UnsupportedMediaType(ct.to_owned()));
    }
    let mut charset = Charset::Utf8;
    for p in parts {
        if let Some((k, v)) = p.split_once('=')
            && k.trim().eq_ignore_ascii_case("charset")
        {
            let v = v.trim().trim_matches('"').to_ascii_lowercase();
            charset = match v.as_str() {
                "utf-8" | "utf8" => Charset::Utf8,
                "iso-8859-1" | "latin1" | "latin-1" | "us-ascii" | "ascii" => Charset::Latin1,
                _ => return Err(RegistryError::UnsupportedMediaType(ct.to_owned())),
            };
        }
    }
    Ok(charset)
}

fn body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<T, RegistryError> {
    let parsed = match check_content_type(headers)? {
        Charset::Utf8 => serde_json::from_slice(bytes),
        Charset::Latin1 => {
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            serde_json::from_str(&text)
        }
    };
    parsed.map_err(|e| RegistryError::BadBody(e.to_string()))
}

async fn candidate(
    store: &Store,
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<CandidateSchema, RegistryError> {
    let req: SchemaRequest = body(headers, bytes)?;
    store
        .candidate(
            &req.schema,
            req.schema_type.as_deref(),
            req.references.unwrap_or_default(),
        )
        .await
}

fn parse_id(id: &str) -> Result<i64, RegistryError> {
    id.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| RegistryError::SchemaNotFound(id.to_owned()))
}

fn version_json(v: &SubjectVersion) -> serde_json::Value {
    let mut out =
        json!({"subject": v.subject, "version": v.version, "id": v.id, "schema": v.schema});
    with_references(&mut out, &v.references);
    out
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

async fn schema_by_id(State(s): Shared, Path(id): Path<String>, _: Query) -> ApiResult {
    let (schema, references) = s.schema_by_id(parse_id(&id)?).await?;
    let mut out = json!({"schema": schema});
    with_references(&mut out, &references);
    ok(out)
}

async fn raw_schema_by_id(State(s): Shared, Path(id): Path<String>, _: Query) -> ApiResult {
    raw(s.schema_by_id(parse_id(&id)?).await?.0)
}

async fn versions_of_id(State(s): Shared, Path(id): Path<String>, Query(f): Query) -> ApiResult {
    let pairs = s.subject_versions_of_id(parse_id(&id)?, f.deleted).await?;
    ok(f.page(pairs)
        .into_iter()
        .map(|(subject, version)| json!({"subject": subject, "version": version}))
        .collect())
}

async fn subjects_of_id(State(s): Shared, Path(id): Path<String>, Query(f): Query) -> ApiResult {
    let mut subjects: Vec<String> = s
        .subject_versions_of_id(parse_id(&id)?, f.deleted)
        .await?
        .into_iter()
        .map(|(subject, _)| subject)
        .collect();
    subjects.dedup();
    ok(json!(f.page(subjects)))
}

async fn subjects(State(s): Shared, Query(f): Query) -> ApiResult {
    let mut subjects = s.subjects(f.with_deleted()).await?;
    if f.deleted_only {
        let live = s.subjects(false).await?;
        subjects.retain(|x| !live.contains(x));
    }
    if let Some(prefix) = &f.subject_prefix {
        subjects.retain(|x| x.starts_with(prefix.as_str()));
    }
    ok(json!(f.page(subjects)))
}

async fn versions(State(s): Shared, Path(subject): Path<String>, Query(f): Query) -> ApiResult {
    let v: Vec<i64> = s
        .versions(&subject, f.with_deleted())
        .await?
        .iter()
        .filter(|v| v.deleted || !f.deleted_only)
        .map(|v| v.version)
        .collect();
    ok(json!(f.page(v)))
}

async fn version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    ok(version_json(&v))
}

async fn raw_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    raw(v.schema)
}

async fn register(
    State(s): Shared,
    Path(subject): Path<String>,
    _: Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes).await?;
    let id = s.register(&subject, &schema).await?;
    ok(json!({"id": id}))
}

async fn lookup(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes).await?;
    let v = s.lookup(&subject, &schema, f.deleted).await?;
    ok(version_json(&v))
}

async fn delete_subject(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
) -> ApiResult {
    ok(json!(s.delete_subject(&subject, f.permanent).await?))
}

async fn referenced_by(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    ok(json!(
        f.page(
            s.referenced_by(&subject, VersionRef::parse(&version)?)
                .await?
        )
    ))
}

async fn delete_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
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
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let against = VersionRef::parse(&version)?;
    let schema = candidate(&s, &headers, &bytes).await?;
    compat_response(s.check(&subject, Some(against), &schema).await?, f.verbose)
}

async fn check_all(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes).await?;
    compat_response(s.check(&subject, None, &schema).await?, f.verbose)
}

/// The registry's mode. Only READWRITE exists here: it never runs as a read-only replica or
/// an import target.
async fn get_mode() -> ApiResult {
    ok(json!({"mode": "READWRITE"}))
}

#[derive(Debug, Deserialize)]
struct ModeRequest {
    mode: String,
}

async fn put_mode(headers: HeaderMap, bytes: Bytes) -> ApiResult {
    let req: ModeRequest = body(&headers, &bytes)?;
    if req.mode.eq_ignore_ascii_case("READWRITE") {
        ok(json!({"mode": "READWRITE"}))
    } else {
        Err(RegistryError::InvalidMode(req.mode))
    }
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
    Query(f): Query,
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
        // Confluent: nothing to delete reads as an unknown subject (40401), where a read
        // of the same missing level is 40408.
        None => Err(RegistryError::SubjectNotFound(subject)),
    }
}
