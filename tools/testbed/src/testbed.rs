use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use docflow_config::{ConsumerArgs, DatabaseArgs, KafkaArgs};
use docflow_runtime::handler::class;
use docflow_runtime::{ConsumerSpec, Handler, HandlerError, Record};
use docflow_stage::StoreLedger;
use docflow_store::Deliveries;
use docflow_telemetry::TelemetryArgs;
use sqlx::AnyPool;

/// Command line of `docflow-testbed`.
#[derive(Debug, Parser)]
#[command(
    name = "docflow-testbed",
    about = "Consumer replica with a synthetic handler"
)]
pub(crate) struct Config {
    /// Topic to consume.
    #[arg(long, env = "DOCFLOW_TESTBED_TOPIC")]
    topic: String,
    /// Consumer group.
    #[arg(long, env = "DOCFLOW_TESTBED_GROUP")]
    group: String,
    /// Handler time per record, milliseconds.
    #[arg(long, default_value_t = 1)]
    work_ms: u64,
    /// Handler time of a slow record, milliseconds (heavy tail).
    #[arg(long, default_value_t = 0)]
    slow_ms: u64,
    /// Percent of records that are slow.
    #[arg(long, default_value_t = 0.0)]
    slow_percent: f64,
    /// Payloads starting with this fail permanently (dead-lettered at once).
    #[arg(long, default_value = "poison")]
    poison_prefix: String,
    /// Payloads starting with this fail transiently on their first `flaky_failures` attempts.
    #[arg(long, default_value = "flaky")]
    flaky_prefix: String,
    /// Transient failures of a flaky record before it succeeds.
    #[arg(long, default_value_t = 2)]
    flaky_failures: u32,
    /// Payloads starting with this abort the whole process (a native crash, the OOM killer).
    #[arg(long, default_value = "crash")]
    crash_prefix: String,
    /// Payloads starting with this take `--long-ms` to handle (a long document).
    #[arg(long, default_value = "long")]
    long_prefix: String,
    /// Handler time of a long record, milliseconds.
    #[arg(long, default_value_t = 10_000)]
    long_ms: u64,
    /// Also record each record's produce and done times (table `testbed_latency`, epoch
    /// milliseconds): end-to-end latency for load tests.
    #[arg(long)]
    record_latency: bool,
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    pub(crate) consumer: ConsumerArgs,
    #[command(flatten)]
    database: DatabaseArgs,
    #[command(flatten)]
    pub(crate) telemetry: TelemetryArgs,
}

struct Synthetic {
    pool: AnyPool,
    work: Duration,
    slow: Duration,
    slow_percent: f64,
    poison: String,
    flaky: String,
    flaky_failures: u32,
    crash: String,
    long: String,
    long_work: Duration,
    pid: i64,
    record_latency: bool,
}

impl Handler for Synthetic {
    /// The record's id (its payload as text).
    type Input = String;

    async fn decode(&self, record: &Record) -> Result<String, HandlerError> {
        Ok(String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).into_owned())
    }

    async fn handle(&self, record: &Record, id: &String) -> Result<(), HandlerError> {
        if id.starts_with(&self.crash) {
            tracing::error!(%id, "crash record: aborting the process");
            std::process::abort();
        }
        if id.starts_with(&self.poison) {
            return Err(HandlerError::permanent(
                "poison",
                format!("record {id} is poison"),
            ));
        }
        if id.starts_with(&self.flaky) && record.attempt <= self.flaky_failures {
            return Err(HandlerError::transient(
                "flaky",
                format!("attempt {} of {id} fails", record.attempt),
            ));
        }
        let slow = self.slow_percent > 0.0 && rand::random::<f64>() * 100.0 < self.slow_percent;
        let work = if id.starts_with(&self.long) {
            self.long_work
        } else if slow {
            self.slow
        } else {
            self.work
        };
        tokio::time::sleep(work).await;
        let inserted = sqlx::query(
            "INSERT INTO testbed_rows (msg_id, topic, part, off, pid) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (msg_id) DO NOTHING",
        )
        .bind(id)
        .bind(&record.topic)
        .bind(i64::from(record.partition))
        .bind(record.offset)
        .bind(self.pid)
        .execute(&self.pool)
        .await
        .map_err(|e| HandlerError::transient(class::DATABASE, e))?
        .rows_affected();
        if self.record_latency {
            let done_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            sqlx::query(
                "INSERT INTO testbed_latency (msg_id, produced_ms, done_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (msg_id) DO NOTHING",
            )
            .bind(id)
            .bind(record.timestamp_ms.unwrap_or(0))
            .bind(done_ms)
            .execute(&self.pool)
            .await
            .map_err(|e| HandlerError::transient(class::DATABASE, e))?;
        }
        if inserted == 0 {
            sqlx::query(
                "INSERT INTO testbed_redeliveries (msg_id, n) VALUES ($1, 1) \
                 ON CONFLICT (msg_id) DO UPDATE SET n = testbed_redeliveries.n + 1",
            )
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(|e| HandlerError::transient(class::DATABASE, e))?;
        }
        Ok(())
    }
}

/// Creates the testbed tables (idempotent; portable SQL).
pub(crate) async fn prepare(pool: &AnyPool) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS testbed_rows (msg_id TEXT PRIMARY KEY, topic TEXT NOT NULL, \
         part BIGINT NOT NULL, off BIGINT NOT NULL, pid BIGINT NOT NULL)",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS testbed_redeliveries (msg_id TEXT PRIMARY KEY, n BIGINT NOT NULL)",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS testbed_latency (msg_id TEXT PRIMARY KEY, produced_ms BIGINT NOT NULL, \
         done_ms BIGINT NOT NULL)",
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub(crate) async fn run(config: Config) -> anyhow::Result<()> {
    // The docflow database (migrated: its `deliveries` table is the crash-counting ledger)
    // plus the testbed's own tables.
    let pool = docflow_store::open(&config.database.url, config.database.max_connections).await?;
    prepare(&pool).await?;
    let handler = Arc::new(Synthetic {
        pool: pool.clone(),
        work: Duration::from_millis(config.work_ms),
        slow: Duration::from_millis(config.slow_ms),
        slow_percent: config.slow_percent,
        poison: config.poison_prefix.clone(),
        flaky: config.flaky_prefix.clone(),
        flaky_failures: config.flaky_failures,
        crash: config.crash_prefix.clone(),
        long: config.long_prefix.clone(),
        long_work: Duration::from_millis(config.long_ms),
        pid: i64::from(std::process::id()),
        record_latency: config.record_latency,
    });
    let registry = prometheus::Registry::new();
    let spec = ConsumerSpec {
        group_id: config.group.clone(),
        topics: vec![config.topic.clone()],
        client_id: "docflow-testbed".into(),
        producer: None,
        ledger: Some(Arc::new(StoreLedger(Deliveries::new(pool.clone())))),
        positions: None,
    };
    docflow_runtime::run_service(
        &config.kafka,
        &config.consumer,
        spec,
        handler,
        registry,
        docflow_telemetry::shutdown::signal(),
    )
    .await?;
    Ok(())
}
