//! `docflow-analytics-rollup`: consumer group `analytics-rollup` of `doc.uploaded` and
//! `doc.processed` (two inputs of one group, one set of positions).
//!
//! Per tenant and UTC hour it counts uploads (documents, bytes, by content type), stage
//! outcomes (one per document, stage, version and outcome) and the records it had to
//! dead-letter. Unlike the stages, whose effects are idempotent by content, a count is not:
//! so each batch of counts commits in one database transaction together with the offsets it
//! counted, each replica starts its partitions at the positions kept in that database (not
//! Kafka's), and a record below the live group's position never counts again — whoever
//! delivers it (see [`docflow_store::analytics`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use docflow_config::{ConsumerArgs, DatabaseArgs, KafkaArgs, RegistryArgs};
use docflow_events::topics::{DOC_PROCESSED, DOC_UPLOADED};
use docflow_runtime::ConsumerSpec;
use docflow_store::Analytics;
use docflow_telemetry::TelemetryArgs;

pub mod rollup;

pub use rollup::{Rollup, RollupMetrics, StorePositions};

/// The consumer group's name.
pub const GROUP: &str = docflow_store::analytics::LIVE_GROUP;

/// Workers when `--workers` is not given: a record's handler only waits for its batch's
/// commit, so the records in flight are what one transaction can batch — twice
/// `--batch-max` (500), so a full batch gathers while the last one commits.
pub const DEFAULT_WORKERS: usize = 1024;

/// Command line of `docflow-analytics-rollup`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "docflow-analytics-rollup",
    version,
    about = "docflow consumer: exact per-tenant rollups of uploads and stage outcomes"
)]
pub struct Config {
    /// Consumer group.
    #[arg(long, env = "DOCFLOW_GROUP", default_value = GROUP)]
    pub group: String,

    /// The group whose positions in the database say what is counted: the live group. A
    /// replay under another `--group` counts only records this group has not counted.
    /// Default: `--group` without a `.replay.<id>` suffix.
    #[arg(long, env = "DOCFLOW_LIVE_GROUP")]
    pub live_group: Option<String>,

    /// Topic of accepted documents.
    #[arg(long, env = "DOCFLOW_INPUT_TOPIC", default_value = DOC_UPLOADED)]
    pub topic: String,

    /// Topic of stage results (consumed by the same group).
    #[arg(long, env = "DOCFLOW_PROCESSED_TOPIC", default_value = DOC_PROCESSED)]
    pub processed_topic: String,

    /// Most records counted in one transaction.
    #[arg(long, env = "DOCFLOW_BATCH_MAX", default_value_t = 500)]
    pub batch_max: usize,

    /// How long a batch waits for more records once it has one (0: it takes what is
    /// waiting, which is plenty under load; commits then never wait for company).
    #[arg(
        long,
        env = "DOCFLOW_BATCH_LINGER",
        default_value = "0ms",
        value_parser = docflow_config::parse_duration
    )]
    pub batch_linger: Duration,

    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Consumer runtime (workers: default 1024 here, see [`DEFAULT_WORKERS`]).
    #[command(flatten)]
    pub consumer: ConsumerArgs,

    /// Schema registry.
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// The docflow database (rollups, positions).
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl Config {
    /// The configuration from the command line and environment; `--workers` left unset
    /// means [`DEFAULT_WORKERS`].
    pub fn from_command_line() -> Self {
        Self::from_args(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// The configuration from `args` (the first is the program name) and the environment.
    pub fn from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Self::command().try_get_matches_from(args)?;
        let mut config = Self::from_arg_matches(&matches)?;
        if matches.value_source("workers") == Some(clap::parser::ValueSource::DefaultValue) {
            config.consumer.workers = DEFAULT_WORKERS;
        }
        Ok(config)
    }

    /// The live group: `--live-group`, else `--group` without a `.replay.<id>` suffix (so a
    /// replay started by `docflow replay run --mode side` counts against the live group).
    pub fn live_group(&self) -> &str {
        match &self.live_group {
            Some(g) => g,
            None => self
                .group
                .split_once(".replay.")
                .map_or(&self.group, |(live, _)| live),
        }
    }
}

/// Runs the rollup until `shutdown`, then drains, commits and leaves the group.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let pool = docflow_store::open(&config.database.url, config.database.max_connections).await?;
    let store = Analytics::new(pool, config.live_group());
    let codec = docflow_runtime::codec(&config.registry)?;
    let registry = prometheus::Registry::new();
    let metrics = RollupMetrics::new(&registry)?;
    let (rollup, batcher) = Rollup::start(
        store.clone(),
        codec,
        config.processed_topic.clone(),
        config.batch_max,
        config.batch_linger,
        metrics,
    );
    tracing::info!(
        group = %config.group,
        live_group = %config.live_group(),
        workers = config.consumer.workers,
        batch_max = config.batch_max,
        "analytics rollup starting"
    );
    let mut spec = ConsumerSpec::new(
        config.group.clone(),
        vec![config.topic.clone(), config.processed_topic.clone()],
    );
    spec.positions = Some(Arc::new(StorePositions(store)));
    let result = docflow_runtime::run_service(
        &config.kafka,
        &config.consumer,
        spec,
        Arc::new(rollup),
        registry,
        shutdown,
    )
    .await;
    batcher.abort();
    result?;
    Ok(())
}

/// Runs the rollup until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    run_until(config, docflow_telemetry::shutdown::signal()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_default_to_the_batch_depth_unless_given() {
        let c = Config::from_args(["x"]).unwrap();
        assert_eq!(c.consumer.workers, DEFAULT_WORKERS);
        assert_eq!(c.live_group(), GROUP);
        let c = Config::from_args([
            "x",
            "--workers",
            "3",
            "--group",
            "g.replay.1",
            "--live-group",
            GROUP,
        ])
        .unwrap();
        assert_eq!(c.consumer.workers, 3);
        assert_eq!(c.live_group(), GROUP);
        assert_eq!(c.group, "g.replay.1");
        // A side replay's group counts against its live group without being told.
        let c = Config::from_args(["x", "--group", "analytics-rollup.replay.3f9c"]).unwrap();
        assert_eq!(c.live_group(), "analytics-rollup");
        let c = Config::from_args(["x", "--group", "mine"]).unwrap();
        assert_eq!(c.live_group(), "mine");
    }
}
