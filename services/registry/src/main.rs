use clap::Parser;
use docflow_registry::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    config.telemetry.init()?;
    docflow_registry::run(config).await
}
