//! Schemas: validating what a request sends (references resolved), reading schemas by id,
//! looking one up under a subject, and which schemas refer to a subject version.

use std::sync::PoisonError;

use apache_avro::Schema;
use sha2::{Digest, Sha256};
use sqlx::{AnyPool, Row};

use super::{AVRO, LIVE, Store, SubjectVersion, VersionRef, canonical};
use crate::error::RegistryError;
use crate::references::{self, SchemaReference};

/// A parsed Avro schema ready to store, with its identity.
#[derive(Debug)]
pub struct CandidateSchema {
    /// Text as sent.
    pub text: String,
    /// References as sent.
    pub references: Vec<SchemaReference>,
    /// Parsed schema, self-contained (referenced types written out).
    pub parsed: Schema,
    /// sha256 of Confluent's canonical string (or, with `?normalize=true`, of its
    /// normalized form), and of the references when there are any: a schema's identity is
    /// what it means and what its names refer to, not how its text is spelled.
    pub fingerprint: String,
    /// How [`CandidateSchema::fingerprint`] was computed (`sr_schemas.identity`).
    pub identity: &'static str,
    /// sha256 of Confluent's equivalence key (and references): equal for schemas that only
    /// order properties or aliases otherwise, or say `error` for `record`. A subject that
    /// holds an equivalent schema answers with it.
    pub equivalence: String,
}

/// `sr_schemas.identity` of a schema fingerprinted by Confluent's canonical string.
pub(super) const CANONICAL: &str = "canonical";
/// ... by Confluent's normalized form (`?normalize=true`).
const NORMALIZED: &str = "normalized";
/// ... by the rule before both (sorted JSON keys), recomputed at start.
pub(super) const JSON_SORTED: &str = "json-sorted";

/// sha256 of `form` and `references` (in the order given).
fn fingerprint_of(form: &str, references: &[SchemaReference]) -> String {
    let mut identity = form.to_owned();
    if !references.is_empty() {
        identity.push('\n');
        identity.push_str(&references::to_column(references));
    }
    hex::encode(Sha256::digest(identity.as_bytes()))
}

/// Full names of the named types `dependencies` define (dependencies first).
fn known_names(dependencies: &[String]) -> Result<Vec<String>, RegistryError> {
    let mut known = Vec::new();
    for d in dependencies {
        let json: serde_json::Value = serde_json::from_str(d)
            .map_err(|e| RegistryError::InvalidSchema(format!("a reference is not JSON: {e}")))?;
        let names =
            canonical::defined_names(&json, &known).map_err(RegistryError::InvalidSchema)?;
        known.extend(names);
    }
    Ok(known)
}

/// The equivalence key's fingerprint of `text`, whose references resolve to
/// `dependencies` (references sorted: their order does not change what a schema means).
fn equivalence_of(
    json: &serde_json::Value,
    references: &[SchemaReference],
    known: &[String],
) -> Result<String, RegistryError> {
    let key = canonical::equivalence_key(json, known).map_err(RegistryError::InvalidSchema)?;
    Ok(fingerprint_of(&key, &sorted(references)))
}

/// `references` sorted by subject, version and name, each once (Confluent's normalize).
fn sorted(references: &[SchemaReference]) -> Vec<SchemaReference> {
    let mut out = references.to_vec();
    out.sort_by(|a, b| {
        (a.subject.as_str(), a.version, a.name.as_str()).cmp(&(
            b.subject.as_str(),
            b.version,
            b.name.as_str(),
        ))
    });
    out.dedup();
    out
}

impl CandidateSchema {
    /// Validates `text` as an Avro schema of `schema_type` (only AVRO is supported) that
    /// uses no references, identified by its canonical string.
    pub fn parse(text: &str, schema_type: Option<&str>) -> Result<Self, RegistryError> {
        Self::parse_with(text, schema_type, Vec::new(), &[], false)
    }

    /// [`CandidateSchema::parse`] for a schema with `references`, whose resolved texts are
    /// `dependencies` (dependencies first); `normalize`: identified by Confluent's
    /// normalized form.
    fn parse_with(
        text: &str,
        schema_type: Option<&str>,
        references: Vec<SchemaReference>,
        dependencies: &[String],
        normalize: bool,
    ) -> Result<Self, RegistryError> {
        if let Some(t) = schema_type
            && !t.eq_ignore_ascii_case(AVRO)
        {
            return Err(RegistryError::InvalidSchema(format!(
                "schema type {t} is not supported; this registry stores AVRO"
            )));
        }
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| RegistryError::InvalidSchema(format!("not JSON: {e}")))?;
        let parsed =
            references::parse_with(text, dependencies).map_err(RegistryError::InvalidSchema)?;
        let known = known_names(dependencies)?;
        let (fingerprint, identity) = if normalize {
            let form =
                canonical::normalized(&json, &known).map_err(RegistryError::InvalidSchema)?;
            (fingerprint_of(&form, &sorted(&references)), NORMALIZED)
        } else {
            let form = canonical::canonical(&json, &known).map_err(RegistryError::InvalidSchema)?;
            (fingerprint_of(&form, &references), CANONICAL)
        };
        let equivalence = equivalence_of(&json, &references, &known)?;
        Ok(CandidateSchema {
            text: text.to_owned(),
            references,
            parsed,
            fingerprint,
            identity,
            equivalence,
        })
    }
}

/// The canonical fingerprint of a stored schema (`text` with `references`, resolving to
/// `dependencies`): what the registry recomputes for rows of an older rule.
pub(super) fn canonical_fingerprint(
    text: &str,
    references: &[SchemaReference],
    dependencies: &[String],
) -> Result<String, RegistryError> {
    let json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| RegistryError::InvalidSchema(format!("not JSON: {e}")))?;
    let known = known_names(dependencies)?;
    let form = canonical::canonical(&json, &known).map_err(RegistryError::InvalidSchema)?;
    Ok(fingerprint_of(&form, references))
}

/// Most references one schema may have.
const MAX_REFERENCES: usize = 100;

impl Store {
    /// Validates a schema as sent in a request: its references must name registered
    /// versions, and together with them it must parse.
    pub async fn candidate(
        &self,
        text: &str,
        schema_type: Option<&str>,
        references: Vec<SchemaReference>,
        normalize: bool,
    ) -> Result<CandidateSchema, RegistryError> {
        if references.len() > MAX_REFERENCES {
            return Err(RegistryError::InvalidSchema(format!(
                "{} references; a schema may have at most {MAX_REFERENCES}",
                references.len()
            )));
        }
        let mut references = references;
        for r in &mut references {
            // Stored as the version it meant when the schema was registered.
            if r.version == -1 {
                r.version = self.referenced(r, LIVE).await?.version;
            }
        }
        let dependencies = self.dependencies(&references, LIVE).await?;
        CandidateSchema::parse_with(text, schema_type, references, &dependencies, normalize)
    }

    /// The equivalence fingerprint of a stored version (cached by schema id: an id's text
    /// and references never change).
    async fn equivalence_of_version(&self, v: &SubjectVersion) -> Result<String, RegistryError> {
        let cached = self
            .equivalence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&v.id)
            .cloned();
        if let Some(e) = cached {
            return Ok(e);
        }
        let dependencies = self.dependencies(&v.references, true).await?;
        let json: serde_json::Value = serde_json::from_str(&v.schema).map_err(|e| {
            RegistryError::InvalidSchema(format!("stored version {} is not JSON: {e}", v.version))
        })?;
        let e = equivalence_of(&json, &v.references, &known_names(&dependencies)?)?;
        self.equivalence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(v.id, e.clone());
        Ok(e)
    }

    /// The newest of `versions` that holds a schema equivalent to `schema` (Confluent's
    /// per-subject fallback when the fingerprint finds none).
    pub(super) async fn equivalent_version(
        &self,
        versions: &[SubjectVersion],
        schema: &CandidateSchema,
    ) -> Result<Option<SubjectVersion>, RegistryError> {
        for v in versions.iter().rev() {
            match self.equivalence_of_version(v).await {
                Ok(e) if e == schema.equivalence => return Ok(Some(v.clone())),
                Ok(_) => {}
                // A version stored before whose text the forms refuse (a nested type
                // object, malformed aliases: apache-avro took them) is equivalent to none.
                Err(RegistryError::InvalidSchema(e)) => {
                    tracing::debug!(version = v.version, id = v.id, error = %e, "a stored version has no equivalence key");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Recomputes the fingerprints of schemas stored under an older rule as canonical
    /// ones, oldest first. Two such rows that the canonical string makes one (say
    /// `{"type":"int"}` and `"int"`, registered apart before) keep both ids: the first
    /// keeps the fingerprint, later ones get one that nothing matches, and their subjects
    /// still answer them through the equivalence fallback.
    pub(super) async fn refingerprint(&self) -> Result<usize, RegistryError> {
        let rows = sqlx::query(
            "SELECT id, fingerprint, schema_text, references_json FROM sr_schemas \
             WHERE identity = $1 ORDER BY id",
        )
        .bind(JSON_SORTED)
        .fetch_all(&self.pool)
        .await?;
        // Every old fingerprint out of the way first (an old one may equal a new one: a
        // bare `"long"` was fingerprinted by its own text), so the oldest row of those the
        // rule makes one keeps the canonical fingerprint.
        for r in &rows {
            let id: i64 = r.get(0);
            let old: String = r.get(1);
            sqlx::query("UPDATE sr_schemas SET fingerprint = $1 WHERE id = $2")
                .bind(format!("legacy:{id}:{old}"))
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        let mut done = 0;
        for r in rows {
            let id: i64 = r.get(0);
            let old: String = r.get(1);
            let text: String = r.get(2);
            let refs = references::from_column(&r.get::<String, _>(3));
            let dependencies = self.dependencies(&refs, true).await?;
            let fingerprint = match canonical_fingerprint(&text, &refs, &dependencies) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(id, error = %e, "a stored schema has no canonical form; it keeps its fingerprint");
                    format!("legacy:{id}:{old}")
                }
            };
            let taken: Option<i64> =
                sqlx::query_scalar("SELECT id FROM sr_schemas WHERE fingerprint = $1 AND id <> $2")
                    .bind(&fingerprint)
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
            let fingerprint = if taken.is_some() {
                format!("legacy:{id}:{old}")
            } else {
                fingerprint
            };
            sqlx::query("UPDATE sr_schemas SET fingerprint = $1, identity = $2 WHERE id = $3")
                .bind(&fingerprint)
                .bind(CANONICAL)
                .bind(id)
                .execute(&self.pool)
                .await?;
            done += 1;
        }
        Ok(done)
    }

    /// The texts of the schemas `references` name, and of theirs, dependencies first;
    /// `deleted`: soft-deleted versions count (stored schemas), or not (new ones).
    async fn dependencies(
        &self,
        references: &[SchemaReference],
        deleted: bool,
    ) -> Result<Vec<String>, RegistryError> {
        docflow_events::references::dependencies(
            references,
            |r| (r.subject.clone(), r.version),
            |r: SchemaReference| async move {
                let target = self.referenced(&r, deleted).await?;
                Ok((target.schema, target.references))
            },
            || RegistryError::InvalidSchema(docflow_events::references::TOO_MANY.to_owned()),
        )
        .await
    }

    /// The version a reference names; a missing one makes the referring schema invalid.
    /// A new schema may only refer to live versions (`deleted` false; `-1` is then the
    /// newest live one, as Confluent's `latest`); a stored one keeps resolving after its
    /// references were soft-deleted.
    pub(super) async fn referenced(
        &self,
        r: &SchemaReference,
        deleted: bool,
    ) -> Result<SubjectVersion, RegistryError> {
        let version = if r.version == -1 {
            VersionRef::Latest
        } else {
            VersionRef::parse(&r.version.to_string())?
        };
        self.version(&r.subject, version, deleted)
            .await
            .map_err(|e| match e {
                RegistryError::SubjectNotFound(_) | RegistryError::VersionNotFound { .. } => {
                    RegistryError::InvalidSchema(format!(
                        "reference {} names subject '{}' version {}, which is not registered",
                        r.name, r.subject, r.version
                    ))
                }
                other => other,
            })
    }

    /// Parses stored versions (resolving their references) with their version numbers.
    pub(super) async fn parse_versions(
        &self,
        versions: &[SubjectVersion],
    ) -> Result<Vec<(i64, Schema)>, RegistryError> {
        let mut out = Vec::with_capacity(versions.len());
        for v in versions {
            // A schema id's text and references never change, and what they refer to
            // cannot be deleted while they exist: parsed once per id.
            let cached = self
                .parsed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&v.id)
                .cloned();
            let parsed = match cached {
                Some(p) => p,
                None => {
                    let dependencies = self.dependencies(&v.references, true).await?;
                    let parsed = references::parse_with(&v.schema, &dependencies).map_err(|e| {
                        RegistryError::InvalidSchema(format!(
                            "stored version {} no longer parses: {e}",
                            v.version
                        ))
                    })?;
                    self.parsed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(v.id, parsed.clone());
                    parsed
                }
            };
            out.push((v.version, parsed));
        }
        Ok(out)
    }

    /// Ids of the schemas that reference `subject` `version` (with a version left).
    pub async fn referenced_by(
        &self,
        subject: &str,
        version: VersionRef,
    ) -> Result<Vec<i64>, RegistryError> {
        let target = self.version(subject, version, true).await?;
        referrers(&self.pool, subject, target.version, true).await
    }

    /// The version of `subject` that holds `schema`.
    pub async fn lookup(
        &self,
        subject: &str,
        schema: &CandidateSchema,
        deleted: bool,
    ) -> Result<SubjectVersion, RegistryError> {
        let versions = self.versions(subject, deleted).await?;
        let id: Option<i64> =
            sqlx::query_scalar("SELECT id FROM sr_schemas WHERE fingerprint = $1")
                .bind(&schema.fingerprint)
                .fetch_optional(&self.pool)
                .await?;
        if let Some(v) = id.and_then(|id| versions.iter().rev().find(|v| v.id == id)) {
            return Ok(v.clone());
        }
        self.equivalent_version(&versions, schema)
            .await?
            .ok_or(RegistryError::SchemaNotRegistered)
    }

    /// Schema text and references by id. Soft-deleted versions do not hide it; an id with
    /// no version left after permanent deletes is not found.
    pub async fn schema_by_id(
        &self,
        id: i64,
    ) -> Result<(String, Vec<SchemaReference>), RegistryError> {
        let row = sqlx::query(
            "SELECT s.schema_text, s.references_json FROM sr_schemas s WHERE s.id = $1 \
             AND EXISTS (SELECT 1 FROM sr_versions v WHERE v.schema_id = s.id)",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            (
                r.get::<String, _>(0),
                references::from_column(&r.get::<String, _>(1)),
            )
        })
        .ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))
    }

    /// `(subject, version)` pairs that use schema `id`.
    pub async fn subject_versions_of_id(
        &self,
        id: i64,
        deleted: bool,
    ) -> Result<Vec<(String, i64)>, RegistryError> {
        self.schema_by_id(id).await?;
        let rows = sqlx::query(
            "SELECT subject, version FROM sr_versions WHERE schema_id = $1 \
             AND (deleted = 0 OR $2 = 1) ORDER BY subject, version",
        )
        .bind(id)
        .bind(i64::from(deleted))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect())
    }
}

/// Ids of schemas with a version (soft-deleted ones too when `deleted`) whose references
/// name `subject` `version`.
pub(super) async fn referrers(
    pool: &AnyPool,
    subject: &str,
    version: i64,
    deleted: bool,
) -> Result<Vec<i64>, RegistryError> {
    let rows = sqlx::query(
        "SELECT s.id, s.references_json FROM sr_schemas s WHERE s.references_json <> '[]' \
         AND EXISTS (SELECT 1 FROM sr_versions v WHERE v.schema_id = s.id \
         AND (v.deleted = 0 OR $1 = 1)) ORDER BY s.id",
    )
    .bind(i64::from(deleted))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|r| {
            references::from_column(&r.get::<String, _>(1))
                .iter()
                .any(|x| x.subject == subject && x.version == version)
        })
        .map(|r| r.get::<i64, _>(0))
        .collect())
}
