//! What a service implements: a [`Handler`] that turns one record into a durable side
//! effect, and says whether a failure is worth retrying.

use std::future::Future;

use crate::trace::TraceContext;

/// One Kafka record, owned, as handed to a handler.
#[derive(Debug, Clone)]
pub struct Record {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Record key.
    pub key: Option<Vec<u8>>,
    /// Record value.
    pub payload: Option<Vec<u8>>,
    /// Record headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Record timestamp, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
    /// 1 on the first try, 2 on the first retry, ...
    pub attempt: u32,
    /// W3C trace context: the incoming `traceparent`'s trace with a new span for this record.
    pub trace: TraceContext,
}

impl Record {
    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Why a handler failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying (a dependency is down, a timeout): retried with capped exponential
    /// backoff, dead-lettered after the last attempt.
    #[error("transient {class}: {message}")]
    Transient {
        /// Short stable class (metrics label, DLQ header).
        class: String,
        /// Human-readable detail.
        message: String,
    },
    /// The record itself is bad (undecodable, over limits): dead-lettered at once.
    #[error("permanent {class}: {message}")]
    Permanent {
        /// Short stable class.
        class: String,
        /// Human-readable detail.
        message: String,
    },
}

impl HandlerError {
    /// A transient failure.
    pub fn transient(class: impl Into<String>, message: impl ToString) -> Self {
        HandlerError::Transient {
            class: class.into(),
            message: message.to_string(),
        }
    }

    /// A permanent failure.
    pub fn permanent(class: impl Into<String>, message: impl ToString) -> Self {
        HandlerError::Permanent {
            class: class.into(),
            message: message.to_string(),
        }
    }

    /// The error class.
    pub fn class(&self) -> &str {
        match self {
            HandlerError::Transient { class, .. } | HandlerError::Permanent { class, .. } => class,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            HandlerError::Transient { message, .. } | HandlerError::Permanent { message, .. } => {
                message
            }
        }
    }
}

impl From<docflow_events::CodecError> for HandlerError {
    /// Undecodable records are permanent; a registry outage is transient.
    fn from(e: docflow_events::CodecError) -> Self {
        if e.is_permanent() {
            HandlerError::permanent(e.class(), &e)
        } else {
            HandlerError::transient(e.class(), &e)
        }
    }
}

/// The side effect of a consumer group. It must be idempotent: the runtime delivers at least
/// once, so the same record can arrive again after a crash or rebalance.
pub trait Handler: Send + Sync + 'static {
    /// Processes one record. Return only once the side effect is durable: the offset is
    /// stored right after.
    fn handle(&self, record: &Record) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Called once the dead-letter topic has acknowledged `record` (after its last attempt
    /// failed with `error`), before its offset is stored: a stage records the outcome where
    /// users look for it (the result store). Best effort; a failure here is logged by the
    /// handler and does not hold the partition. The default does nothing.
    fn dead_lettered(
        &self,
        record: &Record,
        error: &HandlerError,
    ) -> impl Future<Output = ()> + Send {
        let _ = (record, error);
        async {}
    }
}
