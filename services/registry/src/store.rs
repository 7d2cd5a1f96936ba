//! The registry's state in SQL: schemas by id, subject versions, compatibility config.
//!
//! Guarantees:
//! * the same schema (after JSON normalisation) gets the same id in every subject;
//! * re-registering a schema a subject already has returns the existing id, no new version;
//! * versions only increase, also after soft or permanent deletes;
//! * schema rows are never deleted, so ids of soft-deleted versions still resolve.
//!
//! Writes run in one transaction each, serialised by a process-wide lock; ids and versions
//! are also guarded by primary keys, and a write that loses a race with another replica is
//! retried.

use std::collections::HashMap;
use std::sync::PoisonError;

use apache_avro::Schema;
use docflow_events::{CompatibilityLevel, check_versions};
use sha2::{Digest, Sha256};
use sqlx::{Any, AnyPool, Row, Transaction};
use tokio::sync::Mutex;

use crate::error::RegistryError;
use crate::references::{self, SchemaReference};

/// The only schema type this registry stores.
pub const AVRO: &str = "AVRO";

/// A schema as registered under a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    /// Subject.
    pub subject: String,
    /// Version within the subject.
    pub version: i64,
    /// Global schema id.
    pub id: i64,
    /// Schema text as first registered.
    pub schema: String,
    /// Soft-deleted.
    pub deleted: bool,
    /// Named types the schema takes from other subjects.
    pub references: Vec<SchemaReference>,
}

/// Which version a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRef {
    /// The newest (not deleted) version.
    Latest,
    /// A specific version.
    Number(i64),
}

impl VersionRef {
    /// Parses Confluent's version path segment: `latest`, `-1`, or 1..=2^31-1.
    pub fn parse(s: &str) -> Result<Self, RegistryError> {
        if s.eq_ignore_ascii_case("latest") || s == "-1" {
            return Ok(VersionRef::Latest);
        }
        match s.parse::<i64>() {
            Ok(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(VersionRef::Number(n)),
            _ => Err(RegistryError::InvalidVersion(s.to_owned())),
        }
    }
}

/// A parsed, normalised Avro schema ready to store.
#[derive(Debug)]
pub struct CandidateSchema {
    /// Text as sent.
    pub text: String,
    /// References as sent.
    pub references: Vec<SchemaReference>,
    /// Parsed schema, self-contained (referenced types written out).
    pub parsed: Schema,
    /// sha256 of the normalised JSON (and of the references, when there are any): a
    /// schema's identity is its text and what its names refer to.
    pub fingerprint: String,
}

impl CandidateSchema {
    /// Validates `text` as an Avro schema of `schema_type` (only AVRO is supported) that
    /// uses no references.
    pub fn parse(text: &str, schema_type: Option<&str>) -> Result<Self, RegistryError> {
        Self::parse_with(text, schema_type, Vec::new(), &[])
    }

    /// [`CandidateSchema::parse`] for a schema with `references`, whose resolved texts are
    /// `dependencies` (dependencies first).
    fn parse_with(
        text: &str,
        schema_type: Option<&str>,
        references: Vec<SchemaReference>,
        dependencies: &[String],
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
        let mut identity = normalise(&json).to_string();
        if !references.is_empty() {
            identity.push('\n');
            identity.push_str(&references::to_column(&references));
        }
        Ok(CandidateSchema {
            text: text.to_owned(),
            references,
            parsed,
            fingerprint: hex::encode(Sha256::digest(identity.as_bytes())),
        })
    }
}

/// Sorts object keys recursively so that formatting and key order do not change identity.
fn normalise(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), normalise(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(normalise).collect())
        }
        other => other.clone(),
    }
}

/// Registry state over a SQL pool.
#[derive(Debug)]
pub struct Store {
    pool: AnyPool,
    write: Mutex<()>,
    default_level: CompatibilityLevel,
    /// Stored schemas parsed with their references resolved, by id.
    parsed: std::sync::Mutex<HashMap<i64, Schema>>,
}

const GLOBAL: &str = "";
/// Most references one schema may have.
const MAX_REFERENCES: usize = 100;
/// `deleted` for [`Store::referenced`]: only live versions.
const LIVE: bool = false;
const WRITE_ATTEMPTS: usize = 5;

impl Store {
    /// Runs migrations and wraps the pool. `default_level` applies until `PUT /config`.
    pub async fn open(
        pool: AnyPool,
        default_level: CompatibilityLevel,
    ) -> Result<Self, RegistryError> {
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| RegistryError::Store(e.into()))?;
        Ok(Store {
            pool,
            write: Mutex::new(()),
            default_level,
            parsed: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The pool (tests close it to simulate an outage).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Validates a schema as sent in a request: its references must name registered
    /// versions, and together with them it must parse.
    pub async fn candidate(
        &self,
        text: &str,
        schema_type: Option<&str>,
        references: Vec<SchemaReference>,
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
        CandidateSchema::parse_with(text, schema_type, references, &dependencies)
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
    async fn referenced(
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
    async fn parse_versions(
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

    /// Registers `schema` under `subject`, returning its id.
    pub async fn register(
        &self,
        subject: &str,
        schema: &CandidateSchema,
    ) -> Result<i64, RegistryError> {
        let _guard = self.write.lock().await;
        // The references were checked before the lock; a delete may have come between.
        // Deletes take the lock too, so checked again here they hold until the commit.
        for r in &schema.references {
            self.referenced(r, LIVE).await?;
        }
        let level = self.level_in(&self.pool, subject).await?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.pool.begin().await?;
            match self.register_in(&mut tx, subject, schema, level).await {
                Ok(id) => match tx.commit().await {
                    Ok(()) => return Ok(id),
                    Err(e)
                        if docflow_store::is_unique_violation(&e) && attempt < WRITE_ATTEMPTS =>
                    {
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                },
                Err(RegistryError::Store(docflow_store::StoreError::Query(e)))
                    if docflow_store::is_unique_violation(&e) && attempt < WRITE_ATTEMPTS =>
                {
                    tracing::debug!(subject, attempt, "lost a registration race; retrying");
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn register_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        subject: &str,
        schema: &CandidateSchema,
        level: CompatibilityLevel,
    ) -> Result<i64, RegistryError> {
        let live = live_versions(&mut **tx, subject).await?;
        let existing_id: Option<i64> =
            sqlx::query_scalar("SELECT id FROM sr_schemas WHERE fingerprint = $1")
                .bind(&schema.fingerprint)
                .fetch_optional(&mut **tx)
                .await?;
        if let Some(id) = existing_id
            && live.iter().any(|v| v.id == id)
        {
            return Ok(id);
        }
        let history = self.parse_versions(&live).await?;
        let numbered: Vec<(i64, &Schema)> = history.iter().map(|(n, s)| (*n, s)).collect();
        check_versions(level, &numbered, &schema.parsed).map_err(|reasons| {
            RegistryError::Incompatible {
                subject: subject.to_owned(),
                reasons,
            }
        })?;
        let id = match existing_id {
            Some(id) => id,
            None => {
                let id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM sr_schemas")
                    .fetch_one(&mut **tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO sr_schemas \
                     (id, fingerprint, schema_type, schema_text, references_json) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id)
                .bind(&schema.fingerprint)
                .bind(AVRO)
                .bind(&schema.text)
                .bind(references::to_column(&schema.references))
                .execute(&mut **tx)
                .await?;
                id
            }
        };
        let last: Option<i64> =
            sqlx::query_scalar("SELECT last_version FROM sr_subjects WHERE subject = $1")
                .bind(subject)
                .fetch_optional(&mut **tx)
                .await?;
        let version = last.unwrap_or(0) + 1;
        if last.is_some() {
            sqlx::query("UPDATE sr_subjects SET last_version = $1 WHERE subject = $2")
                .bind(version)
                .bind(subject)
                .execute(&mut **tx)
                .await?;
        } else {
            sqlx::query("INSERT INTO sr_subjects (subject, last_version) VALUES ($1, $2)")
                .bind(subject)
                .bind(version)
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO sr_versions (subject, version, schema_id, deleted) VALUES ($1, $2, $3, 0)",
        )
        .bind(subject)
        .bind(version)
        .bind(id)
        .execute(&mut **tx)
        .await?;
        tracing::info!(subject, version, id, "schema registered");
        Ok(id)
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
        id.and_then(|id| versions.into_iter().rev().find(|v| v.id == id))
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

    /// Subjects with at least one version (soft-deleted ones too when `deleted`).
    pub async fn subjects(&self, deleted: bool) -> Result<Vec<String>, RegistryError> {
        let rows = sqlx::query(
            "SELECT DISTINCT subject FROM sr_versions WHERE deleted = 0 OR $1 = 1 ORDER BY subject",
        )
        .bind(i64::from(deleted))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| r.get::<String, _>(0)).collect())
    }

    /// Versions of `subject`, oldest first; 40401 when it has none.
    pub async fn versions(
        &self,
        subject: &str,
        deleted: bool,
    ) -> Result<Vec<SubjectVersion>, RegistryError> {
        let all = versions_in(&self.pool, subject, deleted).await?;
        if all.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_owned()));
        }
        Ok(all)
    }

    /// One version of `subject`.
    pub async fn version(
        &self,
        subject: &str,
        version: VersionRef,
        deleted: bool,
    ) -> Result<SubjectVersion, RegistryError> {
        let all = self.versions(subject, deleted).await?;
        let found = match version {
            VersionRef::Latest => all.last().cloned(),
            VersionRef::Number(n) => all.iter().find(|v| v.version == n).cloned(),
        };
        found.ok_or_else(|| RegistryError::VersionNotFound {
            version: match version {
                VersionRef::Latest => "latest".to_owned(),
                VersionRef::Number(n) => n.to_string(),
            },
        })
    }

    /// Deletes every version of `subject`: soft first, then (with `permanent`) for good.
    pub async fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<Vec<i64>, RegistryError> {
        let _guard = self.write.lock().await;
        let all = versions_in(&self.pool, subject, true).await?;
        if all.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_owned()));
        }
        let live = versions_in(&self.pool, subject, false).await?;
        for v in &all {
            refuse_if_referenced(&self.pool, subject, v.version, permanent).await?;
        }
        if permanent {
            if !live.is_empty() {
                return Err(RegistryError::SubjectNotSoftDeleted(subject.to_owned()));
            }
            sqlx::query("DELETE FROM sr_versions WHERE subject = $1")
                .bind(subject)
                .execute(&self.pool)
                .await?;
            sqlx::query("DELETE FROM sr_config WHERE scope = $1")
                .bind(subject)
                .execute(&self.pool)
                .await?;
            return Ok(all.iter().map(|v| v.version).collect());
        }
        if live.is_empty() {
            return Err(RegistryError::SubjectSoftDeleted(subject.to_owned()));
        }
        sqlx::query("UPDATE sr_versions SET deleted = 1 WHERE subject = $1")
            .bind(subject)
            .execute(&self.pool)
            .await?;
        Ok(live.iter().map(|v| v.version).collect())
    }

    /// Deletes one version: soft first, then (with `permanent`) for good.
    pub async fn delete_version(
        &self,
        subject: &str,
        version: VersionRef,
        permanent: bool,
    ) -> Result<i64, RegistryError> {
        let _guard = self.write.lock().await;
        let all = versions_in(&self.pool, subject, true).await?;
        if all.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_owned()));
        }
        let target = match version {
            VersionRef::Latest => all.iter().rev().find(|v| !v.deleted),
            VersionRef::Number(n) => all.iter().find(|v| v.version == n),
        }
        .ok_or_else(|| RegistryError::VersionNotFound {
            version: match version {
                VersionRef::Latest => "latest".to_owned(),
                VersionRef::Number(n) => n.to_string(),
            },
        })?;
        let n = target.version;
        refuse_if_referenced(&self.pool, subject, n, permanent).await?;
        if permanent {
            if !target.deleted {
                return Err(RegistryError::VersionNotSoftDeleted {
                    subject: subject.to_owned(),
                    version: n,
                });
            }
            sqlx::query("DELETE FROM sr_versions WHERE subject = $1 AND version = $2")
                .bind(subject)
                .bind(n)
                .execute(&self.pool)
                .await?;
        } else {
            if target.deleted {
                return Err(RegistryError::VersionSoftDeleted {
                    subject: subject.to_owned(),
                    version: n,
                });
            }
            sqlx::query("UPDATE sr_versions SET deleted = 1 WHERE subject = $1 AND version = $2")
                .bind(subject)
                .bind(n)
                .execute(&self.pool)
                .await?;
        }
        Ok(n)
    }

    /// Checks `schema` against one version, or (with `None`) against the versions the
    /// subject's level names. `Ok(vec![])` means compatible.
    pub async fn check(
        &self,
        subject: &str,
        against: Option<VersionRef>,
        schema: &CandidateSchema,
    ) -> Result<Vec<String>, RegistryError> {
        let level = self.level_in(&self.pool, subject).await?;
        let history = match against {
            // Confluent: nothing to be incompatible with (the gate CI runs before the first
            // registration of a subject).
            Some(VersionRef::Latest) => versions_in(&self.pool, subject, false)
                .await?
                .pop()
                .into_iter()
                .collect(),
            Some(VersionRef::Number(n)) => {
                let all = versions_in(&self.pool, subject, false).await?;
                vec![all.into_iter().find(|v| v.version == n).ok_or(
                    RegistryError::VersionNotFound {
                        version: n.to_string(),
                    },
                )?]
            }
            None => versions_in(&self.pool, subject, false).await?,
        };
        let parsed = self.parse_versions(&history).await?;
        let numbered: Vec<(i64, &Schema)> = parsed.iter().map(|(n, s)| (*n, s)).collect();
        // A check against one version compares with it alone, whatever the level's reach.
        let level = match (against, level) {
            (Some(_), CompatibilityLevel::BackwardTransitive) => CompatibilityLevel::Backward,
            (Some(_), CompatibilityLevel::ForwardTransitive) => CompatibilityLevel::Forward,
            (Some(_), CompatibilityLevel::FullTransitive) => CompatibilityLevel::Full,
            (_, level) => level,
        };
        Ok(check_versions(level, &numbered, &schema.parsed)
            .err()
            .unwrap_or_default())
    }

    /// The level that applies to `subject` (`None`: the global level).
    pub async fn level(&self, subject: Option<&str>) -> Result<CompatibilityLevel, RegistryError> {
        match subject {
            Some(s) => self.level_in(&self.pool, s).await,
            None => Ok(self
                .configured(&self.pool, GLOBAL)
                .await?
                .unwrap_or(self.default_level)),
        }
    }

    /// The level configured for exactly this subject, if any.
    pub async fn subject_level(
        &self,
        subject: &str,
    ) -> Result<Option<CompatibilityLevel>, RegistryError> {
        self.configured(&self.pool, subject).await
    }

    /// Sets the level of `subject`, or the global level.
    pub async fn set_level(
        &self,
        subject: Option<&str>,
        level: CompatibilityLevel,
    ) -> Result<(), RegistryError> {
        let _guard = self.write.lock().await;
        let scope = subject.unwrap_or(GLOBAL);
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sr_config WHERE scope = $1")
            .bind(scope)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO sr_config (scope, compatibility) VALUES ($1, $2)")
            .bind(scope)
            .bind(level.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes the level of `subject` (or the global one), returning what it was.
    pub async fn clear_level(
        &self,
        subject: Option<&str>,
    ) -> Result<Option<CompatibilityLevel>, RegistryError> {
        let _guard = self.write.lock().await;
        let scope = subject.unwrap_or(GLOBAL);
        let before = self.configured(&self.pool, scope).await?;
        sqlx::query("DELETE FROM sr_config WHERE scope = $1")
            .bind(scope)
            .execute(&self.pool)
            .await?;
        Ok(before)
    }

    async fn level_in<'e, E>(
        &self,
        ex: E,
        subject: &str,
    ) -> Result<CompatibilityLevel, RegistryError>
    where
        E: sqlx::Executor<'e, Database = Any> + Copy,
    {
        if let Some(l) = self.configured(ex, subject).await? {
            return Ok(l);
        }
        Ok(self
            .configured(ex, GLOBAL)
            .await?
            .unwrap_or(self.default_level))
    }

    async fn configured<'e, E>(
        &self,
        ex: E,
        scope: &str,
    ) -> Result<Option<CompatibilityLevel>, RegistryError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let v: Option<String> =
            sqlx::query_scalar("SELECT compatibility FROM sr_config WHERE scope = $1")
                .bind(scope)
                .fetch_optional(ex)
                .await?;
        v.map(|s| {
            s.parse()
                .map_err(|_| RegistryError::InvalidCompatibilityLevel(s.clone()))
        })
        .transpose()
    }
}

/// Refuses to delete `subject` `version` while a schema refers to it (Confluent's 42206):
/// a soft delete while a live version refers to it, a permanent one while any does.
async fn refuse_if_referenced(
    pool: &AnyPool,
    subject: &str,
    version: i64,
    permanent: bool,
) -> Result<(), RegistryError> {
    let ids = referrers(pool, subject, version, permanent).await?;
    if ids.is_empty() {
        Ok(())
    } else {
        Err(RegistryError::ReferenceExists {
            subject: subject.to_owned(),
            version,
            ids,
        })
    }
}

/// Ids of schemas with a version (soft-deleted ones too when `deleted`) whose references
/// name `subject` `version`.
async fn referrers(
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

async fn live_versions<'e, E>(ex: E, subject: &str) -> Result<Vec<SubjectVersion>, RegistryError>
where
    E: sqlx::Executor<'e, Database = Any>,
{
    let rows = sqlx::query(
        "SELECT v.version, v.schema_id, s.schema_text, v.deleted, s.references_json \
         FROM sr_versions v \
         JOIN sr_schemas s ON s.id = v.schema_id \
         WHERE v.subject = $1 AND v.deleted = 0 ORDER BY v.version",
    )
    .bind(subject)
    .fetch_all(ex)
    .await?;
    Ok(rows_to_versions(subject, rows))
}

fn rows_to_versions(subject: &str, rows: Vec<sqlx::any::AnyRow>) -> Vec<SubjectVersion> {
    rows.into_iter()
        .map(|r| SubjectVersion {
            version: r.get::<i64, _>(0),
            id: r.get::<i64, _>(1),
            schema: r.get::<String, _>(2),
            deleted: r.get::<i64, _>(3) != 0,
            references: references::from_column(&r.get::<String, _>(4)),
            subject: subject.to_owned(),
        })
        .collect()
}

async fn versions_in<'e, E>(
    ex: E,
    subject: &str,
    deleted: bool,
) -> Result<Vec<SubjectVersion>, RegistryError>
where
    E: sqlx::Executor<'e, Database = Any>,
{
    let rows = sqlx::query(
        "SELECT v.version, v.schema_id, s.schema_text, v.deleted, s.references_json \
         FROM sr_versions v \
         JOIN sr_schemas s ON s.id = v.schema_id \
         WHERE v.subject = $1 AND (v.deleted = 0 OR $2 = 1) ORDER BY v.version",
    )
    .bind(subject)
    .bind(i64::from(deleted))
    .fetch_all(ex)
    .await?;
    Ok(rows_to_versions(subject, rows))
}
