//! Compatibility: checks (`/compatibility/...`), levels (`/config`) and the mode
//! (`/mode`).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use bytes::Bytes;
use docflow_events::CompatibilityLevel;
use serde::Deserialize;
use serde_json::json;

use super::request::{Query, body, candidate};
use super::{ApiResult, Shared, ok};
use crate::error::RegistryError;
use crate::store::VersionRef;

#[derive(Debug, Deserialize)]
struct ConfigRequest {
    compatibility: String,
}

fn compat_response(reasons: Vec<String>, verbose: bool) -> ApiResult {
    if verbose {
        ok(json!({"is_compatible": reasons.is_empty(), "messages": reasons}))
    } else {
        ok(json!({"is_compatible": reasons.is_empty()}))
    }
}

pub(super) async fn check_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let against = VersionRef::parse(&version)?;
    let schema = candidate(&s, &headers, &bytes, f.normalize).await?;
    compat_response(s.check(&subject, Some(against), &schema).await?, f.verbose)
}

pub(super) async fn check_all(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes, f.normalize).await?;
    compat_response(s.check(&subject, None, &schema).await?, f.verbose)
}

/// The registry's mode. Only READWRITE exists here: it never runs as a read-only replica or
/// an import target.
pub(super) async fn get_mode() -> ApiResult {
    ok(json!({"mode": "READWRITE"}))
}

#[derive(Debug, Deserialize)]
struct ModeRequest {
    mode: String,
}

pub(super) async fn put_mode(headers: HeaderMap, bytes: Bytes) -> ApiResult {
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

pub(super) async fn get_global(State(s): Shared) -> ApiResult {
    ok(json!({"compatibilityLevel": s.level(None).await?.as_str()}))
}

pub(super) async fn put_global(State(s): Shared, headers: HeaderMap, bytes: Bytes) -> ApiResult {
    let level = parse_level(&headers, &bytes)?;
    s.set_level(None, level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

pub(super) async fn delete_global(State(s): Shared) -> ApiResult {
    let before = s.clear_level(None).await?;
    let level = match before {
        Some(l) => l,
        None => s.level(None).await?,
    };
    ok(json!({"compatibilityLevel": level.as_str()}))
}

pub(super) async fn get_subject_config(
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

pub(super) async fn put_subject_config(
    State(s): Shared,
    Path(subject): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let level = parse_level(&headers, &bytes)?;
    s.set_level(Some(&subject), level).await?;
    ok(json!({"compatibility": level.as_str()}))
}

pub(super) async fn delete_subject_config(
    State(s): Shared,
    Path(subject): Path<String>,
) -> ApiResult {
    match s.clear_level(Some(&subject)).await? {
        Some(l) => ok(json!({"compatibilityLevel": l.as_str()})),
        // Confluent: nothing to delete reads as an unknown subject (40401), where a read
        // of the same missing level is 40408.
        None => Err(RegistryError::SubjectNotFound(subject)),
    }
}
