//! W3C trace context (`traceparent`) carried in Kafka headers.
//!
//! A record's `traceparent` header names the producer's trace and span. The consumer keeps the
//! trace id, makes a new span id for its own work, and writes that as the `traceparent` of
//! everything it produces (outputs, dead letters), so one trace follows a document through
//! every stage.

use std::fmt;

/// The header name.
pub const TRACEPARENT: &str = "traceparent";

/// A trace id, a span id and the sampled flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// 16-byte trace id.
    pub trace_id: [u8; 16],
    /// 8-byte span id of this unit of work.
    pub span_id: [u8; 8],
    /// Span id of the parent (the producer), if there was one.
    pub parent_span_id: Option<[u8; 8]>,
    /// Whether the trace is sampled.
    pub sampled: bool,
}

impl TraceContext {
    /// A new root trace.
    pub fn new_root() -> Self {
        TraceContext {
            trace_id: nonzero_random(),
            span_id: nonzero_random(),
            parent_span_id: None,
            sampled: true,
        }
    }

    /// A child span of `self` (same trace, new span id).
    pub fn child(&self) -> Self {
        TraceContext {
            trace_id: self.trace_id,
            span_id: nonzero_random(),
            parent_span_id: Some(self.span_id),
            sampled: self.sampled,
        }
    }

    /// Parses a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`); None if malformed or
    /// all-zero, per the W3C spec.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(value).ok()?.trim();
        let mut parts = s.split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        if version.len() != 2
            || version == "ff"
            || trace.len() != 32
            || span.len() != 16
            || flags.len() != 2
        {
            return None;
        }
        u8::from_str_radix(version, 16).ok()?;
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            parent_span_id: None,
            sampled: flags & 1 == 1,
        })
    }

    /// The context for work on a record: a child of its `traceparent`, or a new root.
    pub fn from_header(value: Option<&[u8]>) -> Self {
        value
            .and_then(Self::parse)
            .map(|p| p.child())
            .unwrap_or_else(Self::new_root)
    }

    /// Lowercase hex trace id.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

impl fmt::Display for TraceContext {
    /// The `traceparent` header value for this span.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            u8::from(self.sampled)
        )
    }
}

/// Records a record's key on `span` as its message key and job id (`messaging.kafka.message.key`,
/// `docflow.job_id`, both declared empty); a record without a key leaves both unset, as the
/// conventions ask.
pub(crate) fn record_key(span: &tracing::Span, key: Option<&[u8]>) {
    if let Some(key) = key {
        let id = String::from_utf8_lossy(key);
        span.record("messaging.kafka.message.key", id.as_ref());
        span.record("docflow.job_id", id.as_ref());
    }
}

/// The publish span of a record sent to `topic` with `key`, a child of the current span
/// (a request, a record's work), and the context the record carries as its `traceparent`:
/// with span export on, it names this span. Every record docflow sends goes under one:
/// events ([`crate::producer::send_event`]) and dead letters (a dead letter also records
/// `docflow.dlq.error_class`, and `otel.status_code` when its write was given up).
pub(crate) fn publish_span(
    topic: &str,
    key: Option<&[u8]>,
    trace: &TraceContext,
) -> (tracing::Span, TraceContext) {
    let span = tracing::info_span!(
        "docflow.produce",
        otel.name = %format!("send {topic}"),
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "kafka",
        messaging.operation.type = "send",
        messaging.operation.name = "send",
        messaging.destination.name = %topic,
        messaging.kafka.message.key = tracing::field::Empty,
        docflow.job_id = tracing::field::Empty,
        docflow.dlq.error_class = tracing::field::Empty,
    );
    record_key(&span, key);
    let trace = adopt(
        &span,
        TraceContext {
            parent_span_id: None,
            ..*trace
        },
    );
    (span, trace)
}

/// Ties `span` (not yet entered) to `trace` when spans are exported (OpenTelemetry on):
/// the span's parent is `trace`'s parent (the producer's span, from the record's
/// `traceparent`), and the returned context carries the span's own ids, so what this work
/// produces names the exported span as its parent. Without export, `trace` is returned as
/// it is.
pub fn adopt(span: &tracing::Span, trace: TraceContext) -> TraceContext {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if let Some(parent) = trace.parent_span_id {
        let remote = SpanContext::new(
            TraceId::from_bytes(trace.trace_id),
            SpanId::from_bytes(parent),
            if trace.sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            true,
            TraceState::default(),
        );
        // Fails only without the export layer (or for a span already started): then the
        // docflow context stands as it is.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
    let cx = span.context();
    let own = cx.span().span_context().clone();
    if !own.is_valid() {
        return trace;
    }
    TraceContext {
        trace_id: own.trace_id().to_bytes(),
        span_id: own.span_id().to_bytes(),
        parent_span_id: trace.parent_span_id,
        sampled: own.is_sampled(),
    }
}

fn nonzero_random<const N: usize>() -> [u8; N] {
    loop {
        let bytes: [u8; N] = rand::random();
        if bytes.iter().any(|b| *b != 0) {
            return bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_continues_a_trace() {
        let h = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceContext::parse(h).unwrap();
        assert_eq!(p.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(p.sampled);
        let c = TraceContext::from_header(Some(h));
        assert_eq!(c.trace_id, p.trace_id);
        assert_ne!(c.span_id, p.span_id);
        assert_eq!(c.parent_span_id, Some(p.span_id));
        let s = c.to_string();
        assert!(s.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(s.ends_with("-01"));
        assert_eq!(
            TraceContext::parse(s.as_bytes()).unwrap().span_id,
            c.span_id
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            &b""[..],
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"\xff\xfe",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad:?}");
        }
        let root = TraceContext::from_header(Some(b"garbage"));
        assert!(root.parent_span_id.is_none());
    }
}
