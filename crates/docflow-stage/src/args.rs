//! The configuration every stage shares, flattened into each stage's command line.

use std::path::Path;
use std::time::Duration;

use clap::{Args, Parser};
use docflow_config::{ConsumerArgs, DatabaseArgs, KafkaArgs, ObjectStoreArgs, RegistryArgs};
use docflow_events::topics::{DOC_PROCESSED, DOC_UPLOADED};

/// Where a stage reads, writes and announces, and how its replica consumes.
#[derive(Debug, Clone, Args)]
pub struct StageArgs {
    /// Consumer group (default: the stage's name, e.g. `thumbnails`).
    #[arg(long, env = "DOCFLOW_GROUP")]
    pub group: Option<String>,

    /// Topic of accepted documents.
    #[arg(long, env = "DOCFLOW_INPUT_TOPIC", default_value = DOC_UPLOADED)]
    pub topic: String,

    /// Topic the stage announces its results on.
    #[arg(long, env = "DOCFLOW_PROCESSED_TOPIC", default_value = DOC_PROCESSED)]
    pub processed_topic: String,

    /// How long a `doc.processed` produce may wait for the broker's ack.
    #[arg(
        long,
        env = "DOCFLOW_PRODUCE_TIMEOUT",
        default_value = "10s",
        value_parser = docflow_config::parse_duration
    )]
    pub produce_timeout: Duration,

    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Consumer runtime (workers, retries, admin endpoint).
    #[command(flatten)]
    pub consumer: ConsumerArgs,

    /// Schema registry.
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Result store.
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Object store (document bytes in, artifacts out).
    #[command(flatten)]
    pub objects: ObjectStoreArgs,
}

#[derive(Parser)]
struct Local {
    #[command(flatten)]
    args: StageArgs,
}

impl StageArgs {
    /// A stage inside a local stack (the harness, `docflow dev`): these endpoints, every other
    /// setting at its command-line default, the admin endpoint on a free port.
    pub fn local(
        bootstrap_servers: &str,
        registry_url: &str,
        database_url: &str,
        object_dir: &Path,
    ) -> Result<Self, clap::Error> {
        Local::try_parse_from([
            "docflow-stage",
            "--kafka-bootstrap-servers",
            bootstrap_servers,
            "--schema-registry-url",
            registry_url,
            "--database-url",
            database_url,
            "--object-dir",
            &object_dir.display().to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .map(|l| l.args)
    }

    /// The consumer group of stage `name` under these arguments.
    pub fn group_of(&self, name: &str) -> String {
        self.group.clone().unwrap_or_else(|| name.to_owned())
    }
}
