//! `docflow`: run the embedded stack, upload, manage topics, schemas and API tokens.

use clap::Parser;

mod analytics;
mod autoscale;
mod calibrate;
mod cli;
mod dev;
mod infra;
mod plan;
mod schemas;
mod simulate;
mod tokens;
mod topics;
mod upload;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli.telemetry.init()?;
    cli.run().await
}
