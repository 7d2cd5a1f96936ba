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

    /// Deliveries of one record that may end with the process dying (no outcome recorded)
    /// before the next delivery dead-letters it without running the handler (class
    /// `crash_loop`); 0 turns crash counting off. Needs a delivery ledger (the stages use
    /// the result store).
    #[arg(
        long = "max-crash-deliveries",
        env = "DOCFLOW_MAX_CRASH_DELIVERIES",
        default_value_t = 3
    )]
    pub max_crash_deliveries: u32,

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
}

impl Default for ConsumerArgs {
    fn default() -> Self {
        ConsumerArgs {
            workers: 4,
            buffer: 4,
            max_attempts: 5,
            max_crash_deliveries: 3,
            retry_backoff: Duration::from_millis(200),
            retry_backoff_max: Duration::from_secs(30),
            per_key_ordering: false,
            revoke_timeout: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(30),
            group_instance_id: None,
            session_timeout: Duration::from_secs(10),
            max_poll_interval: Duration::from_secs(300),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
        }
    }
}
