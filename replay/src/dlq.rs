//! `replay dlq`: send a group's dead letters back to their source topic after a fix.
//!
//! Each dead letter is copied to the topic it came from — same key, same value, its own
//! headers (not the `docflow.dlq.*` provenance) — with `docflow.redrive.group` (only that
//! group handles it: every other group's runtime passes it by), `docflow.redrive.count`
//! (one more than the dead letter carried) and `docflow.redrive.source`
//! (`dlq-topic/partition/offset`). Redriving goes back through the source topic rather than
//! straight into the handler so the record gets everything a delivery gets: retries, crash
//! counting, dead-lettering again with full provenance.
//!
//! A dead letter is redriven once per successful run: after its copy is acknowledged it is
//! recorded in the result store (`dlq_redrives`), and later runs leave it, whatever their
//! filters. That is at-least-once, like every delivery here: a run that dies between the
//! ack and the record, or two runs at once, can send one twice — the stages' idempotent
//! results absorb it (a second dead letter of a still-failing record would be redriven on
//! its own count). One already redriven `--max-redrives` times that failed again stays.
//!
//! The runtime trusts `docflow.redrive.group`: whoever may write to the source topic can
//! address a record to one group and so have the others pass it by. Ingest and the stages
//! never copy client headers into events; keep write access to the topics to the pipeline
//! (Kafka ACLs), as for every other header.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Args;
use docflow_config::{DatabaseArgs, KafkaArgs};
use docflow_runtime::Record;
use docflow_runtime::dlq::headers as h;
use docflow_runtime::metrics::now_ms;
use docflow_store::Redrives;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::{ReplayError, broker, parse_time};

/// `replay dlq`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct DlqArgs {
    /// The group whose dead letters to redrive.
    #[arg(long)]
    pub group: String,
    /// The topic the group consumes (its DLQ is `<topic>.dlq.<group>`).
    #[arg(long)]
    pub topic: String,
    /// Only dead letters of this error class (e.g. `timeout`, `worker_crashed`).
    #[arg(long)]
    pub error_class: Option<String>,
    /// Only dead letters written at or after this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub from: Option<i64>,
    /// Only dead letters written before this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub to: Option<i64>,
    /// A dead letter already redriven this many times stays in the DLQ.
    #[arg(long, default_value_t = 3)]
    pub max_redrives: u32,
    /// Redrive (without: a dry run that says what would be redriven).
    #[arg(long)]
    pub execute: bool,
    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// The result store, where redrives are recorded.
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// Longest a DLQ read may go without a record before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// How many times a dead letter was redriven already.
fn times_redriven(d: &Record) -> u32 {
    d.header_str(h::REDRIVE_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqReport {
    /// Dead letters read.
    pub read: usize,
    /// Redriven (dry run: would be).
    pub redriven: usize,
    /// Left by the filters (class, time, another source topic).
    pub filtered: usize,
    /// Redriven by an earlier run.
    pub already_redriven: usize,
    /// Redriven `--max-redrives` times already: they stay.
    pub exhausted: usize,
    /// Redriven (or would be) by error class.
    pub by_class: BTreeMap<String, usize>,
    /// A dry run: nothing was sent; `redriven` counts what would be.
    pub dry_run: bool,
}

impl std::fmt::Display for DlqReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redriven = if self.dry_run {
            "would be redriven"
        } else {
            "redriven"
        };
        writeln!(
            f,
            "dead letters read: {}; {redriven}: {}; left out by the filters (class, time, \
             source topic): {}; handled before (redriven by an earlier run, or discarded): {}; \
             redriven --max-redrives times already (they stay): {}",
            self.read, self.redriven, self.filtered, self.already_redriven, self.exhausted
        )?;
        for (class, n) in &self.by_class {
            writeln!(f, "  {class}: {n}")?;
        }
        Ok(())
    }
}

impl DlqReport {
    /// Adds `other`'s counts (a group's redrive over each topic it reads).
    pub fn add(&mut self, other: &DlqReport) {
        self.read += other.read;
        self.redriven += other.redriven;
        self.filtered += other.filtered;
        self.already_redriven += other.already_redriven;
        self.exhausted += other.exhausted;
        for (class, n) in &other.by_class {
            *self.by_class.entry(class.clone()).or_default() += n;
        }
        self.dry_run = other.dry_run;
    }
}

/// Every record of `topic` from the log start to the end it had when the read began.
fn read_all(c: &BaseConsumer, topic: &str) -> Result<Vec<Record>, ReplayError> {
    broker::read_to_end(c, topic, |_, start, _| Ok(start), STALL)
}

/// Reads the group's DLQ and redrives what the filters and the record of earlier runs let
/// through (dry run unless `execute`).
pub async fn redrive(args: &DlqArgs) -> Result<DlqReport, ReplayError> {
    let pool = docflow_store::open(&args.database.url, args.database.max_connections)
        .await
        .map_err(|e| ReplayError::Store(e.to_string()))?;
    let producer: FutureProducer =
        docflow_runtime::producer::idempotent_producer(&args.kafka, "docflow-replay-dlq")
            .map_err(|e| ReplayError::Task(e.to_string()))?;
    redrive_with(args, &Redrives::new(pool), &producer).await
}

/// [`redrive`] with the result store's redrive records and a producer the caller has (a
/// long-running service: ingest's console); `args.database` is not used.
pub async fn redrive_with(
    args: &DlqArgs,
    redrives: &Redrives,
    producer: &FutureProducer,
) -> Result<DlqReport, ReplayError> {
    let dlq_topic = docflow_events::topics::dead_letter(&args.topic, &args.group);
    let (kafka, group, t) = (args.kafka.clone(), args.group.clone(), dlq_topic.clone());
    let letters = tokio::task::spawn_blocking(move || {
        let c = broker::client(&kafka, &format!("{group}.dlq-redrive"))?;
        read_all(&c, &t)
    })
    .await
    .map_err(|e| ReplayError::Task(e.to_string()))??;
    let mut report = DlqReport {
        read: letters.len(),
        dry_run: !args.execute,
        ..DlqReport::default()
    };
    for d in letters {
        let class = d.header_str(h::ERROR_CLASS).unwrap_or("unknown").to_owned();
        let from_topic = d.header_str(h::TOPIC).unwrap_or(&args.topic);
        let in_window = d.timestamp_ms.is_none_or(|t| {
            args.from.is_none_or(|from| t >= from) && args.to.is_none_or(|to| t < to)
        });
        if from_topic != args.topic
            || args.error_class.as_deref().is_some_and(|c| c != class)
            || !in_window
        {
            report.filtered += 1;
            continue;
        }
        if redrives
            .was_redriven(&dlq_topic, d.partition, d.offset)
            .await
            .map_err(|e| ReplayError::Store(e.to_string()))?
        {
            report.already_redriven += 1;
            continue;
        }
        let count = times_redriven(&d);
        if count >= args.max_redrives {
            report.exhausted += 1;
            continue;
        }
        if args.execute {
            send_back(
                producer,
                &args.topic,
                &args.group,
                &dlq_topic,
                &d,
                count + 1,
            )
            .await?;
            redrives
                .record(&dlq_topic, d.partition, d.offset, &args.group, now_ms())
                .await
                .map_err(|e| ReplayError::Store(e.to_string()))?;
        }
        report.redriven += 1;
        *report.by_class.entry(class).or_default() += 1;
    }
    Ok(report)
}

/// Copies one dead letter to `topic` for `group`, and waits for the ack.
async fn send_back(
    producer: &FutureProducer,
    topic: &str,
    group: &str,
    dlq_topic: &str,
    d: &Record,
    count: u32,
) -> Result<(), ReplayError> {
    let mut headers = OwnedHeaders::new();
    for (k, v) in &d.headers {
        if !k.starts_with("docflow.dlq.") && !k.starts_with("docflow.redrive.") {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
    }
    let source = format!("{dlq_topic}/{}/{}", d.partition, d.offset);
    let count = count.to_string();
    for (k, v) in [
        (h::REDRIVE_GROUP, group),
        (h::REDRIVE_COUNT, count.as_str()),
        (h::REDRIVE_SOURCE, source.as_str()),
    ] {
        headers = headers.insert(Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
    if let Some(k) = &d.key {
        record = record.key(k.as_slice());
    }
    if let Some(v) = &d.payload {
        record = record.payload(v.as_slice());
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .map(|_| ())
        .map_err(|(e, _)| ReplayError::kafka("producing a redriven record")(e))
}

#[cfg(test)]
mod tests {
    use super::DlqReport;

    #[test]
    fn a_dry_run_says_what_would_be_redriven() {
        let dry = DlqReport {
            read: 3,
            redriven: 1,
            filtered: 2,
            dry_run: true,
            ..DlqReport::default()
        };
        let text = dry.to_string();
        assert!(text.contains("would be redriven: 1"), "{text}");
        assert!(!text.contains("; redriven: "), "{text}");
        let done = DlqReport {
            dry_run: false,
            ..dry
        };
        assert!(done.to_string().contains("; redriven: 1"), "{done}");
    }
}
