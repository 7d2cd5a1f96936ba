//! Integration tests of the schema registry over real HTTP, against every database this
//! machine has (SQLite always; PostgreSQL when DATABASE_URL is set), driven both with raw
//! HTTP and with schema_registry_converter, plus the codec against a real broker.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

mod support;

mod codec;
mod confluent_edges;
mod confluent_python;
mod http_api;
mod identity;
mod interop;
