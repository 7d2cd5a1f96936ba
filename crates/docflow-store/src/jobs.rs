//! Ingest job records: one per (tenant, document), written before `doc.uploaded` is produced.

use sqlx::{AnyPool, Row};

use crate::StoreError;

/// Job states.
pub mod status {
    /// Blob stored and record written; event not yet acknowledged.
    pub const STORED: &str = "stored";
    /// `doc.uploaded` acknowledged by the broker.
    pub const ACCEPTED: &str = "accepted";
    /// Producing failed; the next upload of the same bytes retries.
    pub const PRODUCE_FAILED: &str = "produce_failed";
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Document id (hex SHA-256), which is also the job id.
    pub job_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Current state.
    pub status: String,
    /// Where the bytes are.
    pub object_uri: String,
    /// Sniffed type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: i64,
    /// Name the uploader gave.
    pub file_name: Option<String>,
    /// Uploads of these bytes by this tenant.
    pub uploads: i64,
    /// First upload, Unix ms.
    pub created_at_ms: i64,
    /// When the last event was acknowledged, Unix ms.
    pub produced_at_ms: Option<i64>,
}

const COLUMNS: &str = "tenant_id, document_id, object_uri, content_type, size_bytes, file_name, \
     status, uploads, created_at_ms, produced_at_ms";

fn from_row(r: &sqlx::any::AnyRow) -> Job {
    Job {
        tenant_id: r.get(0),
        job_id: r.get(1),
        object_uri: r.get(2),
        content_type: r.get(3),
        size_bytes: r.get(4),
        file_name: r.get(5),
        status: r.get(6),
        uploads: r.get(7),
        created_at_ms: r.get(8),
        produced_at_ms: r.get(9),
    }
}

/// Job storage over the service database.
#[derive(Debug, Clone)]
pub struct Jobs {
    pool: AnyPool,
}

impl Jobs {
    /// Wraps a pool on a migrated docflow database (`docflow_store::open`).
    pub fn new(pool: AnyPool) -> Self {
        Jobs { pool }
    }

    /// Whether the database answers (`SELECT 1`): readiness probes.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The job of `tenant` for `document_id`.
    pub async fn get(&self, tenant: &str, document_id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM ingest_jobs WHERE tenant_id = $1 AND document_id = $2"
        ))
        .bind(tenant)
        .bind(document_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(from_row))
    }

    /// The newest `limit` jobs of every tenant, newest first (the operators' console).
    pub async fn recent(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM ingest_jobs ORDER BY created_at_ms DESC, document_id LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(from_row).collect())
    }

    /// Records an upload: inserts the job, or counts another upload of the same bytes.
    pub async fn record_upload(&self, job: &Job) -> Result<(), StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO ingest_jobs (tenant_id, document_id, object_uri, content_type, size_bytes, \
             file_name, status, uploads, created_at_ms, produced_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, NULL) \
             ON CONFLICT (tenant_id, document_id) DO NOTHING",
        )
        .bind(&job.tenant_id)
        .bind(&job.job_id)
        .bind(&job.object_uri)
        .bind(&job.content_type)
        .bind(job.size_bytes)
        .bind(&job.file_name)
        .bind(status::STORED)
        .bind(job.created_at_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if inserted == 0 {
            sqlx::query(
                "UPDATE ingest_jobs SET uploads = uploads + 1 WHERE tenant_id = $1 AND document_id = $2",
            )
            .bind(&job.tenant_id)
            .bind(&job.job_id)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    /// Sets the state after producing.
    pub async fn set_status(
        &self,
        tenant: &str,
        document_id: &str,
        status: &str,
        produced_at_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE ingest_jobs SET status = $1, produced_at_ms = COALESCE($2, produced_at_ms) \
             WHERE tenant_id = $3 AND document_id = $4",
        )
        .bind(status)
        .bind(produced_at_ms)
        .bind(tenant)
        .bind(document_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
