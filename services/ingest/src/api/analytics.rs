//! `GET /v1/analytics`: the tenant's rollup.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Shared;
use crate::auth::Tenant;
use crate::error::ApiError;

/// Query of `GET /v1/analytics`.
#[derive(Debug, Deserialize)]
pub(super) struct AnalyticsQuery {
    from: Option<String>,
    to: Option<String>,
    granularity: Option<String>,
}

/// Most buckets one analytics answer holds (a year of days, or 92 days of hours).
const MAX_ANALYTICS_BUCKETS: i64 = 24 * 92;

fn unix_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An RFC 3339 time (`2026-12-04T10:00:00Z`) as Unix ms.
fn parse_time(value: &str, name: &str) -> Result<i64, ApiError> {
    humantime::parse_rfc3339_weak(value)
        .map(unix_ms)
        .map_err(|e| {
            ApiError::BadRequest(format!("`{name}` is not an RFC 3339 time ({e}): {value:?}"))
        })
}

fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

fn bucket_json(b: &docflow_store::Bucket) -> Value {
    json!({
        "start": rfc3339(b.start_ms),
        "documents": b.documents,
        "bytes": b.bytes,
        "by_content_type": b.by_content_type,
        "stages": b.stages,
        "rollup_dead_lettered": b.rollup_dead_lettered,
    })
}

/// The tenant's rollup (from the analytics-rollup consumer group): uploads, bytes, content
/// types, stage outcomes and dead-lettered records per hour or day in [`from`, `to`).
pub(super) async fn analytics(
    State(state): Shared,
    query: Result<Query<AnalyticsQuery>, QueryRejection>,
    Tenant(tenant): Tenant,
) -> Result<Response, ApiError> {
    use docflow_store::Granularity;
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let granularity: Granularity = q
        .granularity
        .as_deref()
        .unwrap_or("hour")
        .parse()
        .map_err(ApiError::BadRequest)?;
    let to = match &q.to {
        Some(v) => parse_time(v, "to")?,
        None => unix_ms(std::time::SystemTime::now()),
    };
    let from = match &q.from {
        Some(v) => parse_time(v, "from")?,
        None => to.saturating_sub(match granularity {
            Granularity::Hour => docflow_store::analytics::DAY_MS,
            Granularity::Day => 30 * docflow_store::analytics::DAY_MS,
        }),
    };
    let (from, to) = (granularity.floor(from), granularity.ceil(to));
    if from >= to {
        return Err(ApiError::BadRequest("`from` must be before `to`".into()));
    }
    if (to - from) / granularity.millis() > MAX_ANALYTICS_BUCKETS {
        return Err(ApiError::BadRequest(format!(
            "at most {MAX_ANALYTICS_BUCKETS} buckets per request: narrow `from`..`to` or use granularity=day"
        )));
    }
    let buckets = state
        .analytics
        .rollup(Some(&tenant), from, to, granularity)
        .await?;
    let totals = docflow_store::analytics::totals(&buckets);
    let granularity = match granularity {
        Granularity::Hour => "hour",
        Granularity::Day => "day",
    };
    Ok((
        StatusCode::OK,
        axum::Json(json!({
            "tenant": tenant,
            "granularity": granularity,
            "from": rfc3339(from),
            "to": rfc3339(to),
            "totals": {
                "documents": totals.documents,
                "bytes": totals.bytes,
                "by_content_type": totals.by_content_type,
                "stages": totals.stages,
                "rollup_dead_lettered": totals.rollup_dead_lettered,
            },
            "buckets": buckets.iter().map(bucket_json).collect::<Vec<_>>(),
        })),
    )
        .into_response())
}
