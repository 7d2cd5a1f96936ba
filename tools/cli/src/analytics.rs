//! `docflow analytics`: the rollup of the analytics-rollup consumer group, read from the
//! docflow database (an operator's view: one tenant, or all of them together, including
//! dead letters no tenant could be read from).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use docflow_config::DatabaseArgs;
use docflow_store::analytics::{Analytics, Bucket, DAY_MS, Granularity, totals};

/// Arguments of `docflow analytics`.
#[derive(Debug, Args)]
pub(crate) struct AnalyticsArgs {
    /// Only this tenant (default: all tenants summed).
    #[arg(long)]
    tenant: Option<String>,
    /// Start, RFC 3339 UTC (`2026-12-04T00:00:00Z`); default: 1 day (hour) or 30 days (day)
    /// before `--to`.
    #[arg(long)]
    from: Option<String>,
    /// End, exclusive, RFC 3339 UTC; default: now.
    #[arg(long)]
    to: Option<String>,
    /// `hour` or `day`.
    #[arg(long, default_value = "hour")]
    granularity: Granularity,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    database: DatabaseArgs,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn parse_time(value: &str, name: &str) -> anyhow::Result<i64> {
    humantime::parse_rfc3339_weak(value)
        .map(unix_ms)
        .map_err(|e| anyhow::anyhow!("--{name} {value:?} is not an RFC 3339 time: {e}"))
}

fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

fn details(b: &Bucket) -> String {
    let types: Vec<String> = b
        .by_content_type
        .iter()
        .map(|(ct, c)| format!("{ct} {}", c.documents))
        .collect();
    let stages: Vec<String> = b
        .stages
        .iter()
        .flat_map(|(s, outcomes)| outcomes.iter().map(move |(o, n)| format!("{s} {o} {n}")))
        .collect();
    match (types.is_empty(), stages.is_empty()) {
        (_, true) => types.join(", "),
        (true, false) => stages.join(", "),
        (false, false) => format!("{}; {}", types.join(", "), stages.join(", ")),
    }
}

pub(crate) async fn run(args: AnalyticsArgs) -> anyhow::Result<()> {
    let to = match &args.to {
        Some(v) => parse_time(v, "to")?,
        None => unix_ms(SystemTime::now()),
    };
    let from = match &args.from {
        Some(v) => parse_time(v, "from")?,
        None => to.saturating_sub(match args.granularity {
            Granularity::Hour => DAY_MS,
            Granularity::Day => 30 * DAY_MS,
        }),
    };
    anyhow::ensure!(from < to, "--from must be before --to");
    // Read only: no migration (the rollup's own replicas bring the schema up), and a SQLite
    // file that is not there is not created.
    let pool = docflow_store::connect_existing(&args.database.url, 2).await?;
    let analytics = Analytics::new(pool, docflow_store::analytics::LIVE_GROUP);
    let buckets = analytics
        .rollup(args.tenant.as_deref(), from, to, args.granularity)
        .await?;
    let sum = totals(&buckets);
    if args.json {
        let out = serde_json::json!({
            "tenant": args.tenant,
            "from": rfc3339(args.granularity.floor(from)),
            "to": rfc3339(args.granularity.ceil(to)),
            "totals": sum,
            "buckets": buckets,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} from {} to {} by {}",
        args.tenant
            .as_deref()
            .map_or("all tenants".to_owned(), |t| format!("tenant {t}")),
        rfc3339(args.granularity.floor(from)),
        rfc3339(args.granularity.ceil(to)),
        match args.granularity {
            Granularity::Hour => "hour",
            Granularity::Day => "day",
        }
    );
    println!(
        "{:<22} {:>10} {:>14} {:>13}  content types; stage outcomes",
        "start (UTC)", "documents", "bytes", "rollup_dlq"
    );
    for b in &buckets {
        println!(
            "{:<22} {:>10} {:>14} {:>13}  {}",
            rfc3339(b.start_ms),
            b.documents,
            b.bytes,
            b.rollup_dead_lettered,
            details(b)
        );
    }
    println!(
        "{:<22} {:>10} {:>14} {:>13}  {}",
        "total",
        sum.documents,
        sum.bytes,
        sum.rollup_dead_lettered,
        details(&sum)
    );
    Ok(())
}
