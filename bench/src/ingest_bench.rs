//! Ingest latency: p50/p99 of `POST /v1/documents` with a 100 KiB PDF at a fixed rate, against
//! the bare produce-and-ack latency of a `doc.uploaded` event on the same broker at the same
//! rate. The ratio is what validation, storing the blob and the job record add on top of the
//! one step a request must wait for. `make bench` writes `bench/results/ingest.md`.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use docflow_bench::{paced, percentiles, report_head};
use docflow_events::{DocUploaded, EventCodec, document_id};
use docflow_runtime::producer::{idempotent_producer, send_event};
use docflow_runtime::trace::TraceContext;

#[derive(Debug, Parser)]
struct Args {
    /// Requests per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// Requests in each run.
    #[arg(long, default_value_t = 1_000)]
    requests: usize,
    /// Rounds: each path's requests are split into this many blocks, run alternately (bare,
    /// POST, bare, POST, ...), so both paths see the same machine, whatever else it does.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Document size in KiB.
    #[arg(long, default_value_t = 100)]
    kib: usize,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/ingest.md")]
    out: std::path::PathBuf,
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
            "at once: PDF checked, file written and linked under its key (its fsync starts); duplicate check (job read)"
        }
        "store" => {
            "(bodies over 1 MiB only) staged file linked under its key (a blob already there is kept)"
        }
        "persist" => {
            "at once: encode + produce + broker ack; file and directory fsynced, then the job record written"
        }
        "reply" => "answer built (the job's `accepted` mark is written after it)",
        "check.pdf" => {
            "· part of `check.store` (of `check` for bodies over 1 MiB): the PDF's structure and pages checked"
        }
        "check.store" => {
            "· part of `check`: on one blocking thread, the PDF checked, then the file written and linked under its key (its fsync starts)"
        }
        "check.write" => {
            "· part of `check` (bodies over 1 MiB only): the rest of the staged file written"
        }
        "check.lookup" => "· part of `check`: the job read (duplicate check)",
        "persist.fsync" => {
            "· part of `persist`: the file's and directory's fsyncs finished (begun in `check`)"
        }
        "persist.record" => "· part of `persist`: the job record written (after the fsyncs)",
        "persist.produce" => "· part of `persist`: encode + produce + broker ack",
        _ => "",
    }
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
    let producer = idempotent_producer(&stack.kafka(), "bench-bare")?;
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
    // registry, traceparent header, produce, ack).
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
    for i in 0..20 {
        let r = http
            .post(&base)
            .bearer_auth(docflow_bench::TOKEN)
            .body(document(args.requests + i, args.kib))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 202, "warm-up status {}", r.status());
    }
    let post = |i: usize| {
        let (http, base, docs, steps) = (http.clone(), base.clone(), docs.clone(), steps.clone());
        async move {
            let r = http
                .post(&base)
                .bearer_auth(docflow_bench::TOKEN)
                .body(docs[i].clone())
                .send()
                .await?;
            anyhow::ensure!(r.status() == 202, "status {}", r.status());
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
    let rounds = args.rounds.clamp(1, args.requests.max(1));
    let (mut bare, mut api, mut round_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (from, to) = (r * args.requests / rounds, (r + 1) * args.requests / rounds);
        let b = paced(to - from, args.rate, |i| {
            bare_send(format!("bare {}", from + i))
        })
        .await?;
        let a = paced(to - from, args.rate, |i| post(from + i)).await?;
        round_ratios.push(percentiles(a.clone()).0 / percentiles(b.clone()).0);
        bare.extend(b);
        api.extend(a);
    }
    stack.stop().await?;

    let (b50, b99, bmax) = percentiles(bare);
    let latencies = api.clone();
    let (a50, a99, amax) = percentiles(api);
    println!(
        "bare produce+ack: p50 {b50:.1} ms p99 {b99:.1} ms; POST: p50 {a50:.1} ms p99 {a99:.1} ms"
    );
    let mut md = String::new();
    md.push_str(&report_head(
        "Ingest latency",
        "ingest-bench",
        "broker: embedded Nisshi (memory) on loopback; registry and job store: SQLite",
    ));
    writeln!(
        md,
        "{} requests per path at {}/s, {} KiB PDFs (each unique), after 20 unmeasured warm-up calls per path; \
         the paths alternate in {rounds} blocks (bare, POST, bare, ...) and the figures pool them.\n",
        args.requests, args.rate, args.kib
    )?;
    writeln!(md, "| path | p50 | p99 | max |\n|---|---|---|---|")?;
    writeln!(
        md,
        "| bare: `send_event` (encode `doc.uploaded`, produce, wait for ack) | {b50:.1} ms | {b99:.1} ms | {bmax:.1} ms |"
    )?;
    writeln!(
        md,
        "| `POST /v1/documents` (auth, read body, sha256, sniff, PDF check, blob write + fsync, job record, produce + ack, 202) | {a50:.1} ms | {a99:.1} ms | {amax:.1} ms |"
    )?;
    writeln!(
        md,
        "\nRatio POST / bare: p50 **{:.2}**, p99 **{:.2}**",
        a50 / b50,
        a99 / b99
    )?;
    writeln!(
        md,
        "\nRatio at p50 in each block: {}",
        round_ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    let steps = std::mem::take(&mut *steps.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
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
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}
