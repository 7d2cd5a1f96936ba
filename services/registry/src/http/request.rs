//! What the handlers take from a request: the query flags, and the JSON body (decoded by
//! its `Content-Type`) with the schema it carries.

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde::Deserialize;

use crate::error::RegistryError;
use crate::references::SchemaReference;
use crate::store::{CandidateSchema, Store};

const ACCEPTED_CONTENT_TYPES: [&str; 4] = [
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
];

/// The query parameters. Booleans parse whatever their case (`true`, `True`, `TRUE`:
/// Confluent's Python client sends `?deleted=False`), and anything else is refused (400)
/// where Confluent would read it as false, so a typo never silently means false;
/// `offset`/`limit` page a list (`limit` -1: all); `subjectPrefix` filters subjects;
/// `deletedOnly` (also `deleted_only`, as the Python client spells it) lists only
/// soft-deleted entries; `normalize` registers and looks up by Confluent's normalized form.
/// Other parameters (`format`, `subject`...) are accepted and change nothing here.
#[derive(Debug)]
pub(super) struct Flags {
    pub(super) deleted: bool,
    pub(super) deleted_only: bool,
    pub(super) permanent: bool,
    pub(super) verbose: bool,
    pub(super) default_to_global: bool,
    pub(super) normalize: bool,
    offset: usize,
    limit: Option<usize>,
    pub(super) subject_prefix: Option<String>,
}

impl Flags {
    fn parse(query: Option<&str>) -> Result<Self, RegistryError> {
        let mut f = Flags {
            deleted: false,
            deleted_only: false,
            permanent: false,
            verbose: false,
            default_to_global: false,
            normalize: false,
            offset: 0,
            limit: None,
            subject_prefix: None,
        };
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match name.as_ref() {
                "offset" => {
                    f.offset = parse_number(&name, &value)?.max(0).try_into().unwrap_or(0);
                }
                "limit" => {
                    let n = parse_number(&name, &value)?;
                    f.limit = usize::try_from(n).ok().filter(|_| n >= 0);
                }
                "subjectPrefix" => f.subject_prefix = Some(value.into_owned()),
                "deleted" => f.deleted = parse_bool(&name, &value)?,
                "deletedOnly" | "deleted_only" => f.deleted_only = parse_bool(&name, &value)?,
                "permanent" => f.permanent = parse_bool(&name, &value)?,
                "verbose" => f.verbose = parse_bool(&name, &value)?,
                "defaultToGlobal" => f.default_to_global = parse_bool(&name, &value)?,
                "normalize" => f.normalize = parse_bool(&name, &value)?,
                _ => {}
            }
        }
        Ok(f)
    }

    /// Whether soft-deleted entries are read at all.
    pub(super) fn with_deleted(&self) -> bool {
        self.deleted || self.deleted_only
    }

    /// One page of `items`.
    pub(super) fn page<T>(&self, items: Vec<T>) -> Vec<T> {
        let rest = items.into_iter().skip(self.offset);
        match self.limit {
            Some(n) => rest.take(n).collect(),
            None => rest.collect(),
        }
    }
}

fn parse_number(name: &str, value: &str) -> Result<i64, RegistryError> {
    value.trim().parse().map_err(|_| RegistryError::BadQuery {
        name: name.to_owned(),
        value: value.to_owned(),
        expected: "an integer",
    })
}

fn parse_bool(name: &str, value: &str) -> Result<bool, RegistryError> {
    if value.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") || value.is_empty() {
        Ok(false)
    } else {
        Err(RegistryError::BadQuery {
            name: name.to_owned(),
            value: value.to_owned(),
            expected: "true or false",
        })
    }
}

/// The query flags of a request, refused as a JSON 400 when one is not a boolean.
pub(super) struct Query(pub(super) Flags);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Query {
    type Rejection = RegistryError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Flags::parse(parts.uri.query()).map(Query)
    }
}

#[derive(Debug, Deserialize)]
struct SchemaRequest {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    /// `null`, absent and `[]` all mean none.
    #[serde(default)]
    references: Option<Vec<SchemaReference>>,
}

/// How a request body's text is encoded, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charset {
    Utf8,
    /// ISO-8859-1 and its subset US-ASCII: one byte, one code point.
    Latin1,
}

fn check_content_type(headers: &HeaderMap) -> Result<Charset, RegistryError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(Charset::Utf8);
    };
    let ct = ct.to_str().unwrap_or("");
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    if !ACCEPTED_CONTENT_TYPES.contains(&essence.as_str()) {
        return Err(RegistryError::UnsupportedMediaType(ct.to_owned()));
    }
    let mut charset = Charset::Utf8;
    for p in parts {
        if let Some((k, v)) = p.split_once('=')
            && k.trim().eq_ignore_ascii_case("charset")
        {
            let v = v.trim().trim_matches('"').to_ascii_lowercase();
            charset = match v.as_str() {
                "utf-8" | "utf8" => Charset::Utf8,
                "iso-8859-1" | "latin1" | "latin-1" | "us-ascii" | "ascii" => Charset::Latin1,
                _ => return Err(RegistryError::UnsupportedMediaType(ct.to_owned())),
            };
        }
    }
    Ok(charset)
}

pub(super) fn body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<T, RegistryError> {
    let parsed = match check_content_type(headers)? {
        Charset::Utf8 => serde_json::from_slice(bytes),
        Charset::Latin1 => {
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            serde_json::from_str(&text)
        }
    };
    parsed.map_err(|e| RegistryError::BadBody(e.to_string()))
}

/// The schema a request carries; `normalize`: identified by Confluent's normalized form
/// (`?normalize=true`) rather than its canonical string.
pub(super) async fn candidate(
    store: &Store,
    headers: &HeaderMap,
    bytes: &Bytes,
    normalize: bool,
) -> Result<CandidateSchema, RegistryError> {
    let req: SchemaRequest = body(headers, bytes)?;
    store
        .candidate(
            &req.schema,
            req.schema_type.as_deref(),
            req.references.unwrap_or_default(),
            normalize,
        )
        .await
}
