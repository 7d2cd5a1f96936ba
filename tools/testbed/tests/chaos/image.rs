//! The OCI image (`make image`), run as a cluster would run it: every service from the
//! image's root filesystem, the broker and the database outside it. `make image-test` builds
//! the image, checks both archives, unpacks the oci-archive with umoci and runs this test
//! with `DOCFLOW_IMAGE_BUNDLE` naming the bundle (its `config.json` and `rootfs/`).
//!
//! Containers cannot be started here (no daemon; crun is refused `setrlimit`), so each
//! process runs as the image's config says (its user, environment and working directory)
//! in a mount and PID namespace of its own: the root filesystem bound read-only, its
//! volume `/var/lib/docflow` the only writable place, a fresh `/proc`, the host's `/dev`
//! and network (as a pod's loopback would be).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docflow_stack::process::Replica;
use docflow_stack::{Stack, free_port};

const TOKEN: &str = "image-test-token";

/// The unpacked image: what its config says a process runs as.
struct Image {
    rootfs: PathBuf,
    env: Vec<String>,
    uid: u64,
    gid: u64,
    cwd: String,
    /// The volume bound at /var/lib/docflow, writable by the image's user.
    volume: tempfile::TempDir,
    logs: tempfile::TempDir,
}

impl Image {
    fn open() -> Self {
        let bundle = PathBuf::from(std::env::var("DOCFLOW_IMAGE_BUNDLE").expect(
            "DOCFLOW_IMAGE_BUNDLE: the unpacked image (run `make image-test`, which builds and unpacks it)",
        ));
        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
        let process = &config["process"];
        let volume = tempfile::tempdir().unwrap();
        let uid = process["user"]["uid"].as_u64().unwrap();
        let gid = process["user"]["gid"].as_u64().unwrap();
        let chown = Command::new("chown")
            .arg(format!("{uid}:{gid}"))
            .arg(volume.path())
            .status()
            .unwrap();
        assert!(chown.success());
        Image {
            rootfs: bundle.join("rootfs"),
            env: process["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect(),
            uid,
            gid,
            cwd: process["cwd"].as_str().unwrap().to_owned(),
            volume,
            logs: tempfile::tempdir().unwrap(),
        }
    }

    /// `program args…` inside the image, as its config says (user, environment, working
    /// directory), the root read-only.
    fn command(&self, program: &str, args: &[String]) -> Command {
        let script = r#"set -e
root="$1"; volume="$2"; uid="$3"; gid="$4"; cwd="$5"; shift 5
mount --make-rprivate /
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$volume" "$root/var/lib/docflow"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
for f in hosts resolv.conf; do mount --bind -o ro "/etc/$f" "$root/etc/$f"; done
# Not exec: this shell stays the namespace's PID 1, so when the test kills it (through
# unshare's --kill-child) the kernel kills the service too. The service's own parent-death
# signal would not: changing to the image's user clears it.
unshare --root="$root" --wd="$cwd" --setgid="$gid" --setuid="$uid" "$@""#;
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args([
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--",
            "/bin/sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&self.rootfs)
        .arg(self.volume.path())
        .arg(self.uid.to_string())
        .arg(self.gid.to_string())
        .arg(&self.cwd)
        .arg(program)
        .args(args)
        // The image's environment only (its PATH finds mount and unshare here too).
        .env_clear()
        .envs(self.env.iter().filter_map(|kv| kv.split_once('=')))
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .stdin(Stdio::null());
        cmd
    }

    fn spawn(&self, name: &str, program: &str, args: &[(&str, String)]) -> Replica {
        let log = std::fs::File::create(self.logs.path().join(format!("{name}.log"))).unwrap();
        let args: Vec<String> = args
            .iter()
            .flat_map(|(k, v)| [(*k).to_owned(), v.clone()])
            .collect();
        let mut cmd = self.command(program, &args);
        cmd.stdout(log.try_clone().unwrap()).stderr(log);
        Replica::spawn(cmd, name, 0).unwrap()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.logs.path()).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out.push_str(&format!("--- {}\n", path.display()));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../samples")
            .join(name),
    )
    .unwrap()
}

/// GET `url` with `query` as the test's tenant; the body as JSON.
async fn get_json(http: &reqwest::Client, url: &str, query: &[(&str, &str)]) -> serde_json::Value {
    http.get(url)
        .query(query)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn wait_ready(http: &reqwest::Client, url: &str, image: &Image) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !http
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} not ready:\n{}",
            image.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: run `make image-test`"]
async fn the_image_runs_every_service_and_reads_documents_end_to_end() {
    let image = Image::open();

    // Every program the image holds starts inside it (a library missing from the image, a
    // loader or a path in its environment that is not there fails here).
    let bins = std::fs::read_dir(image.rootfs.join("usr/local/bin")).unwrap();
    let mut names: Vec<String> = bins
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    for name in &names {
        let out = image
            .command(name, &["--help".to_owned()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name} --help in the image: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The root is read-only and the volume is the image user's.
    let out = image
        .command("docflow", &["probe".to_owned(), "--help".to_owned()])
        .output()
        .unwrap();
    assert!(out.status.success());

    // The broker and the database outside, as a cluster has them.
    let stack = Stack::builder().partitions(2).start().await.unwrap();
    let database = if stack.database_url.starts_with("postgres") {
        stack.database_url.clone()
    } else {
        "sqlite:///var/lib/docflow/docflow.db".to_owned()
    };
    let kafka = stack.broker.bootstrap_servers();
    let http = reqwest::Client::new();

    let registry_port = free_port().unwrap();
    let registry_url = format!("http://127.0.0.1:{registry_port}");
    let started = Instant::now();
    let registry = image.spawn(
        "registry",
        "docflow-registry",
        &[
            ("--listen", format!("127.0.0.1:{registry_port}")),
            (
                "--database-url",
                "sqlite:///var/lib/docflow/registry.db".to_owned(),
            ),
        ],
    );
    wait_ready(&http, &format!("{registry_url}/subjects"), &image).await;
    let registry_ready = started.elapsed();

    let ingest_port = free_port().unwrap();
    let base = format!("http://127.0.0.1:{ingest_port}");
    let common = || {
        vec![
            ("--kafka-bootstrap-servers", kafka.clone()),
            ("--schema-registry-url", registry_url.clone()),
            ("--database-url", database.clone()),
            ("--topic", stack.topics.uploaded.clone()),
            ("--processed-topic", stack.topics.processed.clone()),
        ]
    };
    let mut ingest_args = common();
    ingest_args.extend([
        ("--listen", format!("127.0.0.1:{ingest_port}")),
        ("--token", format!("{TOKEN}=acme")),
        ("--stages", "thumbnails,ocr-embeddings".to_owned()),
    ]);
    let mut cold_starts = vec![("registry", registry_ready)];
    let started = Instant::now();
    let ingest = image.spawn("ingest", "docflow-ingest", &ingest_args);
    wait_ready(&http, &format!("{base}/readyz"), &image).await;
    cold_starts.push(("ingest", started.elapsed()));
    // The stages once ingest has migrated the database, each until its /readyz answers
    // (the OCR stage: its page-reading workers started with the image's models).
    let mut stages = Vec::new();
    for (name, program) in [
        ("thumbnails", "docflow-thumbnails"),
        ("ocr-embeddings", "docflow-ocr-embeddings"),
        ("analytics-rollup", "docflow-analytics-rollup"),
    ] {
        let port = free_port().unwrap();
        let mut args = common();
        args.push(("--group", format!("{name}-{}", stack.topics.uploaded)));
        args.push(("--metrics-listen", format!("127.0.0.1:{port}")));
        let started = Instant::now();
        stages.push(image.spawn(name, program, &args));
        wait_ready(&http, &format!("http://127.0.0.1:{port}/readyz"), &image).await;
        cold_starts.push((name, started.elapsed()));
    }
    // `make image-bench` keeps these (process start to ready, from the image).
    if let Some(path) = std::env::var_os("DOCFLOW_IMAGE_COLD_STARTS") {
        let lines: String = cold_starts
            .iter()
            .map(|(name, d)| format!("{name} {:.3}\n", d.as_secs_f64()))
            .collect();
        std::fs::write(path, lines).unwrap();
    }

    // A text PDF and a scan, each through both stages.
    let mut ids = Vec::new();
    for name in ["report-q3.pdf", "scan-delivery-note.png"] {
        let r = http
            .post(format!("{base}/v1/documents"))
            .query(&[("filename", name), ("wait", "120s")])
            .bearer_auth(TOKEN)
            .body(sample(name))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let job: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            status,
            reqwest::StatusCode::OK,
            "{name}: {job}\n{}",
            image.logs()
        );
        assert_eq!(job["pipeline"], "done", "{name}: {job}\n{}", image.logs());
        for stage in job["stages"].as_array().unwrap() {
            assert_eq!(stage["status"], "done", "{name}: {stage}");
        }
        let thumbnail = job["thumbnail_url"].as_str().unwrap();
        let png = http
            .get(format!("{base}{thumbnail}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(
            png.status().is_success(),
            "{name}: thumbnail {}",
            png.status()
        );
        assert!(png.bytes().await.unwrap().starts_with(b"\x89PNG"));
        ids.push(job["job_id"].as_str().unwrap().to_owned());
    }
    // Search embeds the query in ingest, with the model baked into the image.
    let found = get_json(
        &http,
        &format!("{base}/v1/search"),
        &[("q", "delivery note"), ("k", "3")],
    )
    .await;
    let results = found["results"].as_array().unwrap();
    assert!(
        results
            .iter()
            .any(|r| ids.contains(&r["document_id"].as_str().unwrap().to_owned())),
        "{found}"
    );
    // The rollup, the third group, counted both.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let body = get_json(
            &http,
            &format!("{base}/v1/analytics"),
            &[("granularity", "day")],
        )
        .await;
        if body["totals"]["documents"].as_i64() == Some(2) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollup: {body}\n{}",
            image.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Nothing was written outside the volume: the root is read-only, so a write would have
    // failed a service; the volume holds the objects (and SQLite's files).
    assert!(image.volume.path().join("objects").is_dir());

    // Killing a launcher kills its service: none outlives the test.
    drop(stages);
    drop(ingest);
    drop(registry);
    let ours = [
        format!("127.0.0.1:{ingest_port}"),
        format!("127.0.0.1:{registry_port}"),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("/usr/local/bin/docflow-") || c.starts_with("docflow-"))
            .filter(|c| ours.iter().any(|o| c.contains(o.as_str())))
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "services outlived the test: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
