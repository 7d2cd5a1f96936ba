//! Subjects and their versions: registering, listing, reading and deleting, and the SQL
//! that reads versions.

use apache_avro::Schema;
use docflow_events::{CompatibilityLevel, check_versions};
use sqlx::{Any, AnyPool, Row, Transaction};

use super::schemas::referrers;
use super::{AVRO, CandidateSchema, LIVE, Store, SubjectVersion, VersionRef};
use crate::error::RegistryError;
use crate::references;

const WRITE_ATTEMPTS: usize = 5;

impl Store {
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
        if let Some(v) = self.equivalent_version(&live, schema).await? {
            return Ok(v.id);
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
                     (id, fingerprint, schema_type, schema_text, references_json, identity) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(id)
                .bind(&schema.fingerprint)
                .bind(AVRO)
                .bind(&schema.text)
                .bind(references::to_column(&schema.references))
                .bind(schema.identity)
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

pub(super) async fn versions_in<'e, E>(
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
