//! Configuration blocks shared by every docflow binary.
//!
//! Each block is a clap struct with an environment variable on every flag; services
//! `#[command(flatten)]` the blocks they need, so `--kafka-bootstrap-servers` and
//! `KAFKA_BOOTSTRAP_SERVERS` mean the same thing everywhere.

mod consumer;
mod database;
mod kafka;
mod objects;
mod registry;

pub use consumer::{AssignRange, ConsumerArgs, STATUS_TOPIC};
pub use database::DatabaseArgs;
pub use kafka::{KafkaArgs, SaslMechanism, SecurityProtocol};
pub use objects::ObjectStoreArgs;
pub use registry::RegistryArgs;

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Every block flattened into one command, as a service does: argument ids must not
    /// collide (clap checks this when the command is built).
    #[derive(Parser)]
    struct All {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        registry: RegistryArgs,
        #[command(flatten)]
        database: DatabaseArgs,
        #[command(flatten)]
        consumer: ConsumerArgs,
        #[command(flatten)]
        telemetry: docflow_telemetry::TelemetryArgs,
        #[command(flatten)]
        objects: ObjectStoreArgs,
    }

    #[test]
    fn blocks_flatten_together() {
        All::command().debug_assert();
        let all = All::try_parse_from([
            "svc",
            "--schema-registry-url",
            "http://sr:8081",
            "--database-url",
            "postgres://db/x",
            "--workers",
            "7",
        ])
        .unwrap();
        assert_eq!(all.registry.url.as_str(), "http://sr:8081/");
        assert_eq!(all.database.url, "postgres://db/x");
        assert_eq!(all.consumer.workers, 7);
        assert_eq!(all.kafka.bootstrap_servers, "127.0.0.1:9092");
        assert_eq!(all.telemetry.log_filter, "info");
        assert_eq!(all.objects.dir, std::path::PathBuf::from(".run/objects"));
    }

    #[test]
    fn durations_and_pairs() {
        assert_eq!(
            parse_duration("250ms"),
            Ok(std::time::Duration::from_millis(250))
        );
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_key_value("=x").is_err());
    }
}
