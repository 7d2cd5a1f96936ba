//! Replica status reports: what only a replica knows — its assigned partitions, whether it
//! paused them (at capacity), records in flight — sent every `--status-interval` to
//! `--status-topic` (key: the replica's instance id), and a last report marked `stopped`
//! when it leaves. Ingest's console reads the newest report of each instance; one older than
//! three intervals is a replica that died without saying so.
//!
//! Reports go on a small producer of their own (acks=1, not idempotent, a delivery timeout
//! of one interval), without waiting: a full queue, a missing topic or a broker away costs
//! a report — counted in `docflow_consumer_status_reports_total{outcome="failed"}`, the
//! first one logged — never the poll loop's time nor the stage's own producer's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::metrics::{StatusReportOutcome, StatusReports, now_ms};

/// One partition of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPartition {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

/// One report of one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// Consumer group.
    pub group: String,
    /// Random per process run: tells replicas with the same client id and host apart.
    pub instance: String,
    /// Client id the replica gives the broker.
    pub client_id: String,
    /// Host name (`HOSTNAME`, else `/etc/hostname`): the pod's name on Kubernetes.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// When the replica started, Unix ms.
    pub started_at_ms: i64,
    /// When this report was made, Unix ms.
    pub at_ms: i64,
    /// How often the replica reports, ms.
    pub interval_ms: u64,
    /// Partitions assigned to it.
    pub assigned: Vec<TopicPartition>,
    /// Whether its assignment is paused (records in flight at capacity).
    pub paused: bool,
    /// Records dispatched and not finished.
    pub in_flight: usize,
    /// Records it holds at most (workers + buffer).
    pub capacity: usize,
    /// The last report of a replica that left the group.
    pub stopped: bool,
}

impl ReplicaStatus {
    /// A live replica's report: not `stopped`, and no older than three intervals at `now_ms`.
    pub fn is_current(&self, now_ms: i64) -> bool {
        let interval = i64::try_from(self.interval_ms).unwrap_or(i64::MAX);
        !self.stopped && now_ms.saturating_sub(self.at_ms) <= interval.saturating_mul(3)
    }
}

/// Who is reporting: the fields of a report that do not change, and its producer.
pub(crate) struct Reporter {
    producer: rdkafka::producer::FutureProducer,
    reports: StatusReports,
    warned: Arc<AtomicBool>,
    pub(crate) topic: String,
    pub(crate) interval: Duration,
    pub(crate) group: String,
    pub(crate) instance: String,
    pub(crate) client_id: String,
    pub(crate) host: String,
    pub(crate) started_at_ms: i64,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("topic", &self.topic)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// How long the last report may take to leave at shutdown.
const LAST_REPORT_FLUSH: Duration = Duration::from_secs(1);

/// Counts a failed report; the first one of a replica is logged.
fn failed(reports: &StatusReports, warned: &AtomicBool, group: &str, topic: &str, why: &str) {
    reports.count(group, StatusReportOutcome::Failed);
    if !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(%topic, error = %why, "a status report failed (later failures are only counted)");
    }
}

impl Reporter {
    /// A reporter for `group` with its own producer (client id `<client_id>-status`).
    pub(crate) fn new(
        kafka: &docflow_config::KafkaArgs,
        topic: String,
        interval: Duration,
        group: &str,
        client_id: &str,
        reports: StatusReports,
    ) -> Result<Self, crate::RuntimeError> {
        let mut cfg = kafka.client_config(&format!("{client_id}-status"));
        // A report is worth its interval: never retried past it, never holding up a flush.
        let timeout_ms = interval.as_millis().clamp(1_000, 60_000).to_string();
        cfg.set("acks", "1")
            .set("enable.idempotence", "false")
            .set("message.timeout.ms", &timeout_ms)
            .set("linger.ms", "50")
            .set("queue.buffering.max.messages", "1000");
        let producer = cfg
            .create()
            .map_err(crate::RuntimeError::kafka("creating the status producer"))?;
        Ok(Reporter {
            producer,
            reports,
            warned: Arc::default(),
            topic,
            interval,
            group: group.to_owned(),
            instance: hex::encode(rand::random::<[u8; 8]>()),
            client_id: client_id.to_owned(),
            host: host_name(),
            started_at_ms: now_ms(),
        })
    }

    /// A report of the replica's state now.
    pub(crate) fn report(
        &self,
        assigned: Vec<TopicPartition>,
        paused: bool,
        in_flight: usize,
        capacity: usize,
        stopped: bool,
    ) -> ReplicaStatus {
        ReplicaStatus {
            group: self.group.clone(),
            instance: self.instance.clone(),
            client_id: self.client_id.clone(),
            host: self.host.clone(),
            pid: std::process::id(),
            started_at_ms: self.started_at_ms,
            at_ms: now_ms(),
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
            assigned,
            paused,
            in_flight,
            capacity,
            stopped,
        }
    }

    /// Sends `status` without waiting for the broker (its outcome is counted by a task on
    /// `runtime`); a report that cannot be queued is dropped (the next one says the same,
    /// newer).
    pub(crate) fn send(&self, runtime: &tokio::runtime::Handle, status: &ReplicaStatus) {
        let Ok(payload) = serde_json::to_vec(status) else {
            return;
        };
        let record = rdkafka::producer::FutureRecord::to(&self.topic)
            .key(&self.instance)
            .payload(&payload);
        match self.producer.send_result(record) {
            Ok(delivery) => {
                let (reports, warned) = (self.reports.clone(), self.warned.clone());
                let (group, topic) = (self.group.clone(), self.topic.clone());
                runtime.spawn(async move {
                    match delivery.await {
                        Ok(Ok(_)) => reports.count(&group, StatusReportOutcome::Sent),
                        Ok(Err((e, _))) => {
                            failed(&reports, &warned, &group, &topic, &e.to_string())
                        }
                        Err(_) => failed(&reports, &warned, &group, &topic, "producer gone"),
                    }
                });
            }
            Err((e, _)) => failed(
                &self.reports,
                &self.warned,
                &self.group,
                &self.topic,
                &e.to_string(),
            ),
        }
    }

    /// Waits briefly for the reports still queued (the last one, at shutdown).
    pub(crate) fn flush(&self) {
        let _ = rdkafka::producer::Producer::flush(&self.producer, LAST_REPORT_FLUSH);
    }
}

/// This host's name: `HOSTNAME`, else `/etc/hostname`, else `unknown`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reporter(interval: Duration) -> Reporter {
        let reports = crate::metrics::ConsumerMetrics::new(&prometheus::Registry::new())
            .unwrap()
            .status_reports;
        let kafka = docflow_config::KafkaArgs::plaintext("127.0.0.1:1");
        Reporter::new(&kafka, "s".into(), interval, "g", "docflow-g", reports).unwrap()
    }

    #[test]
    fn reports_round_trip_and_age_out() {
        let r = reporter(Duration::from_secs(5));
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 2,
        };
        let status = r.report(vec![tp], true, 8, 8, false);
        let json = serde_json::to_vec(&status).unwrap();
        assert_eq!(
            serde_json::from_slice::<ReplicaStatus>(&json).unwrap(),
            status
        );
        assert!(status.is_current(status.at_ms + 15_000));
        assert!(!status.is_current(status.at_ms + 15_001));
        assert!(
            !r.report(Vec::new(), false, 0, 8, true)
                .is_current(status.at_ms)
        );
        assert_eq!(status.instance.len(), 16);
        assert_ne!(status.instance, reporter(r.interval).instance);
    }
}
