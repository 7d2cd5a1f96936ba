use clap::Parser;
use docflow_ingest::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    config.telemetry.init()?;
    docflow_ingest::run(config).await
}
