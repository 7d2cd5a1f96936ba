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
