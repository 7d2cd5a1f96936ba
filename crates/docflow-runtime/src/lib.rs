//! docflow's Kafka runtime.
//!
//! This crate is where every service gets its Kafka clients, so the delivery guarantees are
//! written once: [`admin`] declares topics idempotently; [`producer`] builds the idempotent,
//! `acks=all` producer used for every output and dead-letter write.

pub mod admin;
pub mod producer;

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
}

impl RuntimeError {
    pub(crate) fn kafka(
        context: impl Into<String>,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        let context = context.into();
        move |source| RuntimeError::Kafka { context, source }
    }
}
