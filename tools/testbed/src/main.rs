//! `docflow-testbed`: a consumer group replica whose handler is synthetic but whose side
//! effect is real (one row per record in SQLite or PostgreSQL, keyed by the record's id, so a
//! redelivery is counted, never duplicated).

use clap::Parser;

mod testbed;

fn main() -> anyhow::Result<()> {
    let config = testbed::Config::parse();
    if let Some(code) = docflow_runtime::supervise::supervise(config.consumer.supervise) {
        std::process::exit(code);
    }
    config.telemetry.init()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(testbed::run(config))
}
