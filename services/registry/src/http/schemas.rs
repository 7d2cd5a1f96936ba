//! Schemas by id: `/schemas/ids/{id}` and what hangs off it.

use axum::extract::{Path, State};
use serde_json::json;

use super::request::Query;
use super::{ApiResult, Shared, ok, raw, with_references};
use crate::error::RegistryError;

/// A schema id from the path: not a 32-bit integer is 404 with `error_code` 404 (as
/// Confluent and Karapace answer `/schemas/ids/abc`); a number no schema has (0, -1) is
/// 40403.
fn parse_id(id: &str) -> Result<i64, RegistryError> {
    let n = id.parse::<i32>().map_err(|_| RegistryError::IdNotANumber)?;
    if n > 0 {
        Ok(i64::from(n))
    } else {
        Err(RegistryError::SchemaNotFound(n.to_string()))
    }
}

pub(super) async fn schema_by_id(State(s): Shared, Path(id): Path<String>, _: Query) -> ApiResult {
    let (schema, references) = s.schema_by_id(parse_id(&id)?).await?;
    let mut out = json!({"schema": schema});
    with_references(&mut out, &references);
    ok(out)
}

pub(super) async fn raw_schema_by_id(
    State(s): Shared,
    Path(id): Path<String>,
    _: Query,
) -> ApiResult {
    raw(s.schema_by_id(parse_id(&id)?).await?.0)
}

pub(super) async fn versions_of_id(
    State(s): Shared,
    Path(id): Path<String>,
    Query(f): Query,
) -> ApiResult {
    let pairs = s.subject_versions_of_id(parse_id(&id)?, f.deleted).await?;
    ok(f.page(pairs)
        .into_iter()
        .map(|(subject, version)| json!({"subject": subject, "version": version}))
        .collect())
}

pub(super) async fn subjects_of_id(
    State(s): Shared,
    Path(id): Path<String>,
    Query(f): Query,
) -> ApiResult {
    let mut subjects: Vec<String> = s
        .subject_versions_of_id(parse_id(&id)?, f.deleted)
        .await?
        .into_iter()
        .map(|(subject, _)| subject)
        .collect();
    subjects.dedup();
    ok(json!(f.page(subjects)))
}
