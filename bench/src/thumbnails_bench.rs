//! Thumbnails: the stage's service time per kind of input (render only, in process), and the
//! latency a user sees end to end: `POST /v1/documents?wait=30s` through ingest, the broker,
//! the thumbnails stage and the result store until the `200`. The render p50/p99 are the
//! service times a lag-based autoscaling target is derived from. `make bench` writes
//! `bench/results/thumbnails.md`.

use std::fmt::Write as _;
use std::io::Cursor;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use docflow_bench::{paced, percentiles, report_head};
use docflow_stack::pdfium_library;
use docflow_stage::isolate::IsolationArgs;
use docflow_thumbnails::Renderer;
use image::{DynamicImage, ImageFormat, RgbImage};

#[derive(Debug, Parser)]
struct Args {
    /// Renders per input kind.
    #[arg(long, default_value_t = 200)]
    renders: usize,
    /// Uploads through the stack.
    #[arg(long, default_value_t = 300)]
    uploads: usize,
    /// Uploads per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Stage workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Line segments drawn by the slow PDF of the head-of-line measurement.
    #[arg(long, default_value_t = 200_000)]
    heavy_segments: usize,
    /// Runs of the head-of-line measurement.
    #[arg(long, default_value_t = 5)]
    hol_runs: usize,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/thumbnails.md")]
    out: std::path::PathBuf,
}

fn sample(name: &str) -> anyhow::Result<Vec<u8>> {
    let path = docflow_stack::workspace_root().join("samples").join(name);
    std::fs::read(&path).with_context(|| path.display().to_string())
}

/// A synthetic page-sized image (text-like stripes over a gradient) in `format`.
fn page_image(width: u32, height: u32, format: ImageFormat) -> anyhow::Result<Vec<u8>> {
    let img = RgbImage::from_fn(width, height, |x, y| {
        let line = (y / 24) % 2 == 0 && (x / 7) % 9 != 0 && x > 150 && x < width - 150;
        if line {
            image::Rgb([20, 20, 20])
        } else {
            let g = 235 + ((x + y) % 20) as u8;
            image::Rgb([g, g, g])
        }
    });
    let mut out = Vec::new();
    DynamicImage::ImageRgb8(img).write_to(&mut Cursor::new(&mut out), format)?;
    Ok(out)
}

/// A one-page PDF whose content stream draws `segments` line segments, FlateDecode-packed:
/// a small file with a large drawing to render (the slow PDF of issue 10 was 204 KB
/// inflating to 100 MB of drawing commands).
fn heavy_pdf(segments: usize) -> Vec<u8> {
    let mut content = String::with_capacity(segments * 24);
    for i in 0..segments {
        let (x, y) = (i % 612, (i / 612) % 792);
        content.push_str(&format!("{x} {y} m {} {} l S\n", 612 - x, 792 - y));
    }
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(content.as_bytes(), 6);
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
    ];
    let mut stream = format!(
        "<< /Length {} /Filter /FlateDecode >>\nstream\n",
        packed.len()
    )
    .into_bytes();
    stream.extend_from_slice(&packed);
    stream.extend_from_slice(b"\nendstream");
    objects.push(stream);
    docflow_stack::pdf::assemble(&objects)
}

/// How long a small PDF takes while a heavy one renders beside it (started 50 ms earlier),
/// in process (one pdfium, one lock) and in the stage's isolated workers (one pdfium per
/// worker): the small one's latencies, and the heavy one's render time, in ms.
async fn head_of_line(
    renderer: Renderer,
    heavy: Vec<u8>,
    small: Vec<u8>,
    runs: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let heavy = std::sync::Arc::new(heavy);
    let small = std::sync::Arc::new(small);
    let mut heavy_ms = Vec::new();
    let mut in_process = Vec::new();
    for _ in 0..runs {
        let h = heavy.clone();
        let t = Instant::now();
        let slow = tokio::task::spawn_blocking(move || renderer.render(&h));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let s = small.clone();
        let t_small = Instant::now();
        tokio::task::spawn_blocking(move || renderer.render(&s)).await??;
        in_process.push(t_small.elapsed().as_secs_f64() * 1000.0);
        slow.await??;
        heavy_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let limits = IsolationArgs {
        worker_memory: 1 << 30,
        stage_memory: 4 << 30,
        worker_cpu: std::time::Duration::from_secs(60),
        worker_timeout: std::time::Duration::from_secs(120),
        worker_stall: std::time::Duration::from_secs(20),
        worker_exe: Some(docflow_stack::workspace_binary("docflow-thumbnails")?),
        max_workers: 0,
    };
    let settings = docflow_thumbnails::RenderSettings {
        pdfium_lib: pdfium_library(),
        max_px: 256,
    };
    let pool = std::sync::Arc::new(docflow_stage::isolate::Workers::<
        docflow_thumbnails::RenderWorker,
    >::new(limits, &settings)?);
    // Two warm workers, so no start-up is measured.
    let (a, b) = tokio::join!(pool.run(&small), pool.run(&small));
    a?;
    b?;
    let mut isolated = Vec::new();
    for _ in 0..runs {
        let (p, h) = (pool.clone(), heavy.clone());
        let slow = tokio::spawn(async move { p.run(&h).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let t_small = Instant::now();
        pool.run(&small).await?;
        isolated.push(t_small.elapsed().as_secs_f64() * 1000.0);
        slow.await??;
    }
    Ok((in_process, isolated, heavy_ms))
}

/// Render latencies of `bytes`, `n` times after 5 unmeasured warm-ups, in ms.
fn render_times(r: &Renderer, bytes: &[u8], n: usize) -> anyhow::Result<Vec<f64>> {
    for _ in 0..5 {
        r.render(bytes)?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        r.render(bytes)?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();

    // 1. Service time per input kind.
    let renderer = Renderer::new(&pdfium_library(), 256)?;
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        (
            "text PDF, 1 page (samples/invoice-acme.pdf)",
            sample("invoice-acme.pdf")?,
        ),
        (
            "text PDF, 3 pages (samples/report-q3.pdf)",
            sample("report-q3.pdf")?,
        ),
        (
            "JPEG scan 2480×3508 (A4 at 300 dpi)",
            page_image(2480, 3508, ImageFormat::Jpeg)?,
        ),
        (
            "PNG 1240×1754 (A4 at 150 dpi)",
            page_image(1240, 1754, ImageFormat::Png)?,
        ),
    ];
    let mut render_rows = Vec::new();
    for (name, bytes) in &inputs {
        let (p50, p99, max) = percentiles(render_times(&renderer, bytes, args.renders)?);
        println!("render {name}: p50 {p50:.2} ms p99 {p99:.2} ms");
        render_rows.push((*name, bytes.len(), p50, p99, max));
    }

    // 2. A small PDF beside a slow one: pdfium's process-wide lock versus isolated workers.
    let heavy = heavy_pdf(args.heavy_segments);
    let heavy_kib = heavy.len() / 1024;
    let (in_process, isolated, heavy_ms) =
        head_of_line(renderer, heavy, sample("invoice-acme.pdf")?, args.hol_runs).await?;
    let (h50, _, hmax) = percentiles(heavy_ms);
    let (ip50, _, ipmax) = percentiles(in_process);
    let (is50, _, ismax) = percentiles(isolated);
    println!(
        "small beside heavy ({h50:.0} ms): in process p50 {ip50:.1} ms, isolated workers p50 {is50:.1} ms"
    );

    // 3. End to end through the stack.
    let mut stack = docflow_bench::stack()
        .start()
        .await
        .context("starting the stack")?;
    let workers = args.workers;
    stack
        .start_stage::<docflow_thumbnails::Thumbnails>(|stage| {
            stage.stage.consumer.workers = workers
        })
        .await?;
    let base = format!("{}/v1/documents?wait=30s", stack.ingest_url());

    // Unique documents: the sample PDF with a comment after %%EOF.
    let report = sample("report-q3.pdf")?;
    let doc = move |i: usize| {
        let mut d = report.clone();
        d.extend_from_slice(format!("\n%docflow-bench {i}\n").as_bytes());
        d
    };
    let http = reqwest::Client::new();
    // Broker ack of doc.uploaded → thumbnails run recorded, from the job's own timestamps.
    let pipeline = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(f64, f64, f64)>::new()));
    let post = |http: reqwest::Client, base: String, body: Vec<u8>| {
        let pipeline = pipeline.clone();
        async move {
            let r = http
                .post(&base)
                .bearer_auth(docflow_bench::TOKEN)
                .body(body)
                .send()
                .await?;
            anyhow::ensure!(r.status() == 200, "status {} (wait ran out?)", r.status());
            let job: serde_json::Value = r.json().await?;
            anyhow::ensure!(job["pipeline"] == "done", "pipeline {}", job["pipeline"]);
            if let (Some(acked), Some(started), Some(done)) = (
                job["produced_at_ms"].as_i64(),
                job["stages"][0]["started_at_ms"].as_i64(),
                job["stages"][0]["finished_at_ms"].as_i64(),
            ) && let Ok(mut v) = pipeline.lock()
            {
                v.push((
                    (done - acked) as f64,
                    (started - acked) as f64,
                    (done - started) as f64,
                ));
            }
            Ok(())
        }
    };
    for i in 0..20 {
        post(http.clone(), base.clone(), doc(args.uploads + i)).await?;
    }
    if let Ok(mut v) = pipeline.lock() {
        v.clear();
    }
    let docs: std::sync::Arc<Vec<Vec<u8>>> =
        std::sync::Arc::new((0..args.uploads).map(&doc).collect());
    let e2e = paced(args.uploads, args.rate, |i| {
        post(http.clone(), base.clone(), docs[i].clone())
    })
    .await?;
    stack.stop().await?;
    let (e50, e99, emax) = percentiles(e2e);
    println!("end to end: p50 {e50:.1} ms p99 {e99:.1} ms");
    let inner = pipeline.lock().map(|v| v.clone()).unwrap_or_default();
    anyhow::ensure!(
        inner.len() == args.uploads,
        "timestamps missing from job bodies"
    );
    let (i50, i99, imax) = percentiles(inner.iter().map(|t| t.0).collect());
    let (c50, c99, cmax) = percentiles(inner.iter().map(|t| t.1).collect());
    let (s50, s99, smax) = percentiles(inner.iter().map(|t| t.2).collect());
    println!("pipeline p50 {i50} ms (to the stage {c50} ms, in the stage {s50} ms)");

    let mut md = report_head(
        "Thumbnails",
        "thumbnails-bench",
        "pdfium from pypdfium2 5.15.2; broker: embedded Nisshi (memory) on loopback; registry and result store: SQLite",
    );
    writeln!(
        md,
        "## Service time (render only, one thread, {} renders each after 5 warm-ups)\n",
        args.renders
    )?;
    writeln!(
        md,
        "| input | size | p50 | p99 | max | documents/s per worker at p50 |\n|---|---|---|---|---|---|"
    )?;
    for (name, size, p50, p99, max) in &render_rows {
        writeln!(
            md,
            "| {name} | {} KiB | {p50:.2} ms | {p99:.2} ms | {max:.2} ms | {:.0} |",
            size / 1024,
            1000.0 / p50
        )?;
    }
    writeln!(
        md,
        "\n## A small PDF beside a slow one ({} runs)\n\nThe slow PDF: one page drawing {} line \
         segments ({heavy_kib} KiB, FlateDecode), rendered in {h50:.0} ms p50 (max {hmax:.0} ms); \
         50 ms after it starts, the 1-page invoice is rendered beside it.\n",
        args.hol_runs, args.heavy_segments
    )?;
    writeln!(md, "| small PDF rendered | p50 | max |\n|---|---|---|")?;
    writeln!(
        md,
        "| in process, beside the slow one (pdfium's process-wide lock) | {ip50:.1} ms | {ipmax:.1} ms |"
    )?;
    writeln!(
        md,
        "| in the stage's isolated workers (one pdfium per worker, a pipe each way) | {is50:.1} ms | {ismax:.1} ms |"
    )?;
    writeln!(
        md,
        "\n## End to end (`POST /v1/documents?wait=30s` → `200` with the thumbnail done)\n"
    )?;
    writeln!(
        md,
        "{} unique 3-page PDFs at {}/s, stage workers {}, after 20 unmeasured warm-ups: upload, \
         produce + ack, consume, read blob, render, store PNG, record, produce `doc.processed`, \
         and the request noticing: ingest's `doc.processed` listener wakes it, and it reads \
         the result store (the store is read by timer only every `--wait-poll`, 500 ms, when \
         no announcement came).\n",
        args.uploads, args.rate, args.workers
    )?;
    writeln!(md, "| span | p50 | p99 | max |\n|---|---|---|---|")?;
    writeln!(
        md,
        "| request: `POST ?wait=30s` → `200` (what the user sees) | {e50:.1} ms | {e99:.1} ms | {emax:.1} ms |"
    )?;
    writeln!(
        md,
        "| pipeline: broker ack of `doc.uploaded` → thumbnails run recorded (job timestamps, ms resolution) | {i50:.0} ms | {i99:.0} ms | {imax:.0} ms |"
    )?;
    writeln!(
        md,
        "| … of which: ack → the stage starts the record (delivery) | {c50:.0} ms | {c99:.0} ms | {cmax:.0} ms |"
    )?;
    writeln!(
        md,
        "| … of which: the stage's work (read, render, store, record) | {s50:.0} ms | {s99:.0} ms | {smax:.0} ms |"
    )?;
    writeln!(
        md,
        "\nThe difference between the rows is the upload itself (see ingest.md), the stage's \
         `doc.processed` produce + ack, its delivery to ingest's listener and the final read \
         of the result store."
    )?;
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}
