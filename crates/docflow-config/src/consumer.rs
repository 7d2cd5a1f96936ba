use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

/// How a consumer replica works through its partitions.
#[derive(Debug, Clone, Args)]
pub struct ConsumerArgs {
    /// Handler tasks per replica, fed from one pooled queue across all assigned partitions.
    #[arg(long = "workers", env = "DOCFLOW_WORKERS", default_value_t = 4)]
    pub workers: usize,

    /// Records held beyond the busy workers; at workers + buffer in flight the replica
    /// pauses its partitions (and keeps polling) until a slot frees.
    #[arg(long = "buffer", env = "DOCFLOW_BUFFER", default_value_t = 4)]
    pub buffer: usize,

    /// Attempts for a transient failure before the record is dead-lettered.
    #[arg(
        long = "max-attempts",
        env = "DOCFLOW_MAX_ATTEMPTS",
        default_value_t = 5
    )]
    pub max_attempts: u32,

    /// Deaths of the process, of its own fault, while one record ran alone (a suspect: it
    /// was in hand when a process died) before the next delivery dead-letters it without
    /// running the handler (class `crash_loop`); twice as many deaths alone that nobody
    /// saw (without `--supervise`, a container OOM kill) do the same. 0 turns crash
    /// counting off. Needs a delivery ledger (the stages use the result store).
    #[arg(
        long = "max-crash-deliveries",
        env = "DOCFLOW_MAX_CRASH_DELIVERIES",
        default_value_t = 3
    )]
    pub max_crash_deliveries: u32,

    /// Run the replica under a supervisor process that sees how it dies (a signal, a
    /// panic) and starts it again, so that only the record's own deaths count towards
    /// `--max-crash-deliveries`; `false`: one process, whose deaths nobody sees (crash
    /// counting then needs twice as many deaths alone).
    #[arg(
        long = "supervise",
        env = "DOCFLOW_SUPERVISE",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub supervise: bool,

    /// First retry delay; doubles per attempt, with jitter.
    #[arg(
        long = "retry-backoff",
        env = "DOCFLOW_RETRY_BACKOFF",
        default_value = "200ms",
        value_parser = crate::parse_duration
    )]
    pub retry_backoff: Duration,

    /// Cap of the retry delay.
    #[arg(
        long = "retry-backoff-max",
        env = "DOCFLOW_RETRY_BACKOFF_MAX",
        default_value = "30s",
        value_parser = crate::parse_duration
    )]
    pub retry_backoff_max: Duration,

    /// Never run two records with the same key at once (records of one key complete in
    /// offset order).
    #[arg(long = "per-key-ordering", env = "DOCFLOW_PER_KEY_ORDERING")]
    pub per_key_ordering: bool,

    /// How long a revocation waits for the revoked partitions' in-flight records before
    /// giving them up (they are then redelivered to the new owner).
    #[arg(
        long = "revoke-timeout",
        env = "DOCFLOW_REVOKE_TIMEOUT",
        default_value = "20s",
        value_parser = crate::parse_duration
    )]
    pub revoke_timeout: Duration,

    /// How long shutdown waits for in-flight records before committing what is done.
    #[arg(
        long = "shutdown-grace",
        env = "DOCFLOW_SHUTDOWN_GRACE",
        default_value = "30s",
        value_parser = crate::parse_duration
    )]
    pub shutdown_grace: Duration,

    /// Static group membership id (`group.instance.id`): a restarted replica takes its
    /// partitions back without a rebalance.
    #[arg(long = "group-instance-id", env = "KAFKA_GROUP_INSTANCE_ID")]
    pub group_instance_id: Option<String>,

    /// `session.timeout.ms`: how long the group waits for a silent member.
    #[arg(
        long = "session-timeout",
        env = "KAFKA_SESSION_TIMEOUT",
        default_value = "10s",
        value_parser = crate::parse_duration
    )]
    pub session_timeout: Duration,

    /// Least time between two offset commits. A partition's advanced watermark is committed
    /// at once when the last commit is at least this old, else when it becomes so: Kafka's
    /// lag (what KEDA scales on) counts records done but not committed, so a lazy commit
    /// reads as demand. 0 commits on every advance.
    #[arg(
        long = "commit-interval",
        env = "DOCFLOW_COMMIT_INTERVAL",
        default_value = "100ms",
        value_parser = crate::parse_duration
    )]
    pub commit_interval: Duration,

    /// `max.poll.interval.ms`. The runtime polls continuously, so long handlers never
    /// exceed it; it only catches a wedged poll loop.
    #[arg(
        long = "max-poll-interval",
        env = "KAFKA_MAX_POLL_INTERVAL",
        default_value = "300s",
        value_parser = crate::parse_duration
    )]
    pub max_poll_interval: Duration,

    /// Address of the admin endpoint (`/metrics`, `/healthz`, `/readyz`).
    #[arg(
        long = "metrics-listen",
        env = "DOCFLOW_METRICS_LISTEN",
        default_value = "127.0.0.1:9464"
    )]
    pub metrics_listen: SocketAddr,

    /// Reprocess a bounded range instead of joining the group as a live member (what
    /// `docflow replay run --mode side` starts a stage with): `TOPIC:PARTITION:START-END`,
    /// END exclusive, repeatable. The replica assigns exactly these partitions — at START,
    /// or at the group's committed offset where that is further on (a resumed replay) —
    /// never subscribes, and exits once every range is done.
    #[arg(long = "assign-range", value_parser = AssignRange::parse)]
    pub assign_ranges: Vec<AssignRange>,

    /// Most records started per second (0: no limit), so a replay beside the live group
    /// leaves it its share of the machine.
    #[arg(long = "max-rate", env = "DOCFLOW_MAX_RATE", default_value_t = 0.0)]
    pub max_rate: f64,

    /// Topic every replica reports its status to (its assigned partitions, whether they are
    /// paused, records in flight: what only the replica knows), read by ingest's console;
    /// empty: no reports.
    #[arg(long = "status-topic", env = "DOCFLOW_STATUS_TOPIC", default_value = STATUS_TOPIC)]
    pub status_topic: String,

    /// How often a replica reports its status.
    #[arg(
        long = "status-interval",
        env = "DOCFLOW_STATUS_INTERVAL",
        default_value = "5s",
        value_parser = crate::parse_duration
    )]
    pub status_interval: Duration,
}

/// The default `--status-topic`.
pub const STATUS_TOPIC: &str = "docflow.consumer-status";

/// One partition's range of `--assign-range`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignRange {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset.
    pub start: i64,
    /// One past the last offset.
    pub end: i64,
}

impl AssignRange {
    /// Parses `TOPIC:PARTITION:START-END`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected TOPIC:PARTITION:START-END (END exclusive)");
        let (rest, range) = s.rsplit_once(':').ok_or_else(bad)?;
        let (topic, partition) = rest.rsplit_once(':').ok_or_else(bad)?;
        let (start, end) = range.split_once('-').ok_or_else(bad)?;
        let r = AssignRange {
            topic: topic.to_owned(),
            partition: partition.parse().map_err(|_| bad())?,
            start: start.parse().map_err(|_| bad())?,
            end: end.parse().map_err(|_| bad())?,
        };
        if r.topic.is_empty() || r.partition < 0 || r.start < 0 || r.end < r.start {
            return Err(bad());
        }
        Ok(r)
    }
}

impl std::fmt::Display for AssignRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}-{}",
            self.topic, self.partition, self.start, self.end
        )
    }
}

impl Default for ConsumerArgs {
    fn default() -> Self {
        ConsumerArgs {
            workers: 4,
            buffer: 4,
            max_attempts: 5,
            max_crash_deliveries: 3,
            supervise: true,
            retry_backoff: Duration::from_millis(200),
            retry_backoff_max: Duration::from_secs(30),
            per_key_ordering: false,
            revoke_timeout: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(30),
            group_instance_id: None,
            session_timeout: Duration::from_secs(10),
            max_poll_interval: Duration::from_secs(300),
            commit_interval: Duration::from_millis(100),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            assign_ranges: Vec::new(),
            max_rate: 0.0,
            status_topic: STATUS_TOPIC.to_owned(),
            status_interval: Duration::from_secs(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_print_back() {
        let r = AssignRange::parse("doc.uploaded:3:100-250").unwrap();
        assert_eq!(
            (r.topic.as_str(), r.partition, r.start, r.end),
            ("doc.uploaded", 3, 100, 250)
        );
        assert_eq!(r.to_string(), "doc.uploaded:3:100-250");
        assert_eq!(AssignRange::parse("a:b:c:0:5-5").unwrap().topic, "a:b:c");
        for bad in ["t:0:5", "t:x:1-2", "t:0:9-3", ":0:1-2", "t:-1:1-2"] {
            assert!(AssignRange::parse(bad).is_err(), "{bad}");
        }
    }
}
