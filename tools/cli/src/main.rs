//! `docflow`: run the embedded stack, upload, manage topics, schemas and API tokens.

use clap::Parser;

mod analytics;
mod autoscale;
mod calibrate;
mod cli;
mod dev;
mod infra;
mod plan;
mod probe;
mod schemas;
mod simulate;
mod status;
mod tokens;
mod topics;
mod upload;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let outcome = match cli.telemetry.init() {
        Ok(()) => cli.run().await,
        Err(e) => Err(e.into()),
    };
    docflow_telemetry::exit_code(outcome)
}
