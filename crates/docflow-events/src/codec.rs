//! Encode and decode events in the Confluent wire format through a schema registry.
//!
//! Encoding registers (or looks up) the newest embedded schema under the topic's value
//! subject and frames the Avro body with the returned id. Decoding parses the frame, fetches
//! the writer schema by id (cached by `schema_registry_converter`), and resolves it to the
//! reader's embedded schema, so consumers read every compatible older version. A writer
//! schema with references (types registered under other subjects) is resolved here, with
//! [`crate::references`]: `schema_registry_converter` 6 inlines a reference only where it is
//! written `.namespace.Name` or as a short name in the same namespace, so a schema that
//! names the type by its full name (`namespace.Name`, the usual spelling) did not parse.
//!
//! Every failure is a [`CodecError`]; [`CodecError::is_permanent`] tells a consumer whether
//! retrying can help (a registry outage) or the record should be dead-lettered (garbage).

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use schema_registry_converter::async_impl::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::async_impl::schema_registry::{
    get_referenced_schema, get_schema_by_id,
};
use schema_registry_converter::avro_common::get_supplied_schema;
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{
    RawError, RegisteredReference, SubjectNameStrategy,
};

use crate::schema::{Event, SchemaError};
use crate::wire::{self, WireError};

/// Largest single allocation the Avro decoder may make for one field (strings, bytes,
/// arrays). Kafka records are far smaller; a corrupt length prefix must not allocate more.
pub const MAX_FIELD_BYTES: usize = 64 * 1024 * 1024;

/// Confluent error code for "schema not found".
const SCHEMA_NOT_FOUND: u32 = 40403;

/// Why an event could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Not a Confluent wire-format record.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The registry has no schema with this id.
    #[error("schema id {0} is unknown to the schema registry")]
    UnknownSchemaId(u32),
    /// The registry could not be asked, or refused the request.
    #[error("schema registry error: {message}")]
    Registry {
        /// What the registry client said.
        message: String,
        /// Whether asking again may succeed (network errors, 5xx).
        retriable: bool,
    },
    /// The body does not decode with its writer schema, or does not resolve to ours.
    #[error("Avro body does not match schema id {schema_id}: {reason}")]
    Body {
        /// Writer schema id from the header.
        schema_id: u32,
        /// Decoder message.
        reason: String,
    },
    /// Bytes are left after the Avro body.
    #[error("{extra} unexpected bytes after the Avro body (schema id {schema_id})")]
    TrailingBytes {
        /// Writer schema id from the header.
        schema_id: u32,
        /// How many bytes were left.
        extra: usize,
    },
    /// A value could not be serialized with its schema (a bug in the caller's data).
    #[error("cannot encode value: {0}")]
    Encode(String),
    /// The embedded schema is broken (a build defect).
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

impl CodecError {
    /// Whether the record itself is at fault, so retrying cannot help and it should be
    /// dead-lettered. Only registry outages are transient.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self,
            CodecError::Registry {
                retriable: true,
                ..
            }
        )
    }

    /// A short, stable class name for metrics labels and DLQ headers.
    pub fn class(&self) -> &'static str {
        match self {
            CodecError::Wire(WireError::Truncated { .. }) => "wire_truncated",
            CodecError::Wire(WireError::BadMagic { .. }) => "wire_bad_magic",
            CodecError::UnknownSchemaId(_) => "unknown_schema_id",
            CodecError::Registry { .. } => "registry",
            CodecError::Body { .. } => "avro_body",
            CodecError::TrailingBytes { .. } => "trailing_bytes",
            CodecError::Encode(_) => "encode",
            CodecError::Schema(_) => "schema",
        }
    }

    fn from_registry(err: SRCError, schema_id: Option<u32>) -> Self {
        let raw = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<RawError>());
        if let (Some(raw), Some(id)) = (raw, schema_id)
            && raw.error_code == SCHEMA_NOT_FOUND
        {
            return CodecError::UnknownSchemaId(id);
        }
        CodecError::Registry {
            message: match &err.cause {
                Some(cause) => format!("{}: {cause}", err.error),
                None => err.error.clone(),
            },
            retriable: err.retriable,
        }
    }
}

fn limit_allocations() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        apache_avro::util::max_allocation_bytes(MAX_FIELD_BYTES);
    });
}

/// Serializes an event into a bare Avro body with its embedded schema.
pub fn encode_body<E: Event>(event: &E) -> Result<Vec<u8>, CodecError> {
    let schema = E::schema()?;
    GenericDatumWriter::builder(schema)
        .build()
        .and_then(|w| w.write_ser_to_vec(event))
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a bare Avro body written with `writer` into `E`, resolving to `E`'s schema.
/// `schema_id` only labels errors.
pub fn decode_body_with_id<E: Event>(
    writer: &Schema,
    body: &[u8],
    schema_id: u32,
) -> Result<E, CodecError> {
    limit_allocations();
    let reader_schema = E::schema()?;
    let body_err = |e: apache_avro::Error| CodecError::Body {
        schema_id,
        reason: e.to_string(),
    };
    let mut cursor = Cursor::new(body);
    let value = GenericDatumReader::builder(writer)
        .reader_schema(reader_schema)
        .build()
        .and_then(|r| r.read_value(&mut cursor))
        .map_err(body_err)?;
    let used = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    if used < body.len() {
        return Err(CodecError::TrailingBytes {
            schema_id,
            extra: body.len() - used,
        });
    }
    apache_avro::from_value::<E>(&value).map_err(body_err)
}

/// [`decode_body_with_id`] for bodies that carry no id (tests, files).
pub fn decode_body<E: Event>(writer: &Schema, body: &[u8]) -> Result<E, CodecError> {
    decode_body_with_id(writer, body, 0)
}

/// Encoder/decoder bound to one schema registry. Cheap to share (`&self` methods); schemas
/// and ids are cached after the first use.
pub struct EventCodec {
    encoder: AvroEncoder,
    decoder: AvroDecoder,
    settings: SrSettings,
    /// Writer schemas with references, resolved here (see the module docs), by id; `None`:
    /// the id has no references (its error stands, without asking the registry again).
    with_references: Mutex<HashMap<u32, Option<Arc<Schema>>>>,
}

impl std::fmt::Debug for EventCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCodec").finish_non_exhaustive()
    }
}

impl EventCodec {
    /// A codec over already built registry settings (auth, timeouts, several URLs).
    pub fn new(settings: SrSettings) -> Self {
        limit_allocations();
        EventCodec {
            encoder: AvroEncoder::new(settings.clone()),
            decoder: AvroDecoder::new(settings.clone()),
            settings,
            with_references: Mutex::new(HashMap::new()),
        }
    }

    /// A codec for a registry at `url` without authentication.
    pub fn from_url(url: &str, timeout: Duration) -> Result<Self, CodecError> {
        Self::connect(url, None, None, timeout)
    }

    /// A codec for a registry at `url`, with basic auth when `username` is given (Confluent
    /// Cloud: API key and secret).
    pub fn connect(
        url: &str,
        username: Option<&str>,
        password: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, CodecError> {
        let mut builder = SrSettings::new_builder(url.trim_end_matches('/').to_owned());
        builder.set_timeout(timeout).no_proxy();
        if let Some(user) = username {
            builder.set_basic_authorization(user, password);
        }
        let settings = builder
            .build()
            .map_err(|e| CodecError::from_registry(e, None))?;
        Ok(Self::new(settings))
    }

    /// Registers (or finds) `E`'s schema under `<topic>-value` and returns its id.
    pub async fn schema_id<E: Event>(&self) -> Result<u32, CodecError> {
        let strategy = SubjectNameStrategy::TopicNameStrategyWithSchema(
            E::TOPIC.to_owned(),
            false,
            get_supplied_schema(E::schema()?),
        );
        let subject = crate::topics::value_subject(E::TOPIC);
        let schema = self
            .encoder
            .get_schema_and_id(&subject, strategy)
            .await
            .map_err(|e| CodecError::from_registry(e, None))?;
        Ok(schema.id)
    }

    /// Encodes `event` as a Confluent wire-format record.
    pub async fn encode<E: Event>(&self, event: &E) -> Result<Vec<u8>, CodecError> {
        let id = self.schema_id::<E>().await?;
        Ok(wire::frame(id, &encode_body(event)?))
    }

    /// Decodes a Confluent wire-format record into `E`.
    pub async fn decode<E: Event>(&self, bytes: &[u8]) -> Result<E, CodecError> {
        let frame = wire::parse(bytes)?;
        let id = frame.schema_id;
        let cached = self
            .with_references
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(Some(writer)) = &cached {
            return decode_body_with_id(writer, frame.body, id);
        }
        match self.decoder.get_schema(id).await {
            Ok(writer) => decode_body_with_id(&writer.parsed, frame.body, id),
            Err(e) if e.retriable => Err(CodecError::from_registry(e, Some(id))),
            Err(e) => {
                let err = CodecError::from_registry(e, Some(id));
                if matches!(err, CodecError::UnknownSchemaId(_)) {
                    return Err(err);
                }
                // The converter could not make a schema of it: references it cannot inline?
                // (Asked once per id: an id known to have none keeps its error.)
                if cached.is_some() {
                    return Err(err);
                }
                match self.resolve_with_references(id).await? {
                    Some(writer) => decode_body_with_id(&writer, frame.body, id),
                    None => Err(err),
                }
            }
        }
    }

    /// Fetches schema `id`; when it has references, fetches them (and theirs, dependencies
    /// first), makes one self-contained schema of it and caches it. `None` when it has none.
    async fn resolve_with_references(&self, id: u32) -> Result<Option<Arc<Schema>>, CodecError> {
        let registered = get_schema_by_id(id, &self.settings)
            .await
            .map_err(|e| CodecError::from_registry(e, Some(id)))?;
        if registered.references.is_empty() {
            self.with_references
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, None);
            return Ok(None);
        }
        let settings = &self.settings;
        let texts = crate::references::dependencies(
            &registered.references,
            |r| (r.subject.clone(), r.version),
            |r: RegisteredReference| async move {
                let target = get_referenced_schema(settings, &r)
                    .await
                    .map_err(|e| CodecError::from_registry(e, None))?;
                Ok((target.schema, target.references))
            },
            || CodecError::Body {
                schema_id: id,
                reason: crate::references::TOO_MANY.to_owned(),
            },
        )
        .await?;
        let schema =
            crate::references::parse_with(&registered.schema, &texts).map_err(|reason| {
                CodecError::Body {
                    schema_id: id,
                    reason: format!("writer schema with references: {reason}"),
                }
            })?;
        let schema = Arc::new(schema);
        self.with_references
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Some(schema.clone()));
        Ok(Some(schema))
    }
}

pub use schema_registry_converter::async_impl::schema_registry::{SrSettings, SrSettingsBuilder};
