//! Subjects and their versions: `/subjects/...`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::json;

use super::request::{Query, candidate};
use super::{ApiResult, Shared, ok, raw, with_references};
use crate::store::{SubjectVersion, VersionRef};

fn version_json(v: &SubjectVersion) -> serde_json::Value {
    let mut out =
        json!({"subject": v.subject, "version": v.version, "id": v.id, "schema": v.schema});
    with_references(&mut out, &v.references);
    out
}

pub(super) async fn subjects(State(s): Shared, Query(f): Query) -> ApiResult {
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

pub(super) async fn versions(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
) -> ApiResult {
    let v: Vec<i64> = s
        .versions(&subject, f.with_deleted())
        .await?
        .iter()
        .filter(|v| v.deleted || !f.deleted_only)
        .map(|v| v.version)
        .collect();
    ok(json!(f.page(v)))
}

pub(super) async fn version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    ok(version_json(&v))
}

pub(super) async fn raw_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    let v = s
        .version(&subject, VersionRef::parse(&version)?, f.deleted)
        .await?;
    raw(v.schema)
}

pub(super) async fn register(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes, f.normalize).await?;
    let id = s.register(&subject, &schema).await?;
    ok(json!({"id": id}))
}

pub(super) async fn lookup(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult {
    let schema = candidate(&s, &headers, &bytes, f.normalize).await?;
    let v = s.lookup(&subject, &schema, f.deleted).await?;
    ok(version_json(&v))
}

pub(super) async fn delete_subject(
    State(s): Shared,
    Path(subject): Path<String>,
    Query(f): Query,
) -> ApiResult {
    ok(json!(s.delete_subject(&subject, f.permanent).await?))
}

pub(super) async fn referenced_by(
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

pub(super) async fn delete_version(
    State(s): Shared,
    Path((subject, version)): Path<(String, String)>,
    Query(f): Query,
) -> ApiResult {
    let n = s
        .delete_version(&subject, VersionRef::parse(&version)?, f.permanent)
        .await?;
    ok(json!(n))
}
