//! Dead letters: the original key and value, unchanged, with provenance headers, on
//! `<topic>.dlq.<group>`.

use rdkafka::message::{Header, OwnedHeaders};

use crate::handler::Record;
use crate::trace::TRACEPARENT;

/// Header names of a dead letter.
pub mod headers {
    /// Source topic.
    pub const TOPIC: &str = "docflow.dlq.original.topic";
    /// Source partition.
    pub const PARTITION: &str = "docflow.dlq.original.partition";
    /// Source offset.
    pub const OFFSET: &str = "docflow.dlq.original.offset";
    /// Source record timestamp (Unix ms).
    pub const TIMESTAMP: &str = "docflow.dlq.original.timestamp";
    /// Consumer group that gave up.
    pub const GROUP: &str = "docflow.dlq.group";
    /// Error class (stable, short).
    pub const ERROR_CLASS: &str = "docflow.dlq.error.class";
    /// Error message (truncated).
    pub const ERROR_MESSAGE: &str = "docflow.dlq.error.message";
    /// Attempts made.
    pub const ATTEMPTS: &str = "docflow.dlq.attempts";
    /// `true` when the handler said the record itself is bad (a redrive fails again unless
    /// the code changed); `false` when a transient failure ran out of attempts (a redrive
    /// may succeed once the dependency is back).
    pub const PERMANENT: &str = "docflow.dlq.error.permanent";
    /// On a record sent back to its source topic by `docflow replay dlq`: the one group it
    /// is for. Every other group's runtime passes it by unhandled.
    pub const REDRIVE_GROUP: &str = "docflow.redrive.group";
    /// How many times the record was redriven (kept when it is dead-lettered again).
    pub const REDRIVE_COUNT: &str = "docflow.redrive.count";
    /// The dead letter it came from: `topic/partition/offset`.
    pub const REDRIVE_SOURCE: &str = "docflow.redrive.source";
}

/// The group a redriven record is for (its [`headers::REDRIVE_GROUP`]), if it is one.
pub fn redrive_group(record: &Record) -> Option<&str> {
    record.header_str(headers::REDRIVE_GROUP)
}

/// Longest error message kept in a header.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The dead-letter topic of `group` for `topic`.
pub fn topic_for(topic: &str, group: &str) -> String {
    docflow_events::topics::dead_letter(topic, group)
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Headers of the dead letter for `record`: its own headers (its `traceparent` replaced by
/// `trace`, the dead-letter write's span), then provenance.
pub(crate) fn dead_letter_headers(
    record: &Record,
    trace: &crate::trace::TraceContext,
    group: &str,
    error: &crate::handler::HandlerError,
    attempts: u32,
) -> OwnedHeaders {
    let (class, message) = (error.class(), error.message());
    let permanent = matches!(error, crate::handler::HandlerError::Permanent { .. });
    let mut h = OwnedHeaders::new();
    for (k, v) in &record.headers {
        if k != TRACEPARENT && !k.starts_with("docflow.dlq.") {
            h = h.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
    }
    let trace = trace.to_string();
    let fields = [
        (TRACEPARENT, trace),
        (headers::TOPIC, record.topic.clone()),
        (headers::PARTITION, record.partition.to_string()),
        (headers::OFFSET, record.offset.to_string()),
        (
            headers::TIMESTAMP,
            record
                .timestamp_ms
                .map(|t| t.to_string())
                .unwrap_or_default(),
        ),
        (headers::GROUP, group.to_owned()),
        (headers::ERROR_CLASS, class.to_owned()),
        (
            headers::ERROR_MESSAGE,
            truncate(message, MAX_MESSAGE_BYTES).to_owned(),
        ),
        (headers::ATTEMPTS, attempts.to_string()),
        (headers::PERMANENT, permanent.to_string()),
    ];
    for (k, v) in &fields {
        h = h.insert(Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    #[test]
    fn a_redriven_record_names_its_group() {
        let mut r = Record {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            key: None,
            payload: None,
            headers: vec![("x".to_owned(), Some(b"1".to_vec()))],
            timestamp_ms: None,
            attempt: 1,
            trace: crate::trace::TraceContext::new_root(),
        };
        assert_eq!(redrive_group(&r), None);
        r.headers.push((
            headers::REDRIVE_GROUP.to_owned(),
            Some(b"thumbnails".to_vec()),
        ));
        assert_eq!(redrive_group(&r), Some("thumbnails"));
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
        let long = "é".repeat(2000);
        assert!(truncate(&long, MAX_MESSAGE_BYTES).len() <= MAX_MESSAGE_BYTES);
    }

    #[test]
    fn provenance_headers() {
        let r = Record {
            topic: "doc.uploaded".into(),
            partition: 3,
            offset: 42,
            key: Some(b"k".to_vec()),
            payload: None,
            headers: vec![("x".into(), Some(b"1".to_vec()))],
            timestamp_ms: Some(1000),
            attempt: 2,
            trace: crate::trace::TraceContext::new_root(),
        };
        let e = crate::handler::HandlerError::permanent("avro_body", "m".repeat(5000));
        let h = dead_letter_headers(&r, &r.trace, "g", &e, 5);
        let get = |name: &str| {
            h.iter()
                .find(|x| x.key == name)
                .and_then(|x| x.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(get("x").as_deref(), Some("1"));
        assert_eq!(get(headers::TOPIC).as_deref(), Some("doc.uploaded"));
        assert_eq!(get(headers::PARTITION).as_deref(), Some("3"));
        assert_eq!(get(headers::OFFSET).as_deref(), Some("42"));
        assert_eq!(get(headers::TIMESTAMP).as_deref(), Some("1000"));
        assert_eq!(get(headers::GROUP).as_deref(), Some("g"));
        assert_eq!(get(headers::ERROR_CLASS).as_deref(), Some("avro_body"));
        assert_eq!(
            get(headers::ERROR_MESSAGE).map(|m| m.len()),
            Some(MAX_MESSAGE_BYTES)
        );
        assert_eq!(get(headers::ATTEMPTS).as_deref(), Some("5"));
        assert_eq!(get(headers::PERMANENT).as_deref(), Some("true"));
        let e = crate::handler::HandlerError::transient("database", "down");
        let h = dead_letter_headers(&r, &r.trace, "g", &e, 5);
        assert!(
            h.iter()
                .any(|x| x.key == headers::PERMANENT && x.value == Some(b"false".as_slice()))
        );
        assert_eq!(get(TRACEPARENT), Some(r.trace.to_string()));
    }
}
