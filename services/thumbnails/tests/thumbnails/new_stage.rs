//! The example of docs/adding-a-stage.md (`crates/docflow-stage/examples/entropy.rs`): a
//! whole isolated stage in one file, run as its own process against the stack.

use std::path::PathBuf;

use super::*;

/// An example binary of the workspace (`cargo test` builds the examples beside the tests).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(std::path::Path::parent).unwrap();
    let path = profile.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is not built (`cargo test --workspace` builds the examples; or `cargo build -p docflow-stage --examples`)",
        path.display()
    );
    path
}

/// Kills the stage's process (its supervisor; the replica and its workers follow it) should
/// the test fail before stopping it.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Its own flag reaches its worker (the typed settings), its answer becomes the run's
/// output, its refusal a dead letter with its own class, and the supervisor and the
/// replica stop on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_example_stage_runs_end_to_end_as_its_own_process() {
    let s = Stack::start_without_stage_with(|c| c.stages = vec!["entropy".to_owned()]).await;
    let stage = std::process::Command::new(example("entropy"))
        .args(s.stage_flags("entropy"))
        .args(["--max-bytes", "1000"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stage = Reap(stage);

    let small = sample("invoice-acme.pdf");
    let (status, job) = s.post("?wait=30s", small.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "done", "{job}");
    let output = &job["stages"][0]["output"];
    assert_eq!(output["bytes"], small.len(), "{job}");
    let bits = output["bits_per_byte"].as_f64().unwrap();
    assert!((4.0..8.0).contains(&bits), "{job}");

    let large = sample("report-q3.pdf");
    assert!(large.len() > 1000);
    let id = document_id(&large);
    let (status, job) = s.post("?wait=30s", large).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "failed", "{job}");
    let dead_letters = topics::dead_letter(&s.uploaded, &s.stack.group("entropy"));
    let dlq = s.wait_records(&dead_letters, 1).await;
    assert_eq!(dlq[0].0, id.as_bytes());
    let classes = s
        .stack
        .records_with_header(&dead_letters, "docflow.dlq.error.class")
        .await
        .unwrap();
    assert_eq!(classes[0].1.as_deref(), Some("too_large"));
    let job: Value = s.get(&format!("/v1/jobs/{id}")).await.json().await.unwrap();
    let error = job["stages"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("over --max-bytes 1000"), "{job}");

    let term = std::process::Command::new("kill")
        .args(["-TERM", &stage.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = stage.0.wait().unwrap();
    assert!(status.success(), "{status}");
}
