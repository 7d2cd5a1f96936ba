//! docflow's Kafka runtime.
//!
//! This crate is where every service gets its Kafka clients, so the delivery guarantees are
//! written once: [`consumer`] is the at-least-once consumer runtime (pooled workers, offset
//! watermark, retries, DLQ, pause/resume, rebalances, shutdown); [`admin`] declares topics
//! idempotently; [`producer`] builds the idempotent, `acks=all` producer used for every output
//! and dead-letter write; [`metrics`] and [`trace`] carry telemetry.

pub mod admin;
pub mod consumer;
pub mod dlq;
pub mod handler;
pub mod ledger;
pub mod metrics;
pub mod positions;
pub mod producer;
pub mod retry;
pub mod status;
pub mod supervise;
pub mod trace;

pub use consumer::{ConsumerSpec, run, run_service};
pub use handler::{Handler, HandlerError, Record};
pub use ledger::{DeliveryKey, DeliveryLedger};
pub use metrics::{ConsumerMetrics, Health};
pub use positions::PositionStore;

/// The registry client of a service, from its shared `RegistryArgs` block (URL, basic auth,
/// timeout).
pub fn codec(
    registry: &docflow_config::RegistryArgs,
) -> Result<docflow_events::EventCodec, docflow_events::CodecError> {
    docflow_events::EventCodec::connect(
        registry.url.as_str(),
        registry.username.as_deref(),
        registry.password.as_deref(),
        registry.timeout,
    )
}

/// Kafka runtime errors.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// librdkafka refused the configuration or a request failed.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What docflow was doing.
        context: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// Topic creation failed on the broker.
    #[error("creating topic {topic}: {reason}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// Broker's answer.
        reason: String,
    },
    /// Something did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A metric could not be created or registered.
    #[error("metrics: {0}")]
    Metrics(#[source] prometheus::Error),
    /// Local I/O (binding, threads).
    #[error("{context}: {source}")]
    Io {
        /// What docflow was doing.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The poll thread failed.
    #[error("poll loop: {0}")]
    PollThread(String),
    /// The position store could not say where to start an assigned partition.
    #[error("loading positions: {0}")]
    Positions(String),
}

impl RuntimeError {
    pub(crate) fn kafka(
        context: impl Into<String>,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        let context = context.into();
        move |source| RuntimeError::Kafka { context, source }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| RuntimeError::Io { context, source }
    }
}
