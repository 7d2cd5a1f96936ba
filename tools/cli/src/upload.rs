//! `docflow upload FILE...`: batch uploads through the ingest API, with progress.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

/// Options of `docflow upload`.
#[derive(Debug, Args)]
pub(crate) struct UploadArgs {
    /// Files to upload.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Base URL of the ingest API.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// API token (its tenant owns the documents).
    #[arg(long, env = "DOCFLOW_TOKEN", hide_env_values = true)]
    token: String,
    /// Produce again even for bytes already accepted.
    #[arg(long)]
    reprocess: bool,
    /// Wait up to this long (e.g. `10s`; capped by the server) for every stage of each
    /// document, and print the stages' status (request/reply; falls back to the job id).
    #[arg(long)]
    wait: Option<String>,
}

/// `stage=status` for each stage of a job body.
fn stages_line(job: &serde_json::Value) -> String {
    job["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{}={}",
                s["stage"].as_str().unwrap_or("?"),
                s["status"].as_str().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Uploads every file; prints one line per file (job id or error) to stdout and a summary,
/// with a progress bar on stderr when it is a terminal. Fails when any file was refused.
pub(crate) async fn run(args: UploadArgs) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let total: u64 = args
        .files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let (mut ok, mut refused) = (0usize, 0usize);
    for file in &args.files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        bar.set_message(name.clone());
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let len = bytes.len() as u64;
        let mut query = vec![("filename", name.clone())];
        if args.reprocess {
            query.push(("reprocess", "true".to_owned()));
        }
        if let Some(w) = &args.wait {
            query.push(("wait", w.clone()));
        }
        let resp = http
            .post(format!("{}/v1/documents", args.url.trim_end_matches('/')))
            .query(&query)
            .bearer_auth(&args.token)
            .body(bytes)
            .send()
            .await
            .with_context(|| format!("uploading {}", file.display()))?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        bar.inc(len);
        if status == reqwest::StatusCode::OK {
            // Every stage finished within the wait: the body is the job.
            ok += 1;
            let line = format!(
                "{name}: 200 {} pipeline={} {}",
                body["job_id"].as_str().unwrap_or("?"),
                body["pipeline"].as_str().unwrap_or("?"),
                stages_line(&body)
            );
            bar.suspend(|| println!("{line}"));
        } else if status == reqwest::StatusCode::ACCEPTED {
            ok += 1;
            let dup = if body["duplicate"] == true {
                " (duplicate)"
            } else {
                ""
            };
            let line = format!(
                "{name}: {} {}{dup}",
                status.as_u16(),
                body["job_id"].as_str().unwrap_or("?")
            );
            bar.suspend(|| println!("{line}"));
        } else {
            refused += 1;
            let line = format!(
                "{name}: {} {}",
                status.as_u16(),
                body["message"].as_str().unwrap_or("")
            );
            bar.suspend(|| println!("{line}"));
        }
    }
    bar.finish_and_clear();
    println!(
        "{ok} accepted, {refused} refused, {} bytes in {:.1}s",
        total,
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(refused == 0, "{refused} file(s) refused");
    Ok(())
}
