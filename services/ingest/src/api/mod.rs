//! The tenant API: `POST /v1/documents`, `GET /v1/jobs/{id}`,
//! `GET /v1/documents/{id}/thumbnail`, `GET /v1/search`, `GET /v1/analytics`; the console and
//! `/v1/admin/...` are in `admin`; `crate::routes` puts both together with `/openapi.json`,
//! `/healthz`, `/readyz` and `/metrics`.
//!
//! - `routes`: the tenant API's routes, and the OpenAPI document.
//! - `upload`: `POST /v1/documents`, step by step (receive, check and store, persist, reply).
//! - `jobs`: `GET /v1/jobs/{id}` and `GET /v1/documents/{id}/thumbnail` (the views
//!   themselves, shared with the admin API, are in `crate::jobs`).
//! - `search`: `GET /v1/search`.
//! - `analytics`: `GET /v1/analytics`.
//!
//! Who asks (the tenant of the bearer token) is `crate::auth`'s.

use std::sync::Arc;

use axum::extract::State;

use crate::AppState;

mod analytics;
mod jobs;
mod routes;
mod search;
mod upload;

pub use routes::OPENAPI;
pub(crate) use routes::routes;

type Shared = State<Arc<AppState>>;
