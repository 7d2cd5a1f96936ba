//! `docflow probe URL`: a health check a container can run (the image has no shell or curl):
//! exits 0 when the URL answers 2xx within the timeout, 1 otherwise, saying why.

use std::time::Duration;

use anyhow::Context;

/// `docflow probe`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The URL to GET, e.g. `http://127.0.0.1:8080/readyz` (ingest) or a stage's
    /// `http://127.0.0.1:9090/readyz` (its `--metrics-listen`).
    url: String,
    /// How long to wait for the answer.
    #[arg(long, default_value = "3s", value_parser = docflow_config::parse_duration)]
    timeout: Duration,
}

/// GETs the URL; an error unless it answers 2xx.
pub(crate) async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(args.timeout)
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(&args.url)
        .send()
        .await
        .with_context(|| format!("GET {}", args.url))?;
    let status = response.status();
    anyhow::ensure!(status.is_success(), "GET {}: {status}", args.url);
    Ok(())
}
