//! The `docflow` binary as a user runs it: `docflow dev` is what `make run` does.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn docflow() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_docflow"));
    c.env("RUST_LOG", "warn");
    c
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn dev_stack_runs_the_samples_end_to_end() {
    let state = tempfile::tempdir().unwrap();
    let out = docflow()
        .arg("dev")
        .arg("--samples")
        .arg(root().join("samples"))
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = std::fs::read_dir(root().join("samples")).unwrap().count();
    assert!(
        stdout.contains(&format!(
            "OK: {samples} documents uploaded, produced, consumed and decoded"
        )),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("status=accepted").count(),
        samples,
        "{stdout}"
    );
    // Every sample's bytes are in the object store under its document id.
    let objects = std::fs::read_dir(state.path().join("objects/demo"))
        .unwrap()
        .count();
    assert_eq!(objects, samples);
}

#[test]
fn schema_check_passes_on_the_contract_and_fails_on_a_break() {
    let out = docflow()
        .args(["schemas", "check", "--dir"])
        .arg(root().join("schemas"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("doc.uploaded"), "{stdout}");
    assert!(stdout.contains("BACKWARD_TRANSITIVE"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("orders");
    std::fs::create_dir(&t).unwrap();
    std::fs::write(
        t.join("v1.avsc"),
        r#"{"type":"record","name":"O","fields":[{"name":"a","type":"string"}]}"#,
    )
    .unwrap();
    std::fs::write(
        t.join("v2.avsc"),
        r#"{"type":"record","name":"O","fields":[{"name":"a","type":"long"}]}"#,
    )
    .unwrap();
    let out = docflow()
        .args(["schemas", "check", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("orders v2"), "{stderr}");
}
