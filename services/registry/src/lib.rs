//! A Confluent-compatible schema registry for docflow's dev stack and CI.
//!
//! The REST subset every Avro producer and consumer needs: register, look up, fetch by id,
//! versions, deletes (soft and permanent), compatibility checks and levels, with Confluent's
//! status and error codes. State lives in SQL through sqlx (SQLite file by default,
//! PostgreSQL via `DATABASE_URL`). Production points clients at Confluent Schema Registry,
//! Karapace or Redpanda instead; nothing in docflow depends on this implementation.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use docflow_config::DatabaseArgs;
use docflow_events::CompatibilityLevel;
use docflow_telemetry::TelemetryArgs;
use tokio::net::TcpListener;

pub mod error;
pub mod http;
pub mod references;
mod response;
pub mod store;

pub use error::RegistryError;
pub use store::Store;

/// Command line of `docflow-registry`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "docflow-registry",
    version,
    about = "Confluent-compatible schema registry"
)]
pub struct Config {
    /// Address to listen on.
    #[arg(
        long,
        env = "DOCFLOW_REGISTRY_LISTEN",
        default_value = "127.0.0.1:8081"
    )]
    pub listen: SocketAddr,

    /// Compatibility level until one is set with `PUT /config`.
    #[arg(
        long,
        env = "DOCFLOW_REGISTRY_DEFAULT_COMPATIBILITY",
        default_value = "BACKWARD"
    )]
    pub default_compatibility: CompatibilityLevel,

    /// Storage.
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// Opens the store (running migrations) for `database`.
pub async fn open_store(
    database: &DatabaseArgs,
    default_level: CompatibilityLevel,
) -> Result<Arc<Store>, RegistryError> {
    let pool = docflow_store::connect(&database.url, database.max_connections).await?;
    Ok(Arc::new(Store::open(pool, default_level).await?))
}

/// Serves the registry on `listener` until `shutdown` completes; in-flight requests finish.
pub async fn serve(
    store: Arc<Store>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "schema registry listening");
    }
    let app = tower::ServiceExt::map_request(http::router(store), http::trim_trailing_slash);
    axum::serve(listener, axum::ServiceExt::into_make_service(app))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Runs the service as configured until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let store = open_store(&config.database, config.default_compatibility).await?;
    let listener = TcpListener::bind(config.listen).await?;
    serve(store, listener, docflow_telemetry::shutdown::signal()).await?;
    Ok(())
}
