//! Configuration blocks shared by every docflow binary.
//!
//! Each block is a clap struct with an environment variable on every flag; services
//! `#[command(flatten)]` the blocks they need, so `--kafka-bootstrap-servers` and
//! `KAFKA_BOOTSTRAP_SERVERS` mean the same thing everywhere.

mod consumer;
mod database;
mod kafka;
mod registry;
mod telemetry;

pub use consumer::ConsumerArgs;
pub use database::DatabaseArgs;
pub use kafka::{KafkaArgs, SaslMechanism, SecurityProtocol};
pub use registry::RegistryArgs;
pub use telemetry::{LogFormat, TelemetryArgs, TelemetryError};

/// Parses `key=value`.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected key=value, got {s:?}")),
    }
}

/// Parses a duration such as `500ms`, `10s` or `2m`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}
