//! `docflow-thumbnails`: see the library docs.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = docflow_thumbnails::Config::parse();
    config.telemetry.init()?;
    docflow_thumbnails::run(config).await
}
