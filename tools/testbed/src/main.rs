//! `docflow-testbed`: a consumer group replica whose handler is synthetic but whose side
//! effect is real (one row per record in SQLite or PostgreSQL, keyed by the record's id, so a
//! redelivery is counted, never duplicated).

use clap::Parser;

mod testbed;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = testbed::Config::parse();
    config.telemetry.init()?;
    testbed::run(config).await
}
