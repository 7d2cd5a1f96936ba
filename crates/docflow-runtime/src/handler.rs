//! What a service implements: a [`Handler`] that turns one record into a durable side
//! effect, and says whether a failure is worth retrying.

use std::future::Future;

use rdkafka::Message;
use rdkafka::message::{BorrowedMessage, Headers};

use crate::trace::{TRACEPARENT, TraceContext};

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
    /// The record `m` as a handler gets it: owned, first attempt, and a span of its own in
    /// the trace of its `traceparent` header.
    pub fn from_message(m: &BorrowedMessage<'_>) -> Self {
        let headers: Vec<(String, Option<Vec<u8>>)> = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        let parent = headers
            .iter()
            .find(|(k, _)| k == TRACEPARENT)
            .and_then(|(_, v)| v.as_deref());
        let trace = TraceContext::from_header(parent);
        Record {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            payload: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: m.timestamp().to_millis(),
            attempt: 1,
            trace,
        }
    }

    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// The value of header `name` as text, if present and UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// Error classes the runtime itself assigns. A class is a `&'static str` chosen in code (a
/// metric label and the `docflow.dlq.error.class` header), never text built at run time, so
/// their number stays bounded. Codec classes come from [`docflow_events::CodecError::class`].
pub mod class {
    /// The record has no value.
    pub const EMPTY: &str = "empty";
    /// A database the handler writes to failed.
    pub const DATABASE: &str = "database";
    /// Producing an output event failed.
    pub const PRODUCE: &str = "produce";
    /// The delivery ledger could not record a delivery (retried).
    pub const LEDGER: &str = "ledger";
}

/// Why a handler failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying (a dependency is down, a timeout): retried with capped exponential
    /// backoff, dead-lettered after the last attempt.
    #[error("transient {class}: {message}")]
    Transient {
        /// Short stable class (metrics label, DLQ header); one of a closed set.
        class: &'static str,
        /// Human-readable detail.
        message: String,
    },
    /// The record itself is bad (undecodable, over limits): dead-lettered at once.
    #[error("permanent {class}: {message}")]
    Permanent {
        /// Short stable class; one of a closed set.
        class: &'static str,
        /// Human-readable detail.
        message: String,
    },
}

impl HandlerError {
    /// A transient failure.
    pub fn transient(class: &'static str, message: impl ToString) -> Self {
        HandlerError::Transient {
            class,
            message: message.to_string(),
        }
    }

    /// A permanent failure.
    pub fn permanent(class: &'static str, message: impl ToString) -> Self {
        HandlerError::Permanent {
            class,
            message: message.to_string(),
        }
    }

    /// The error class.
    pub fn class(&self) -> &'static str {
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
///
/// A delivery goes `decode` (once; retried while it fails transiently) → `handle` (retried
/// with the same input while it fails transiently) → on a permanent error or the last failed
/// attempt, the dead-letter write, then `dead_lettered` with whatever was decoded. Nothing is
/// decoded twice.
pub trait Handler: Send + Sync + 'static {
    /// What a record decodes to (a stage: its event; `()` for handlers of raw bytes).
    type Input: Send + Sync + 'static;

    /// Turns the record into the handler's input. An undecodable record is a permanent error.
    fn decode(
        &self,
        record: &Record,
    ) -> impl Future<Output = Result<Self::Input, HandlerError>> + Send;

    /// Processes one record. Return only once the side effect is durable: the offset is
    /// stored right after.
    fn handle(
        &self,
        record: &Record,
        input: &Self::Input,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Called once the dead-letter topic has acknowledged `record` (after its last attempt
    /// failed with `error`), before its offset is stored, with the decoded input when decoding
    /// got that far: a stage records the outcome where users look for it (the result store).
    /// Best effort; a failure here is logged by the handler and does not hold the partition.
    /// The default does nothing.
    fn dead_lettered(
        &self,
        record: &Record,
        input: Option<&Self::Input>,
        error: &HandlerError,
    ) -> impl Future<Output = ()> + Send {
        let _ = (record, input, error);
        async {}
    }
}
