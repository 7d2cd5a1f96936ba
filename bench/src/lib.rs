//! Helpers shared by the benchmark binaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use docflow_config::{ConsumerArgs, KafkaArgs};
use docflow_runtime::{ConsumerMetrics, ConsumerSpec, Handler, HandlerError, Health, Record};
use docflow_stack::unique_name;

/// p50, p99 (nearest rank, [`docflow_store::stats::quantile`]) and max of `v`
/// (milliseconds in, milliseconds out); zeros for an empty `v`.
pub fn percentiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| docflow_store::stats::quantile(&v, q).unwrap_or(0.0);
    (at(0.50), at(0.99), at(1.0))
}

/// Runs `f(i)` for `i in 0..n` at `rate` per second, concurrently, and returns each call's
/// latency in milliseconds.
pub async fn paced<F, Fut>(n: usize, rate: f64, f: F) -> anyhow::Result<Vec<f64>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tick.tick().await;
        let fut = f(i);
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            fut.await?;
            Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64() * 1000.0)
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

/// The common head of a report: title, the command that produced it, machine, date.
pub fn report_head(title: &str, bin: &str, setup: &str) -> String {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    format!(
        "# {title}\n\nCommand: `make bench` (runs `{bin} {}`)  \nMachine: {} cores; {setup}; build: release.  \nDate: {}\n\n",
        argv.join(" "),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// The command line of a `docflow-testbed` replica on `stack`: `work_ms` a record,
/// `workers` at a time (topic, group and the rest are the caller's to add).
pub fn testbed_command(
    stack: &docflow_stack::Stack,
    work_ms: u64,
    workers: usize,
) -> anyhow::Result<Vec<String>> {
    Ok(vec![
        docflow_stack::workspace_binary("docflow-testbed")?
            .display()
            .to_string(),
        "--kafka-bootstrap-servers".into(),
        stack.broker.bootstrap_servers(),
        "--database-url".into(),
        stack.database_url.clone(),
        "--work-ms".into(),
        work_ms.to_string(),
        "--workers".into(),
        workers.to_string(),
    ])
}

/// A `docflow-testbed` replica process on `stack` for `topic` and `group` (see
/// [`testbed_command`]), its metrics on a free port, its output discarded, killed when
/// dropped; callers add their own flags.
pub fn testbed_process(
    stack: &docflow_stack::Stack,
    work_ms: u64,
    workers: usize,
    topic: &str,
    group: &str,
) -> anyhow::Result<tokio::process::Command> {
    let cmd = testbed_command(stack, work_ms, workers)?;
    let mut c = tokio::process::Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .args([
            "--topic",
            topic,
            "--group",
            group,
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    Ok(c)
}

/// The token every benchmark uploads with (tenant `bench`).
pub const TOKEN: &str = "bench-token";

/// The stack a benchmark measures: SQLite result store (the reports say so), ingest
/// accepting [`TOKEN`] for tenant `bench`.
pub fn stack() -> docflow_stack::StackBuilder {
    docflow_stack::Stack::builder()
        .sqlite()
        .token(TOKEN, "bench")
        .ingest()
}

/// Writes the report `md` to `out` (creating its directory) and says so.
pub fn write_report(out: &std::path::Path, md: &str) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut md = md.to_owned();
    md.push_str(&history_of(out));
    std::fs::write(out, md)?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The heading under which a report keeps its earlier runs, by hand: a new run keeps it.
pub const HISTORY: &str = "\n## History";

/// The `## History` section of the report at `out` (to its end), or nothing.
fn history_of(out: &std::path::Path) -> String {
    std::fs::read_to_string(out)
        .ok()
        .and_then(|old| old.find(HISTORY).map(|i| old[i..].to_owned()))
        .map(|h| {
            if h.starts_with("\n\n") {
                h
            } else {
                format!("\n{h}")
            }
        })
        .unwrap_or_default()
}

#[derive(Debug, Default)]
/// A handler that does nothing but count: the runtime's own cost.
pub struct Noop {
    /// Records handled.
    pub done: AtomicUsize,
}

impl Handler for Noop {
    type Input = ();

    async fn decode(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle(&self, _record: &Record, (): &()) -> Result<(), HandlerError> {
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs `handler` as a new group on `topic` under the runtime until `until()` holds;
/// returns how long that took (group join included).
pub async fn run_runtime<H: Handler>(
    kafka: &KafkaArgs,
    topic: &str,
    consumer: ConsumerArgs,
    handler: Arc<H>,
    until: impl Fn() -> bool,
) -> anyhow::Result<Duration> {
    let spec = ConsumerSpec {
        group_id: unique_name("bench"),
        topics: vec![topic.to_owned()],
        client_id: "bench".into(),
        producer: None,
        ledger: None,
        positions: None,
    };
    let metrics = ConsumerMetrics::new(&prometheus::Registry::new())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let k = kafka.clone();
    let task = tokio::spawn(async move {
        docflow_runtime::run(
            &k,
            &consumer,
            spec,
            handler,
            metrics,
            Arc::new(Health::default()),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    let start = Instant::now();
    while !until() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(600),
            "runtime stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = start.elapsed();
    let _ = stop.send(());
    task.await??;
    Ok(took)
}

/// Produces `n` records to `topic` (`record(i)` gives key and payload), at `rate` per second
/// or as fast as the producer takes them, and waits for every ack.
pub async fn produce(
    kafka: &KafkaArgs,
    topic: &str,
    n: usize,
    rate: Option<f64>,
    record: impl Fn(usize) -> (String, String),
) -> anyhow::Result<()> {
    let producer = docflow_runtime::producer::idempotent_producer(kafka, "bench")?;
    let mut pending = Vec::with_capacity(n);
    let mut tick = rate.map(|r| tokio::time::interval(Duration::from_secs_f64(1.0 / r)));
    for i in 0..n {
        if let Some(t) = &mut tick {
            t.tick().await;
        }
        let (key, payload) = record(i);
        pending.push(
            producer
                .send_result(
                    rdkafka::producer::FutureRecord::to(topic)
                        .key(&key)
                        .payload(&payload),
                )
                .map_err(|(e, _)| e)?,
        );
    }
    for p in pending {
        p.await?.map_err(|(e, _)| e)?;
    }
    Ok(())
}
