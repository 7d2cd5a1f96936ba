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
            "OK: {samples} documents uploaded, thumbnailed, read, embedded and announced on doc.processed"
        )),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("200  job").count(),
        samples,
        "every upload waited for its results: {stdout}"
    );
    assert_eq!(stdout.matches("pipeline=done").count(), samples, "{stdout}");
    // One doc.processed per document and stage.
    assert_eq!(
        stdout.matches("outcome=Ok").count(),
        2 * samples,
        "{stdout}"
    );
    // The scan has no text layer: OCR read it, and search by meaning finds it.
    assert!(stdout.contains("1 read by OCR"), "{stdout}");
    assert!(
        stdout.contains("-> scan-delivery-note.png p.1"),
        "the scan is found by a question in other words: {stdout}"
    );
    // Every sample's bytes are in the object store under its document id, and a thumbnail
    // for each under the stage's derived prefix.
    let demo = state.path().join("objects/demo");
    let blobs = std::fs::read_dir(&demo)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_file())
        .count();
    assert_eq!(blobs, samples);
    let thumbs = std::fs::read_dir(demo.join("derived/thumbnails/v1"))
        .unwrap()
        .count();
    assert_eq!(thumbs, samples);
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

/// `docflow upload` against a real ingest API (real broker, registry, database): accepted
/// files print their job ids, a refused file makes the command fail with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_sends_files_through_the_api() {
    // Ingest and the thumbnails stage (for `--wait`) on one stack.
    let stack = docflow_stack::Stack::builder()
        .sqlite()
        .partitions(2)
        .token("t0k", "acme")
        .ingest()
        .stage("thumbnails")
        .start()
        .await
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let url = stack.ingest_url().to_owned();
    let url2 = url.clone();

    let samples = root().join("samples");
    let run = move |files: Vec<std::path::PathBuf>| {
        let mut c = docflow();
        c.arg("upload")
            .arg("--url")
            .arg(&url)
            .arg("--token")
            .arg("t0k")
            .args(files);
        c
    };
    let good = vec![
        samples.join("invoice-acme.pdf"),
        samples.join("report-q3.pdf"),
    ];
    let cmd = run.clone();
    let out = tokio::task::spawn_blocking(move || cmd(good).output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2 accepted, 0 refused"), "{stdout}");

    let text = state.path().join("notes.txt");
    std::fs::write(&text, "not a document").unwrap();
    let bad = vec![samples.join("invoice-acme.pdf"), text];
    let cmd = run.clone();
    let out = tokio::task::spawn_blocking(move || cmd(bad).output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("(duplicate)"), "{stdout}");
    assert!(stdout.contains("notes.txt: 415"), "{stdout}");
    assert!(stdout.contains("1 accepted, 1 refused"), "{stdout}");

    // --wait: request/reply, with each stage's status.
    let out = tokio::task::spawn_blocking(move || {
        let mut c = run(vec![samples.join("letter-renewal.pdf")]);
        c.args(["--wait", "30s"]).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("letter-renewal.pdf: 200 ")
            && stdout.contains("pipeline=done thumbnails=done"),
        "{stdout}"
    );
    // Tokens in the database: created by `docflow tokens`, accepted, then revoked.
    let db_url = stack.database_url.clone();
    let tokens = move |args: &[&str]| {
        let out = docflow()
            .arg("tokens")
            .args(args)
            .args(["--database-url", &db_url])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
    };
    let (ok, secret) = tokens(&["create", "--tenant", "acme", "--label", "ci"]);
    assert!(ok && secret.starts_with("dft_"), "{secret}");
    let (ok, list) = tokens(&["list", "--tenant", "acme"]);
    assert!(
        ok && list.contains("active") && list.contains("label=ci"),
        "{list}"
    );
    assert!(!list.contains(&secret), "list never shows secrets");
    let id = list.split_whitespace().next().unwrap().to_owned();
    let http = reqwest::Client::new();
    let post = |token: String| {
        let http = http.clone();
        let url = format!("{url2}/v1/documents");
        let body = std::fs::read(root().join("samples/report-q3.pdf")).unwrap();
        async move {
            http.post(url)
                .bearer_auth(token)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(post(secret.clone()).await, reqwest::StatusCode::ACCEPTED);
    let (ok, out) = tokens(&["revoke", &id]);
    assert!(ok, "{out}");
    assert_eq!(post(secret).await, reqwest::StatusCode::UNAUTHORIZED);
    let (ok, _) = tokens(&["revoke", &id]);
    assert!(!ok, "revoking twice fails");
    stack.stop().await.unwrap();
}

/// `docflow replay` as a user runs it: a plan as a table and as CSV, a dry run that changes
/// nothing, and `--execute` that moves the group (the library is tested in `replay/tests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_plans_and_resets_a_group() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

    let stack = docflow_stack::Stack::builder().start().await.unwrap();
    let topic = stack.topic("cli-replay", 1).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    for _ in 0..10 {
        producer
            .send(
                FutureRecord::to(&topic).key("k").payload("v"),
                std::time::Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    let group = docflow_stack::unique_name("cli-group");
    let c: BaseConsumer = stack
        .kafka()
        .client_config("setup")
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(10))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync).unwrap();
    let committed = || {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic, 0);
        let got = c
            .committed_offsets(tpl, std::time::Duration::from_secs(10))
            .unwrap();
        got.find_partition(&topic, 0).unwrap().offset()
    };

    let bootstrap = stack.broker.bootstrap_servers();
    let replay = |extra: &[&str]| {
        let out = docflow()
            .args(["replay"])
            .args(extra)
            .args(["--group", &group, "--topic", &topic, "--shift-by", "-4"])
            .args(["--kafka-bootstrap-servers", &bootstrap])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let table = replay(&["plan", "--rate", "2"]);
    assert!(
        table.contains("total to process: 4 records; at 2 records/s: about 2s"),
        "{table}"
    );
    assert_eq!(
        replay(&["plan", "--output", "csv"]),
        format!("{topic},0,6\n")
    );
    let dry = replay(&["run", "--mode", "reset"]);
    assert!(dry.contains("dry run: nothing changed"), "{dry}");
    assert_eq!(committed(), Offset::Offset(10));
    let done = replay(&["run", "--mode", "reset", "--execute"]);
    assert!(done.contains("reset applied"), "{done}");
    assert_eq!(committed(), Offset::Offset(6));
    stack.stop().await.unwrap();
}

/// `docflow status` samples a group from the broker: caught up it is OK (exit 0); with
/// records waiting and no consumer committing it is ERR with a stopped partition (exit 1,
/// the reason on stdout, one line on stderr).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_judges_a_group_as_burrow_does() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

    let stack = docflow_stack::Stack::builder().start().await.unwrap();
    let topic = stack.topic("cli-status", 1).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    let produce = |n: usize| {
        let (producer, topic) = (producer.clone(), topic.clone());
        async move {
            for _ in 0..n {
                producer
                    .send(
                        FutureRecord::to(&topic).key("k").payload("v"),
                        std::time::Duration::from_secs(10),
                    )
                    .await
                    .unwrap();
            }
        }
    };
    produce(10).await;
    let group = docflow_stack::unique_name("cli-status");
    let c: BaseConsumer = stack
        .kafka()
        .client_config("setup")
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(10))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync).unwrap();
    let bootstrap = stack.broker.bootstrap_servers();
    let status = |extra: &[&str]| {
        docflow()
            .args(["status", "--group", &group, "--topic", &topic])
            .args(["--samples", "2", "--interval", "200ms"])
            .args(["--kafka-bootstrap-servers", &bootstrap])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = status(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with(&format!("{group} ")), "{stdout}");
    assert!(
        stdout.contains(" OK ") && stdout.contains("no lag"),
        "{stdout}"
    );

    produce(5).await;
    let out = status(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains(" ERR "), "{stdout}");
    assert!(stdout.contains("partition 0    STOP"), "{stdout}");
    assert!(stdout.contains("with 5 records behind"), "{stdout}");
    assert_eq!(
        stderr.trim(),
        format!("error: 1 of 1 groups not OK: {group} ERR")
    );
    let json: serde_json::Value =
        serde_json::from_slice(&status(&["--output", "json"]).stdout).unwrap();
    assert_eq!(json[0]["status"], "ERR", "{json}");
    assert_eq!(json[0]["partitions"][0]["status"], "STOP", "{json}");
    assert_eq!(json[0]["total_lag"], 5, "{json}");
    stack.stop().await.unwrap();
}

/// `docflow plan` and `docflow simulate` with the seed's figures: Little's law gives a
/// lagThreshold of 5, the budget 40 replicas; the simulated 80 → 200 step with one decision
/// at the step is ≈ 7.6 min outside the SLA, and lag alone does worse.
#[test]
fn plan_and_simulate_reproduce_the_seeds_figures() {
    let out = docflow()
        .args(["plan", "--partitions", "64"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // μ × (SLA wait + commit interval) = 25 × 0.3 = 7.5.
    assert!(text.contains("lagThreshold: \"8\""), "{text}");
    assert!(text.contains("maxReplicaCount: 40"), "{text}");
    assert!(text.contains("limited by the budget"), "{text}");

    let out = docflow().args(["simulate"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| {name}")))
            .unwrap_or_else(|| panic!("no row {name}: {text}"))
            .to_owned()
    };
    assert!(row("oracle").contains("(7.6 min)"), "{text}");
    assert!(row("no scaling").contains("(29.0 min)"), "{text}");
    let minutes = |l: String| -> f64 {
        let before = l.split(" min)").next().unwrap().to_owned();
        before.rsplit('(').next().unwrap().parse().unwrap()
    };
    assert!(
        minutes(row("KEDA lag trigger only")) > minutes(row("KEDA lag + rate")),
        "{text}"
    );
}

/// `docflow calibrate` runs the real thumbnails stage (its render worker processes) on
/// the samples and reports p50/p99 with the plan line they feed.
#[test]
fn calibrate_measures_the_real_stage_on_the_samples() {
    let out = docflow()
        .args([
            "calibrate",
            "--stage",
            "thumbnails",
            "--runs",
            "2",
            "--samples",
        ])
        .arg(root().join("samples"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("thumbnails: 4 documents × 2 runs (8 measurements"),
        "{text}"
    );
    assert!(
        text.contains("next: docflow plan --stage thumbnails --p50 "),
        "{text}"
    );
    let out = docflow()
        .args(["calibrate", "--stage", "nope"])
        .arg("--samples")
        .arg(root().join("samples"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown stage"));
}

/// `docflow infra` keeps infra/ in step with its plan and valid; `docflow autoscale
/// explain` reads a rendered ScaledObject (its `bootstrapServersFromEnv` resolved from the
/// Deployment's ConfigMap, as KEDA does) and offsets, and says what KEDA + the HPA decide.
#[test]
fn infra_is_generated_validated_and_explained() {
    let run = |args: &[&str]| {
        let out = docflow().current_dir(root()).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, text, err) = run(&["infra", "generate", "--check"]);
    assert!(ok, "{text}{err}");
    let (ok, text, err) = run(&["infra", "validate"]);
    assert!(ok, "{text}{err}");
    assert!(text.contains("infra/overlays/prod:"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let (ok, rendered, err) = run(&["infra", "render", "infra/overlays/prod"]);
    assert!(ok, "{err}");
    let prod = dir.path().join("prod.yaml");
    std::fs::write(&prod, rendered).unwrap();
    // 12 partitions, 100 records behind on each.
    let parts: Vec<String> = (0..12)
        .map(|p| format!(r#"{{"partition": {p}, "committed": 1000, "latest": 1100}}"#))
        .collect();
    let offsets = dir.path().join("offsets.json");
    std::fs::write(
        &offsets,
        format!(r#"{{"doc.uploaded": [{}]}}"#, parts.join(",")),
    )
    .unwrap();
    let (ok, text, err) = run(&[
        "autoscale",
        "explain",
        "--scaled-object",
        prod.to_str().unwrap(),
        "--name",
        "docflow-ocr-embeddings",
        "--partitions",
        offsets.to_str().unwrap(),
        "--replicas",
        "9",
        "--metric",
        "upload-rate=150",
    ]);
    assert!(ok, "{text}{err}");
    // Lag 1200 capped at 12 partitions × lagThreshold 8 = 96 → 12 replicas; the rate
    // 150/s at 22.73 per replica asks for 7; maxReplicaCount 12.
    assert!(text.contains("lag 1200 over 12 partitions"), "{text}");
    assert!(text.contains("metric 96 (capped"), "{text}");
    assert!(text.contains("desired replicas: 12"), "{text}");
    // Without the rate trigger's metric it says what is missing; `--name ocr` is the
    // ScaledObject of that service.
    let (ok, _, err) = run(&[
        "autoscale",
        "explain",
        "--scaled-object",
        prod.to_str().unwrap(),
        "--name",
        "ocr",
        "--partitions",
        offsets.to_str().unwrap(),
        "--replicas",
        "9",
    ]);
    assert!(!ok && err.contains("--metric upload-rate="), "{err}");
    // A commit past the log end (a negative lag) counts as 0, and says so.
    let ahead = dir.path().join("ahead.json");
    std::fs::write(
        &ahead,
        r#"{"doc.uploaded": [{"partition": 0, "committed": 120, "latest": 100}]}"#,
    )
    .unwrap();
    let (ok, text, err) = run(&[
        "autoscale",
        "explain",
        "--scaled-object",
        prod.to_str().unwrap(),
        "--name",
        "thumbnails",
        "--partitions",
        ahead.to_str().unwrap(),
        "--replicas",
        "1",
        "--metric",
        "upload-rate=1",
    ]);
    assert!(ok, "{text}{err}");
    assert!(
        text.contains("metric 0 (a negative lag counts as 0)"),
        "{text}"
    );
    assert!(!text.contains("spread the partitions"), "{text}");
    assert!(text.contains("1 replica now"), "{text}");
    // KEDA's own refusal of a bad trigger.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  triggers:\n    - type: kafka\n      metadata: {bootstrapServers: 'b:9092', consumerGroup: g, topic: doc.uploaded, lagThreshold: '0'}\n",
    )
    .unwrap();
    let (ok, _, err) = run(&[
        "autoscale",
        "explain",
        "--scaled-object",
        bad.to_str().unwrap(),
        "--partitions",
        offsets.to_str().unwrap(),
        "--replicas",
        "1",
    ]);
    assert!(
        !ok && err.contains("\"lagThreshold\" must be positive number"),
        "{err}"
    );
}

/// `docflow autoscale explain --live` reads every Kafka trigger's topic from the broker for
/// its group — the analytics rollup's two topics without a hand-written offsets file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscale_explain_reads_the_triggers_offsets_live() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

    let stack = docflow_stack::Stack::builder().start().await.unwrap();
    let uploaded = stack.topic("live-uploaded", 2).await.unwrap();
    let processed = stack.topic("live-processed", 1).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    for (topic, partition, n) in [(&uploaded, 0, 30), (&uploaded, 1, 10), (&processed, 0, 25)] {
        for _ in 0..n {
            producer
                .send(
                    FutureRecord::to(topic)
                        .partition(partition)
                        .key("k")
                        .payload("v"),
                    std::time::Duration::from_secs(10),
                )
                .await
                .unwrap();
        }
    }
    let group = docflow_stack::unique_name("rollup");
    let c: BaseConsumer = stack
        .kafka()
        .client_config("setup")
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&uploaded, 0, Offset::Offset(20))
        .unwrap();
    tpl.add_partition_offset(&uploaded, 1, Offset::Offset(10))
        .unwrap();
    tpl.add_partition_offset(&processed, 0, Offset::Offset(5))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("so.yaml");
    std::fs::write(
        &so,
        format!(
            "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {{name: docflow-analytics-rollup}}\nspec:\n  scaleTargetRef: {{name: docflow-analytics-rollup}}\n  maxReplicaCount: 4\n  triggers:\n    - type: kafka\n      name: lag-doc-uploaded\n      metadata: {{bootstrapServers: 'b:9092', consumerGroup: {group}, topic: {uploaded}, lagThreshold: '5'}}\n    - type: kafka\n      name: lag-doc-processed\n      metadata: {{bootstrapServers: 'b:9092', consumerGroup: {group}, topic: {processed}, lagThreshold: '5'}}\n"
        ),
    )
    .unwrap();
    // `docflow autoscale explain --live` of `file` (and `extra`): what it prints, once it
    // succeeded.
    let explain_live = |file: &Path, extra: &[&str]| {
        let out = docflow()
            .args(["autoscale", "explain", "--scaled-object"])
            .arg(file)
            .args(extra)
            .args(["--live", "--replicas", "1"])
            .args([
                "--kafka-bootstrap-servers",
                &stack.broker.bootstrap_servers(),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let text = explain_live(&so, &["--name", "analytics-rollup"]);
    assert!(text.contains("(live from"), "{text}");
    // doc.uploaded: 10 + 0 behind over 2 partitions; doc.processed: 20 behind on 1.
    assert!(
        text.contains("trigger lag-doc-uploaded: lag 10 over 2 partitions"),
        "{text}"
    );
    assert!(
        text.contains("trigger lag-doc-processed: lag 20 over 1 partition ("),
        "{text}"
    );
    // KEDA's `apache-kafka` trigger: one metric over its topic list, a topic the broker
    // does not have skipped.
    let apache = dir.path().join("apache.yaml");
    std::fs::write(
        &apache,
        format!(
            "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {{name: rollup}}\nspec:\n  scaleTargetRef: {{name: rollup}}\n  maxReplicaCount: 4\n  triggers:\n    - type: apache-kafka\n      name: both\n      metadata: {{bootstrapServers: 'b:9092', consumerGroup: {group}, topic: '{uploaded}, {processed}, never-created', lagThreshold: '5'}}\n"
        ),
    )
    .unwrap();
    let text = explain_live(&apache, &[]);
    // 10 + 20 behind over the 3 partitions of both topics: metric 15 (capped at 5 × 3).
    assert!(
        text.contains("trigger both: lag 30 over 3 partitions"),
        "{text}"
    );
    assert!(text.contains("metric 15 (capped"), "{text}");
    stack.stop().await.unwrap();
}

/// `docflow analytics` outside a stack: one line naming the database it tried and how to
/// point it elsewhere, even with RUST_BACKTRACE set, and no database file left behind.
#[test]
fn a_user_error_is_one_line_and_creates_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let out = docflow()
        .current_dir(dir.path())
        .env("RUST_BACKTRACE", "1")
        .env_remove("DATABASE_URL")
        .arg("analytics")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error: no database at"), "{err}");
    assert!(
        lines[0].contains("docflow.db") && lines[0].contains("DATABASE_URL"),
        "{err}"
    );
    assert!(
        !dir.path().join("docflow.db").exists(),
        "a database file was created"
    );
}

/// A registry that cannot be reached is named with the flag and variable that set it, in
/// one line.
#[test]
fn an_unreachable_registry_is_named_with_its_flag() {
    let out = docflow()
        .env("RUST_BACKTRACE", "1")
        .args([
            "schemas",
            "register",
            "--schema-registry-url",
            "http://127.0.0.1:1",
            "--schema-registry-timeout",
            "2s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("error: schema registry http://127.0.0.1:1/ (set by --schema-registry-url or SCHEMA_REGISTRY_URL)"),
        "{err}"
    );
}

/// `docflow probe` (the image's health check): exit 0 on a 2xx, 1 with the status or the
/// connection error otherwise.
#[test]
fn probe_exits_0_on_2xx_and_1_otherwise() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let status = if i == 0 {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    let url = format!("http://127.0.0.1:{port}/readyz");
    let ok = docflow().args(["probe", &url]).output().unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let unready = docflow().args(["probe", &url]).output().unwrap();
    assert_eq!(unready.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unready.stderr).contains("503"));
    // Nothing listening: the connection error, within the timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/readyz", closed.local_addr().unwrap());
    drop(closed);
    let down = docflow()
        .args(["probe", &gone, "--timeout", "2s"])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains(&gone));
}
