//! Who a request is: the tenant of its bearer token, for the tenant API (`api`), and the
//! token itself for the admin API (`admin`, which lets admin tokens through).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use crate::AppState;
use crate::error::ApiError;

/// The tenant of the request's bearer token, as an extractor (see [`tenant`]): a request
/// without a tenant's token is answered 401 before the handler runs.
#[derive(Debug, Clone)]
pub(crate) struct Tenant(pub(crate) String);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        tenant(state, &parts.headers).await.map(Tenant)
    }
}

/// The tenant of the request's bearer token: a token of the configuration, else one in the
/// database (`docflow tokens create`; revoked ones are refused).
pub(crate) async fn tenant(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = bearer(headers).ok_or(ApiError::Unauthorized)?;
    tenant_of(state, token).await?.ok_or(ApiError::Unauthorized)
}

/// The request's bearer token. The scheme is case-insensitive (RFC 7235 §2.1): `bearer`,
/// `BEARER` and `Bearer` alike.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
}

/// The tenant of `token`, if it is a tenant's token.
pub(crate) async fn tenant_of(state: &AppState, token: &str) -> Result<Option<String>, ApiError> {
    if let Some(tenant) = state.tokens.get(token) {
        return Ok(Some(tenant.clone()));
    }
    Ok(state.db_tokens.tenant_of(token).await?)
}
