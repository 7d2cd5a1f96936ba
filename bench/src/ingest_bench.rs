//! Ingest latency: p50/p99 of `POST /v1/documents` with a 100 KiB PDF at a fixed rate, against
//! the bare produce-and-ack latency of a `doc.uploaded` event on the same broker at the same
//! rate. The ratio is what validation, storing the blob and the job record add on top of the
//! one step a request must wait for. A third path, HTTP alone (the same client and body
//! against a server on the same HTTP stack that only reads the body and answers `202`),
//! shows how much of that is the HTTP exchange any upload API pays. A fourth, the disk alone
//! (a POST's own writes and fsyncs, made as ingest makes them, nothing else), shows what a
//! POST must wait for on this machine's disk whatever the rest of its code does. `make bench`
//! writes `bench/results/ingest.md`.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use docflow_bench::{paced, percentiles, report_head};
use docflow_events::{DocUploaded, EventCodec, document_id};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::producer::{request_producer, send_event};
use docflow_runtime::trace::TraceContext;

#[derive(Debug, Parser)]
struct Args {
    /// Requests per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// Requests in each run.
    #[arg(long, default_value_t = 1_000)]
    requests: usize,
    /// How the paths take turns: `blocks` (each block one path's calls, one every 1/rate s:
    /// what `make bench` runs) or `interleaved` (bare, POST, HTTP alone, disk alone, bare, ...
    /// one call every 1/rate s, so each path runs at a quarter of the rate, and each call
    /// follows one of another path).
    #[arg(long, value_enum, default_value_t = Order::Blocks)]
    order: Order,
    /// Rounds: each path's requests are split into this many blocks, run in turn (bare,
    /// POST, HTTP alone, disk alone, bare, ...), so the paths see the same machine, whatever
    /// else it does (with `--order interleaved`, the rounds only split the calls for the
    /// per-round ratios).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Document size in KiB.
    #[arg(long, default_value_t = 100)]
    kib: usize,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/ingest.md")]
    out: std::path::PathBuf,
    /// Do not run `sync` before the measured calls: leave what other programs wrote in the
    /// page cache, to see what the writeback of a build does to a run.
    #[arg(long)]
    no_sync: bool,
    /// Also write every call as a CSV row (path, its number, round, total and each step in
    /// ms, in the order the calls were made within each path), to look at when the slow ones
    /// came.
    #[arg(long, value_name = "FILE")]
    csv: Option<std::path::PathBuf>,
}

/// How the bare sends, the POSTs and HTTP alone take turns (`--order`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Order {
    /// A block of one path's calls, then a block of the next one's.
    Blocks,
    /// One call of each path in turn.
    Interleaved,
}

/// The paths: bare, POST, HTTP alone, the disk alone.
const PATHS: usize = 4;

/// One call of any path.
type Call = std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;

/// A call this slow or slower is counted in the report, and a POST step this long is a wait
/// on the disk that stalled (an fsync or the job's commit take 0.3–0.6 ms at p50).
const SLOW_MS: f64 = 10.0;

/// Resamplings of the bootstrap interval of the p99 ratio.
const BOOTSTRAP: usize = 2_000;

/// The 95 % bootstrap interval of p99(post) / p99(bare): each path's calls resampled with
/// replacement (a fixed seed: the same calls give the same interval).
fn p99_ratio_interval(bare: &[f64], post: &[f64]) -> (f64, f64) {
    use rand::{Rng, SeedableRng};
    if bare.is_empty() || post.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let mut resample = |v: &[f64]| -> Vec<f64> {
        (0..v.len())
            .map(|_| v[rng.random_range(0..v.len())])
            .collect()
    };
    let mut ratios: Vec<f64> = (0..BOOTSTRAP)
        .map(|_| percentiles(resample(post)).1 / percentiles(resample(bare)).1)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[(q * (ratios.len() - 1) as f64).round() as usize];
    (at(0.025), at(0.975))
}

/// A valid-looking PDF of about `kib` KiB, unique per `i` (so no upload is a duplicate).
fn document(i: usize, kib: usize) -> Vec<u8> {
    let sample = include_bytes!("../../samples/report-q3.pdf");
    let mut out = Vec::with_capacity(kib * 1024 + sample.len());
    out.extend_from_slice(b"%PDF-1.4\n");
    out.extend_from_slice(format!("%docflow-bench document {i}\n").as_bytes());
    while out.len() + sample.len() < kib * 1024 {
        out.extend_from_slice(
            b"% padding padding padding padding padding padding padding padding\n",
        );
    }
    out.extend_from_slice(&sample[9..]);
    out
}

/// `a;dur=1.5, b;dur=2` → `[("a", 1.5), ("b", 2.0)]`.
fn parse_server_timing(header: &str) -> Vec<(String, f64)> {
    header
        .split(',')
        .filter_map(|part| {
            let mut fields = part.trim().split(';');
            let name = fields.next()?.trim().to_owned();
            let dur = fields.find_map(|f| f.trim().strip_prefix("dur="))?;
            Some((name, dur.parse().ok()?))
        })
        .collect()
}

/// The time the client saw outside ingest's own steps.
const OUTSIDE: &str = "outside";

fn step_meaning(name: &str) -> &'static str {
    match name {
        OUTSIDE => {
            "the client's time not in a step: HTTP framing and parsing at both ends, the client, scheduling"
        }
        "auth" => "token → tenant, query",
        "receive" => "body received (held in memory up to 1 MiB), hashed",
        "check" => {
            "PDF checked, file written and linked under its key (its fsync starts); the job read (duplicate check) when the key held a blob already, or beside the rest for bodies over 1 MiB"
        }
        "store" => {
            "(bodies over 1 MiB only) staged file linked under its key (a blob already there with the same bytes is kept)"
        }
        "persist" => {
            "at once: encode + produce + broker ack; file and directory fsynced; the job record written"
        }
        "reply" => "answer built (the job's `accepted` mark is written after it)",
        "check.pdf" => {
            "· part of `check.store` (of `check` for bodies over 1 MiB): the PDF's structure and pages checked"
        }
        "check.store" => {
            "· part of `check`: on the request's thread (`block_in_place`), the PDF checked, then the file written and linked under its key (its fsync starts on a blocking thread)"
        }
        "check.write" => {
            "· part of `check` (bodies over 1 MiB only): the rest of the staged file written"
        }
        "check.lookup" => {
            "· part of `check`: the job read (duplicate check), only when the key held a blob already (bodies over 1 MiB: always, beside the write)"
        }
        "persist.fsync" => {
            "· part of `persist`: the file's and directory's fsyncs finished (begun in `check`)"
        }
        "persist.record" => "· part of `persist`: the job record written (beside the fsyncs)",
        "persist.produce" => "· part of `persist`: encode + produce + broker ack",
        _ => "",
    }
}

/// Writes out the page cache's dirty pages (`sync`): whether `sync` succeeded, and how many
/// MiB were dirty before, when `/proc/meminfo` tells. The release build `make bench` runs
/// just before this bench leaves a few hundred MiB of them; the kernel writes them back once they are 30 s old
/// (`vm.dirty_expire_centisecs`), which fell in the middle of the run, and every fsync queued
/// behind that writeback for 50–150 ms: each POST waits for its fsyncs, the bare sends for
/// none, so those runs measured the build's writeback, not ingest.
async fn flush_page_cache() -> (bool, Option<f64>) {
    let dirty = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("Dirty:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    });
    let synced = match tokio::process::Command::new("sync").status().await {
        Ok(status) if status.success() => true,
        other => {
            eprintln!(
                "`sync` failed ({other:?}): the writeback of earlier writes may land in the run"
            );
            false
        }
    };
    (synced, dirty.map(|kib| kib / 1024.0))
}

/// Every call as a row: `path,n,round,total_ms`, then each POST step's ms (empty for the bare
/// sends, HTTP alone and the disk alone, and for a step a POST did not have).
fn write_csv(
    path: &std::path::Path,
    plain: &[(&str, &[f64], &[usize])],
    api: &[f64],
    api_rounds: &[usize],
    steps: &[Vec<(String, f64)>],
) -> anyhow::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in steps.iter().flatten() {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    let mut csv = ["path", "n", "round", "total_ms"]
        .into_iter()
        .chain(names.iter().copied())
        .collect::<Vec<_>>()
        .join(",");
    csv.push('\n');
    for &(name, calls, rounds) in plain {
        for (n, (ms, round)) in calls.iter().zip(rounds).enumerate() {
            writeln!(csv, "{name},{n},{round},{ms:.3}{}", ",".repeat(names.len()))?;
        }
    }
    for (n, ((ms, round), s)) in api.iter().zip(api_rounds).zip(steps).enumerate() {
        write!(csv, "post,{n},{round},{ms:.3}")?;
        for name in &names {
            csv.push(',');
            if let Some((_, v)) = s.iter().find(|(step, _)| step == name) {
                write!(csv, "{v:.3}")?;
            }
        }
        csv.push('\n');
    }
    std::fs::write(path, csv).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The tenant the disk alone stores under (its own directory and job rows).
const DISK_TENANT: &str = "bench-disk";

/// The disk alone: a POST's own work on the disk, as ingest does it for a body held in
/// memory (`services/ingest/src/api.rs`, `upload`): the bytes written into a spare staged file
/// and linked under their key (`check_and_commit`, with a check that passes), then at once the
/// file's and directory's fsyncs and the job record (`stored`), and the `accepted` mark after,
/// off the timed path. On the stack's own object store and database, under [`DISK_TENANT`].
/// Nothing else: no HTTP, hash, PDF check or broker, and nothing beside it (a POST's disk work
/// shares the machine with its produce). The timed part also copies the body into the staged
/// blob (10–20 µs for 100 KiB), which ingest does while it receives. What a POST must wait for
/// on this disk, whatever the rest of its code does.
#[derive(Clone)]
struct DiskAlone {
    blobs: docflow_store::Blobs,
    jobs: docflow_store::Jobs,
    /// The `accepted` marks under way, awaited by [`DiskAlone::finish`].
    marks: std::sync::Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
}

/// The pool size ingest opens its database with by default (`--database-max-connections`).
const DATABASE_CONNECTIONS: u32 = 8;

impl DiskAlone {
    /// A store and a job table as ingest opens them: the stack's object store with ingest's
    /// spare staged files, and a pool on the stack's database.
    async fn open(stack: &docflow_stack::Stack) -> anyhow::Result<Self> {
        let blobs = docflow_store::Blobs::open(&stack.objects)?
            .keep_spare_files(docflow_ingest::SPARE_FILES);
        let pool = docflow_store::open(&stack.database_url, DATABASE_CONNECTIONS).await?;
        Ok(DiskAlone {
            blobs,
            jobs: docflow_store::Jobs::new(pool),
            marks: std::sync::Arc::default(),
        })
    }

    /// Waits for the `accepted` marks still under way, then removes the spare files.
    async fn finish(&self) -> anyhow::Result<()> {
        let mut marks =
            std::mem::take(&mut *self.marks.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
        while let Some(marked) = marks.join_next().await {
            marked?;
        }
        self.blobs.release_spare_files();
        Ok(())
    }

    /// Stores `body` (whose id is `id`) and records its job, as an upload does.
    async fn call(self, id: String, body: Vec<u8>) -> anyhow::Result<()> {
        use docflow_store::jobs::status;
        let key = docflow_store::Blobs::key([DISK_TENANT, id.as_str()]);
        let mut staged = self.blobs.stage_buffered(body.len());
        staged.write(&body).await?;
        let passes = || Ok::<(), std::convert::Infallible>(());
        let docflow_store::Checked::Kept {
            committed, syncing, ..
        } = self
            .blobs
            .check_and_commit(&mut staged, &key, passes)
            .await?;
        drop(staged);
        let job = docflow_store::Job {
            job_id: id.clone(),
            tenant_id: DISK_TENANT.into(),
            status: status::STORED.into(),
            object_uri: self.blobs.uri(&key),
            content_type: "application/pdf".into(),
            size_bytes: i64::try_from(body.len())?,
            file_name: None,
            uploads: 1,
            created_at_ms: now_ms(),
            produced_at_ms: None,
        };
        let (durable, recorded) = tokio::join!(
            self.blobs.sync_committed(&key, committed, syncing),
            self.jobs.record_upload(&job)
        );
        durable?;
        recorded?;
        let jobs = self.jobs.clone();
        let mark = async move {
            let marked = jobs
                .set_status(DISK_TENANT, &id, status::ACCEPTED, Some(now_ms()))
                .await;
            if let Err(e) = marked {
                eprintln!("the disk alone's `accepted` mark failed: {e}");
            }
        };
        self.marks
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .spawn(mark);
        Ok(())
    }
}

/// One upload as the bench's client makes it: `body` to `url` with the bench's token. The
/// answer must be `202`.
async fn upload(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> anyhow::Result<reqwest::Response> {
    let r = http
        .post(url)
        .bearer_auth(docflow_bench::TOKEN)
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(r.status() == 202, "status {}", r.status());
    Ok(r)
}

/// How long an idle connection of [`http_alone`] is kept: ingest's `--header-timeout` default.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP alone: hyper's HTTP/1 with ingest's connection settings (keep-alive, no Nagle
/// delay, a header timeout) and an axum router, whose one route, `POST /v1/documents`, reads
/// the whole body and answers `202` with a body and `Location` like ingest's. None of
/// ingest's own work: no middleware (span, metrics), auth, hash, check, disk, database,
/// broker or `Server-Timing`. Returns its URL.
async fn http_alone() -> anyhow::Result<String> {
    use hyper_util::rt::TokioIo;
    use tower::ServiceExt as _;
    let accept = |body: axum::body::Bytes| async move {
        // A job id of ingest's length.
        let id = format!("{:064x}", body.len());
        (
            axum::http::StatusCode::ACCEPTED,
            [(axum::http::header::LOCATION, format!("/v1/jobs/{id}"))],
            axum::Json(serde_json::json!({
                "job_id": id,
                "status_url": format!("/v1/jobs/{id}"),
                "status": "accepted",
                "duplicate": false,
            })),
        )
    };
    let app = axum::Router::new()
        .route("/v1/documents", axum::routing::post(accept))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let http = docflow_ingest::http1(HEADER_TIMEOUT);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let app = app.clone();
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    app.clone().oneshot(req.map(axum::body::Body::new))
                });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            tokio::spawn(conn);
        }
    });
    Ok(format!("http://{addr}/v1/documents"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = docflow_bench::stack()
        .start()
        .await
        .context("starting the stack")?;
    let topic = stack.topics.uploaded.clone();

    // Bare produce-and-ack of the event a request produces.
    let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(5))?;
    let producer = request_producer(&stack.kafka(), "bench-bare")?;
    let template = DocUploaded {
        document_id: String::new(),
        tenant_id: "bench".into(),
        object_uri: "file:///tmp/x".into(),
        content_type: "application/pdf".into(),
        size_bytes: (args.kib * 1024) as i64,
        original_file_name: None,
        uploaded_at: 0,
        producer_version: "bench".into(),
    };
    let codec = std::sync::Arc::new(codec);
    // What a request must wait for: the same `send_event` ingest uses (encode through the
    // registry, traceparent header, produce, ack), through a producer set up as ingest's is
    // (`request_producer`: `linger.ms=0`).
    let bare_send = move |name: String| {
        let (producer, codec, topic) = (producer.clone(), codec.clone(), topic.clone());
        let mut ev = template.clone();
        ev.document_id = document_id(name.as_bytes());
        async move {
            let trace = TraceContext::new_root();
            let timeout = Duration::from_secs(10);
            send_event(
                &producer,
                &codec,
                &topic,
                &ev.document_id,
                &ev,
                &trace,
                timeout,
            )
            .await?;
            Ok(())
        }
    };
    // Warm-up (not measured): schema registration, producer metadata, connections.
    for i in 0..20 {
        bare_send(format!("warm {i}")).await?;
    }

    // The API.
    let base = format!("{}/v1/documents", stack.ingest_url());
    let http = reqwest::Client::new();
    let docs: Vec<Vec<u8>> = (0..args.requests).map(|i| document(i, args.kib)).collect();
    let docs = std::sync::Arc::new(docs);
    // Each answer's `Server-Timing` steps (name, ms), in order, by request.
    let steps = std::sync::Arc::new(std::sync::Mutex::new(vec![
        Vec::<(String, f64)>::new();
        args.requests
    ]));
    let warm_up = |url: &String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            for i in 0..20 {
                let body = document(args.requests + i, args.kib);
                upload(&http, &url, body).await.context("warm-up")?;
            }
            Ok::<_, anyhow::Error>(())
        }
    };
    warm_up(&base).await?;
    let post = |i: usize| {
        let (http, base, docs, steps) = (http.clone(), base.clone(), docs.clone(), steps.clone());
        async move {
            let r = upload(&http, &base, docs[i].clone()).await?;
            let timing = r
                .headers()
                .get("server-timing")
                .and_then(|v| v.to_str().ok())
                .map(parse_server_timing)
                .unwrap_or_default();
            if let Some(slot) = steps
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .get_mut(i)
            {
                *slot = timing;
            }
            Ok(())
        }
    };
    // HTTP alone: the same client and bodies.
    let alone = http_alone().await.context("serving HTTP alone")?;
    warm_up(&alone).await?;
    let http_call = |i: usize| {
        let (http, alone, docs) = (http.clone(), alone.clone(), docs.clone());
        async move { upload(&http, &alone, docs[i].clone()).await.map(drop) }
    };
    // The disk alone: what a POST waits for on the disk, made as ingest makes it, on the
    // stack's own object store and database (tenant `bench-disk`), without HTTP, checks or
    // the broker.
    let disk = DiskAlone::open(&stack).await.context("the disk alone")?;
    for i in 0..20 {
        let body = document(args.requests + i, args.kib);
        disk.clone()
            .call(document_id(&body), body)
            .await
            .context("warm-up")?;
    }
    let ids: Vec<String> = docs.iter().map(|d| document_id(d)).collect();
    let disk_call = |i: usize| disk.clone().call(ids[i].clone(), docs[i].clone());
    let flushed = if args.no_sync {
        None
    } else {
        Some(flush_page_cache().await)
    };
    let rounds = args.rounds.clamp(1, args.requests.max(1));
    let (mut bare, mut api, mut alone_ms, mut disk_ms, mut round_ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The round of each call, by path.
    let (mut bare_rounds, mut api_rounds, mut alone_rounds, mut disk_rounds) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (from, to) = (r * args.requests / rounds, (r + 1) * args.requests / rounds);
        let (b, a, h, d) = match args.order {
            Order::Blocks => {
                let b = paced(to - from, args.rate, |i| {
                    bare_send(format!("bare {}", from + i))
                })
                .await?;
                let a = paced(to - from, args.rate, |i| post(from + i)).await?;
                let h = paced(to - from, args.rate, |i| http_call(from + i)).await?;
                let d = paced(to - from, args.rate, |i| disk_call(from + i)).await?;
                (b, a, h, d)
            }
            Order::Interleaved => {
                let calls = paced(PATHS * (to - from), args.rate, |k| -> Call {
                    let i = from + k / PATHS;
                    match k % PATHS {
                        0 => Box::pin(bare_send(format!("bare {i}"))),
                        1 => Box::pin(post(i)),
                        2 => Box::pin(http_call(i)),
                        _ => Box::pin(disk_call(i)),
                    }
                })
                .await?;
                let path = |p: usize| {
                    calls
                        .iter()
                        .skip(p)
                        .step_by(PATHS)
                        .copied()
                        .collect::<Vec<_>>()
                };
                (path(0), path(1), path(2), path(3))
            }
        };
        round_ratios.push(percentiles(a.clone()).0 / percentiles(b.clone()).0);
        bare_rounds.extend(std::iter::repeat_n(r, b.len()));
        api_rounds.extend(std::iter::repeat_n(r, a.len()));
        alone_rounds.extend(std::iter::repeat_n(r, h.len()));
        disk_rounds.extend(std::iter::repeat_n(r, d.len()));
        bare.extend(b);
        api.extend(a);
        alone_ms.extend(h);
        disk_ms.extend(d);
    }
    disk.finish().await?;
    stack.stop().await?;

    let bare_all = bare.clone();
    let (b50, b99, bmax) = percentiles(bare);
    let latencies = api.clone();
    let (a50, a99, amax) = percentiles(api);
    let (h50, h99, hmax) = percentiles(alone_ms.clone());
    let (d50, d99, dmax) = percentiles(disk_ms.clone());
    println!(
        "bare produce+ack: p50 {b50:.1} ms p99 {b99:.1} ms; POST: p50 {a50:.1} ms p99 {a99:.1} ms; HTTP alone: p50 {h50:.2} ms p99 {h99:.2} ms; disk alone: p50 {d50:.2} ms p99 {d99:.2} ms"
    );
    let mut md = String::new();
    md.push_str(&report_head(
        "Ingest latency",
        "ingest-bench",
        "broker: embedded Nisshi (memory) on loopback; registry and job store: SQLite",
    ));
    writeln!(
        md,
        "{} requests per path, {} KiB PDFs (each unique), after 20 unmeasured warm-up calls per path; {}\n",
        args.requests,
        args.kib,
        match args.order {
            Order::Blocks => format!(
                "{}/s; the paths take turns in {rounds} blocks each (bare, POST, HTTP alone, disk alone, bare, ...) and the figures pool them.",
                args.rate
            ),
            Order::Interleaved => format!(
                "{}/s in all, the paths taking turns call by call (`--order interleaved`: {:.1}/s each).",
                args.rate,
                args.rate / PATHS as f64
            ),
        }
    )?;
    writeln!(
        md,
        "{}\n",
        match flushed {
            Some((true, Some(mib))) => format!(
                "Before the first measured call, `sync` wrote out the page cache's dirty pages ({mib:.0} MiB: \
                 earlier writes, such as the build `make bench` runs first), so that their writeback does not \
                 land in the run."
            ),
            Some((true, None)) => "Before the first measured call, `sync` wrote out the page cache's dirty pages.".to_owned(),
            Some((false, _)) => "`sync` failed before the first measured call: the writeback of earlier writes may \
                                 land in the run."
                .to_owned(),
            None => "`--no-sync`: dirty pages left by earlier writes were not written out first; their writeback \
                     may land in the run."
                .to_owned(),
        }
    )?;
    writeln!(md, "| path | p50 | p99 | max |\n|---|---|---|---|")?;
    writeln!(
        md,
        "| bare: `send_event` with ingest's producer settings (encode `doc.uploaded`, produce with `linger.ms=0`, wait for ack) | {b50:.1} ms | {b99:.1} ms | {bmax:.1} ms |"
    )?;
    writeln!(
        md,
        "| `POST /v1/documents` (auth, read body, sha256, sniff, PDF check, blob write + fsync, job record, produce + ack, 202) | {a50:.1} ms | {a99:.1} ms | {amax:.1} ms |"
    )?;
    writeln!(
        md,
        "| HTTP alone: the same client and body against a server in the bench (hyper HTTP/1 with ingest's connection settings, an axum router, no middleware) that reads the body and answers `202` | {h50:.2} ms | {h99:.2} ms | {hmax:.1} ms |"
    )?;
    writeln!(
        md,
        "| disk alone: a POST's own disk work as ingest does it, on the stack's object store and database (tenant `{DISK_TENANT}`): the bytes written into a spare staged file and linked under their key, then at once the file's and directory's fsyncs and the job record; no HTTP, hash, check or broker | {d50:.2} ms | {d99:.2} ms | {dmax:.1} ms |"
    )?;
    writeln!(
        md,
        "\nRatio POST / bare: p50 **{:.2}**, p99 **{:.2}**",
        a50 / b50,
        a99 / b99
    )?;
    writeln!(
        md,
        "\nAt p50 the POST took {a50:.2} ms: the bare send's {b50:.2} and HTTP alone's {h50:.2} \
         ({:.2}× the bare send together) leave {:.2} ms for the rest — ingest's steps, its own \
         HTTP-side work (middleware, headers) and the contention between them (medians do not \
         add exactly).",
        (b50 + h50) / b50,
        a50 - b50 - h50,
    )?;
    // What the goal leaves, against what the disk alone takes: a POST promises its bytes and
    // its job on disk before it answers, so it waits for the disk alone's work, beside the
    // send, whatever the rest of its code does.
    let budget = 1.5 * b99;
    writeln!(
        md,
        "\nThe goal (issue 12), POST p99 ≤ 1.5× the bare send's p99, leaves {budget:.2} ms for a POST in \
         this run. The disk alone — what a POST must wait for on this disk before it may answer, \
         beside the send — took {d50:.2} ms at p50 ({:.2}× the bare send's p50) and {d99:.2} ms at p99 \
         ({:.2}× the bare send's p99, {:.0} % of the goal's budget); HTTP alone takes another {h50:.2} ms \
         at p50 ({:.0} % of the budget).",
        d50 / b50,
        d99 / b99,
        100.0 * d99 / budget,
        100.0 * h50 / budget,
    )?;
    let (lo, hi) = p99_ratio_interval(&bare_all, &latencies);
    writeln!(
        md,
        "\nThe p99 ratio rests on each path's ten or so slowest calls: resampling each path's calls \
         (with replacement, {BOOTSTRAP} times) gives a 95 % interval of {lo:.2}–{hi:.2}. It treats \
         the calls as independent, so the spread between runs can be wider."
    )?;
    writeln!(
        md,
        "\nRatio at p50 in each {}: {}",
        match args.order {
            Order::Blocks => "block",
            Order::Interleaved => "round",
        },
        round_ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let steps = std::mem::take(&mut *steps.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    // The slow calls of each path, and the POSTs whose disk stalled: a wait on the disk is
    // part of what a POST promises (the bytes and the job on disk), and the bare sends have
    // none, so when the POST at the p99 is one of them, the p99 ratio measures the disk.
    let slow = |v: &[f64]| v.iter().filter(|ms| **ms >= SLOW_MS).count();
    let waited_on_disk = |s: &[(String, f64)]| {
        s.iter().any(|(name, ms)| {
            matches!(name.as_str(), "persist.fsync" | "persist.record") && *ms >= SLOW_MS
        })
    };
    let disk_waits = steps.iter().filter(|s| waited_on_disk(s)).count();
    // The POST at the p99 rank, as `percentiles` ranks them.
    let mut ranked: Vec<usize> = (0..latencies.len()).collect();
    ranked.sort_by(|&i, &j| latencies[i].total_cmp(&latencies[j]));
    let p99_waited = ranked
        .get((0.99 * (ranked.len() as f64 - 1.0)).round() as usize)
        .and_then(|&i| steps.get(i))
        .is_some_and(|s| waited_on_disk(s));
    writeln!(
        md,
        "\nCalls of {SLOW_MS} ms or more: bare {}, POST {}, HTTP alone {}, disk alone {}; POSTs that waited {SLOW_MS} ms or more on the disk \
         (`persist.fsync` or `persist.record`): {disk_waits}{}",
        slow(&bare_all),
        slow(&latencies),
        slow(&alone_ms),
        slow(&disk_ms),
        if p99_waited {
            " (the POST at the p99 is one of them: the p99 ratio measures the disk here)"
        } else {
            ""
        }
    )?;
    if let Some(path) = &args.csv {
        write_csv(
            path,
            &[
                ("bare", &bare_all, &bare_rounds),
                ("http", &alone_ms, &alone_rounds),
                ("disk", &disk_ms, &disk_rounds),
            ],
            &latencies,
            &api_rounds,
            &steps,
        )?;
    }
    writeln!(
        md,
        "\n## Where a POST's time goes (ingest's `Server-Timing` header, per step)\n\n\
         | step | what | p50 | p99 | max |\n|---|---|---|---|---|"
    )?;
    // Every request's steps (and their parts) plus what the client saw outside them (HTTP on both ends,
    // the client, scheduling): request i is `latencies[i]` (the blocks run in order).
    let mut names: Vec<String> = steps
        .first()
        .map(|s| s.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let mut rows: Vec<(f64, Vec<f64>)> = steps
        .iter()
        .zip(&latencies)
        .filter(|(s, _)| s.iter().map(|(n, _)| n).eq(names.iter()))
        .map(|(s, total)| {
            let mut v: Vec<f64> = s.iter().map(|(_, ms)| *ms).collect();
            // Parts (`step.part`) overlap within their step: only the steps add up.
            let steps: f64 = s
                .iter()
                .filter(|(n, _)| !n.contains('.'))
                .map(|(_, ms)| *ms)
                .sum();
            v.push(total - steps);
            (*total, v)
        })
        .collect();
    names.push(OUTSIDE.to_owned());
    for (k, name) in names.iter().enumerate() {
        let values: Vec<f64> = rows.iter().map(|(_, v)| v[k]).collect();
        if values.is_empty() {
            continue;
        }
        let (p50, p99, max) = percentiles(values);
        writeln!(
            md,
            "| `{name}` | {} | {p50:.2} ms | {p99:.2} ms | {max:.2} ms |",
            step_meaning(name)
        )?;
    }
    // Where the time of the requests that make the p99 went, beside the typical ones' and
    // the slowest few: requests ranked by what the client saw, the median of each step in
    // each band (medians: one outlier does not speak for its band).
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = rows.len();
    if n >= 200 {
        let band = |from: f64, to: f64| {
            let lo = ((n as f64 * from) as usize).min(n - 1);
            let hi = ((n as f64 * to) as usize).clamp(lo + 1, n);
            &rows[lo..hi]
        };
        let median = |part: &[(f64, Vec<f64>)], k: Option<usize>| {
            let mut v: Vec<f64> = part
                .iter()
                .map(|(total, steps)| k.map_or(*total, |k| steps[k]))
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let bands = [band(0.45, 0.55), band(0.985, 0.995), band(0.995, 1.0)];
        writeln!(
            md,
            "\n## Around the p99: median per step of the POSTs ranked 98.5–99.5 % ({}), against the middle 10 % ({}) and the slowest 0.5 % ({})\n\n\
             | step | middle 10 % | around the p99 | slowest 0.5 % |\n|---|---|---|---|",
            bands[1].len(),
            bands[0].len(),
            bands[2].len()
        )?;
        for (k, name) in names.iter().enumerate() {
            let [a, b, c] = bands.map(|r| median(r, Some(k)));
            writeln!(md, "| `{name}` | {a:.2} ms | {b:.2} ms | {c:.2} ms |")?;
        }
        let [a, b, c] = bands.map(|r| median(r, None));
        writeln!(md, "| total | {a:.2} ms | {b:.2} ms | {c:.2} ms |")?;
    }
    if n < steps.len() {
        writeln!(
            md,
            "\n{} POSTs left out of the step tables: their `Server-Timing` listed other steps.",
            steps.len() - n
        )?;
    }
    pdf_check_costs(&mut md, args.kib)?;
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}

/// The page limit the PDF check is timed with: ingest's `--max-pages` default.
const MAX_PAGES: usize = 2_000;

/// A document made to cost the PDF check the most for its size, `mib` MiB, with a
/// trailer that passes its first tests: page markers and object-stream markers by the
/// hundred thousand, far from or near the headers and dictionaries the check looks back for.
/// `kind` picks one of [`CRAFTED`].
fn crafted_pdf(kind: usize, mib: usize) -> Vec<u8> {
    let size = mib << 20;
    let mut v = b"%PDF-1.5\n".to_vec();
    let mut n = 0usize;
    while v.len() < size {
        n += 1;
        match kind {
            0 => v.extend_from_slice(b"/Type/Page "),
            1 => {
                v.extend_from_slice(b"1 0 obj ");
                for _ in 0..370 {
                    v.extend_from_slice(b"/Type/Page ");
                }
            }
            2 => v.extend_from_slice(format!("{n} 0 obj /Type/Page ").as_bytes()),
            3 => v.extend_from_slice(b"/ObjStm stream\nx\nendstream "),
            _ => {
                v.extend_from_slice(b"<<");
                for _ in 0..150 {
                    v.extend_from_slice(b"/ObjStm stream\nx\nendstream ");
                }
            }
        }
    }
    v.extend_from_slice(b"\nxref\nstartxref\n9\n%%EOF\n");
    v
}

/// The documents of [`crafted_pdf`], by kind.
const CRAFTED: [&str; 5] = [
    "`/Type/Page` repeated, no object header",
    "`1 0 obj` and 4 KiB of `/Type/Page`, repeated",
    "`N 0 obj /Type/Page`, N = 1, 2, 3, ... (a page object every ~20 bytes)",
    "`/ObjStm` with a one-byte stream, repeated, no dictionary",
    "`<<` and 4 KiB of one-byte object streams, repeated",
];

/// How long ingest's PDF check takes on [`crafted_pdf`]s of 1 MiB (held in memory) and 50 MiB
/// (the default upload limit): what one upload can cost a check slot (`--pdf-checks`).
fn pdf_check_costs(md: &mut String, kib: usize) -> anyhow::Result<()> {
    writeln!(
        md,
        "\n## The PDF check on crafted documents\n\n\
         What one upload can hold a check slot (`--pdf-checks`) for: `check_pdf` on documents \
         made to cost it the most for their size (one run each, this machine).\n\n\
         | document | 1 MiB | 50 MiB | verdict |\n|---|---|---|---|"
    )?;
    for (kind, name) in CRAFTED.iter().enumerate() {
        let timed = |bytes: &[u8]| {
            let started = std::time::Instant::now();
            let verdict = docflow_ingest::sniff::check_pdf(bytes, MAX_PAGES);
            (started.elapsed().as_secs_f64() * 1e3, verdict)
        };
        let (small_ms, _) = timed(&crafted_pdf(kind, 1));
        let (large_ms, verdict) = timed(&crafted_pdf(kind, 50));
        let verdict = match verdict {
            Ok(pages) => format!("accepted, {pages} page(s)"),
            Err(e) => format!("422: {e}"),
        };
        writeln!(
            md,
            "| {name} | {small_ms:.1} ms | {large_ms:.1} ms | {verdict} |"
        )?;
    }
    // Against an ordinary document: the one this bench uploads.
    let ordinary = document(0, kib);
    let checks = 1_000;
    let started = std::time::Instant::now();
    for _ in 0..checks {
        std::hint::black_box(docflow_ingest::sniff::check_pdf(
            std::hint::black_box(&ordinary),
            MAX_PAGES,
        ))
        .map_err(|e| anyhow::anyhow!("the bench's own PDF refused: {e}"))?;
    }
    writeln!(
        md,
        "\nThe {kib} KiB PDF this bench uploads: {:.1} µs a check (mean of {checks}).",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(checks)
    )?;
    Ok(())
}
