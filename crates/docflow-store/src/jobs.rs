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

    /// The newest `limit` jobs of every tenant whose document id starts with `query` or whose
    /// file name contains it (case-insensitive; `%` and `_` match themselves). A scan of
    /// the table: an operator's look-up, not an API for tenants.
    pub async fn find(&self, query: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        // Both sides folded by the database's own LOWER (SQLite folds ASCII only, PostgreSQL
        // more): the same engine, the same folding.
        let needle: String = query
            .trim()
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM ingest_jobs \
             WHERE document_id LIKE LOWER($1) ESCAPE '\\' \
             OR LOWER(file_name) LIKE LOWER($2) ESCAPE '\\' \
             ORDER BY created_at_ms DESC, document_id LIMIT $3"
        ))
        .bind(format!("{needle}%"))
        .bind(format!("%{needle}%"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    fn job(tenant: &str, id: &str, name: Option<&str>, at: i64) -> Job {
        Job {
            job_id: id.to_owned(),
            tenant_id: tenant.to_owned(),
            status: status::STORED.to_owned(),
            object_uri: format!("file:///{id}"),
            content_type: "application/pdf".to_owned(),
            size_bytes: 1,
            file_name: name.map(str::to_owned),
            uploads: 1,
            created_at_ms: at,
            produced_at_ms: None,
        }
    }

    #[tokio::test]
    async fn jobs_are_found_by_id_prefix_or_file_name() {
        for db in ScratchDb::all().await.unwrap() {
            let jobs = Jobs::new(crate::open(&db.url, 2).await.unwrap());
            jobs.record_upload(&job("a", "ab12ff", Some("Invoice_2026.pdf"), 1))
                .await
                .unwrap();
            jobs.record_upload(&job("b", "cd34ab", Some("report 100%.pdf"), 2))
                .await
                .unwrap();
            jobs.record_upload(&job("a", "ef56", None, 3))
                .await
                .unwrap();
            let ids = |found: Vec<Job>| found.into_iter().map(|j| j.job_id).collect::<Vec<_>>();
            assert_eq!(
                ids(jobs.find("AB12", 10).await.unwrap()),
                ["ab12ff"],
                "{}",
                db.url
            );
            // "ab" is the start of one id and inside another: only the prefix counts.
            assert_eq!(ids(jobs.find("ab", 10).await.unwrap()), ["ab12ff"]);
            assert_eq!(ids(jobs.find("invoice", 10).await.unwrap()), ["ab12ff"]);
            assert_eq!(
                ids(jobs.find(".pdf", 10).await.unwrap()),
                ["cd34ab", "ab12ff"]
            );
            assert_eq!(ids(jobs.find(".pdf", 1).await.unwrap()), ["cd34ab"]);
            // Wildcards are literal.
            assert_eq!(ids(jobs.find("100%", 10).await.unwrap()), ["cd34ab"]);
            assert_eq!(ids(jobs.find("%", 10).await.unwrap()), ["cd34ab"]);
            assert_eq!(ids(jobs.find("_", 10).await.unwrap()), ["ab12ff"]);
            assert!(jobs.find("nothing", 10).await.unwrap().is_empty());
            db.drop_now().await.unwrap();
        }
    }
}
