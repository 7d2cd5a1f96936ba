//! The result store: what each pipeline stage did with each document.
//!
//! A stage writes one [`StageRun`] per (tenant, document, stage, stage version) as the durable
//! side effect of a record, before the runtime stores the record's offset. The row is keyed
//! so that a redelivery or a replay with the same stage version rewrites nothing: once a run
//! is [`StageStatus::Done`] it is final. A `failed` or `dead_lettered` run becomes `done` when
//! the record is replayed after the cause is fixed. A fixed stage ships a new version and
//! writes new rows; readers see the newest version of each stage
//! ([`ResultStore::latest_runs`]).
//!
//! `event_sent_at_ms` is an outbox mark: a stage produces its `doc.processed` event only while
//! the mark is empty and sets it after the broker's ack, so a redelivered record does not
//! announce the same result twice.

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};

use crate::StoreError;

/// How a stage ended with a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StageStatus {
    /// The result is stored; final for this stage version.
    Done,
    /// The document cannot be processed by this stage (a permanent error); the record is on
    /// its way to the dead-letter topic.
    Failed,
    /// The record is in the group's dead-letter topic.
    DeadLettered,
}

impl StageStatus {
    /// The stored (and API) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Done => "done",
            StageStatus::Failed => "failed",
            StageStatus::DeadLettered => "dead_lettered",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "done" => Some(StageStatus::Done),
            "failed" => Some(StageStatus::Failed),
            "dead_lettered" => Some(StageStatus::DeadLettered),
            _ => None,
        }
    }
}

/// One stage's run over one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRun {
    /// Owning tenant.
    pub tenant_id: String,
    /// Document id (hex SHA-256 of the bytes).
    pub document_id: String,
    /// Stage name (`thumbnails`, `ocr-embeddings`, ...).
    pub stage: String,
    /// Version of the stage's logic.
    pub stage_version: i32,
    /// How it ended.
    pub status: StageStatus,
    /// sha256(bytes ‖ stage ‖ version), when the bytes were read.
    pub idempotency_key: Option<String>,
    /// Where the result is (an object key or a row key), when done.
    pub result_ref: Option<String>,
    /// Small JSON summary of the result (dimensions, text excerpt, ...).
    pub output: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Delivery attempts the run took.
    pub attempts: i64,
    /// Start of the successful (or last) attempt, Unix ms.
    pub started_at_ms: i64,
    /// End of it, Unix ms.
    pub finished_at_ms: i64,
    /// When `doc.processed` was acknowledged for this run, Unix ms.
    pub event_sent_at_ms: Option<i64>,
}

impl StageRun {
    /// Wall time of the run in milliseconds.
    pub fn duration_ms(&self) -> i64 {
        (self.finished_at_ms - self.started_at_ms).max(0)
    }
}

const COLUMNS: &str = "tenant_id, document_id, stage, stage_version, status, idempotency_key, \
     result_ref, output, error, attempts, started_at_ms, finished_at_ms, event_sent_at_ms";

fn from_row(r: &AnyRow) -> Result<StageRun, StoreError> {
    let status: String = r.try_get(4)?;
    let version: i64 = r.try_get(3)?;
    Ok(StageRun {
        tenant_id: r.try_get(0)?,
        document_id: r.try_get(1)?,
        stage: r.try_get(2)?,
        stage_version: i32::try_from(version).unwrap_or(i32::MAX),
        status: StageStatus::parse(&status).ok_or_else(|| {
            StoreError::Query(sqlx::Error::Decode(
                format!("unknown stage status {status:?}").into(),
            ))
        })?,
        idempotency_key: r.try_get(5)?,
        result_ref: r.try_get(6)?,
        output: r.try_get(7)?,
        error: r.try_get(8)?,
        attempts: r.try_get(9)?,
        started_at_ms: r.try_get(10)?,
        finished_at_ms: r.try_get(11)?,
        event_sent_at_ms: r.try_get(12)?,
    })
}

/// Stage results over the service database (SQLite or PostgreSQL).
#[derive(Debug, Clone)]
pub struct ResultStore {
    pool: AnyPool,
}

impl ResultStore {
    /// Wraps a pool on a migrated docflow database ([`crate::open`]).
    pub fn new(pool: AnyPool) -> Self {
        ResultStore { pool }
    }

    /// The pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Records a run and returns the row as stored afterwards. A `done` row is never
    /// overwritten: recording the same run again (a redelivery, a replay with the same
    /// version) returns the first one unchanged.
    pub async fn record(&self, run: &StageRun) -> Result<StageRun, StoreError> {
        sqlx::query(&format!(
            "INSERT INTO stage_runs ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL) \
             ON CONFLICT (tenant_id, document_id, stage, stage_version) DO UPDATE SET \
             status = excluded.status, \
             idempotency_key = COALESCE(excluded.idempotency_key, stage_runs.idempotency_key), \
             result_ref = excluded.result_ref, output = excluded.output, error = excluded.error, \
             attempts = excluded.attempts, started_at_ms = excluded.started_at_ms, \
             finished_at_ms = excluded.finished_at_ms \
             WHERE stage_runs.status <> 'done'"
        ))
        .bind(&run.tenant_id)
        .bind(&run.document_id)
        .bind(&run.stage)
        .bind(i64::from(run.stage_version))
        .bind(run.status.as_str())
        .bind(&run.idempotency_key)
        .bind(&run.result_ref)
        .bind(&run.output)
        .bind(&run.error)
        .bind(run.attempts)
        .bind(run.started_at_ms)
        .bind(run.finished_at_ms)
        .execute(&self.pool)
        .await?;
        self.get(
            &run.tenant_id,
            &run.document_id,
            &run.stage,
            run.stage_version,
        )
        .await?
        .ok_or_else(|| StoreError::Query(sqlx::Error::RowNotFound))
    }

    /// One run.
    pub async fn get(
        &self,
        tenant_id: &str,
        document_id: &str,
        stage: &str,
        stage_version: i32,
    ) -> Result<Option<StageRun>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM stage_runs WHERE tenant_id = $1 AND document_id = $2 \
             AND stage = $3 AND stage_version = $4"
        ))
        .bind(tenant_id)
        .bind(document_id)
        .bind(stage)
        .bind(i64::from(stage_version))
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Sets the outbox mark after `doc.processed` was acknowledged.
    pub async fn mark_event_sent(&self, run: &StageRun, at_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE stage_runs SET event_sent_at_ms = $1 WHERE tenant_id = $2 AND \
             document_id = $3 AND stage = $4 AND stage_version = $5 AND event_sent_at_ms IS NULL",
        )
        .bind(at_ms)
        .bind(&run.tenant_id)
        .bind(&run.document_id)
        .bind(&run.stage)
        .bind(i64::from(run.stage_version))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The newest version's run of every stage that has one, by stage name.
    pub async fn latest_runs(
        &self,
        tenant_id: &str,
        document_id: &str,
    ) -> Result<Vec<StageRun>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM stage_runs WHERE tenant_id = $1 AND document_id = $2 \
             ORDER BY stage, stage_version DESC"
        ))
        .bind(tenant_id)
        .bind(document_id)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<StageRun> = Vec::new();
        for r in &rows {
            let run = from_row(r)?;
            if out.last().is_none_or(|prev| prev.stage != run.stage) {
                out.push(run);
            }
        }
        Ok(out)
    }
}

/// Runs of one stage that finished in a window: how many and how long they took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageWindow {
    /// Runs done.
    pub done: u64,
    /// Runs failed or dead-lettered.
    pub failed: u64,
    /// Runs done in the recent part of the window (`recent_since_ms` on).
    pub recent_done: u64,
    /// Runs failed or dead-lettered in the recent part of the window.
    pub recent_failed: u64,
    /// Median run time of the done runs, ms.
    pub p50_ms: Option<i64>,
    /// 99th percentile run time of the done runs, ms.
    pub p99_ms: Option<i64>,
    /// Whether the window held more runs than were read (the figures are of the newest
    /// [`WINDOW_MAX_RUNS`]).
    pub truncated: bool,
}

/// Most runs [`ResultStore::window`] reads.
pub const WINDOW_MAX_RUNS: usize = 20_000;

impl ResultStore {
    /// The runs of `stage` (every version, every tenant) finished at or after `since_ms`,
    /// counting apart those finished at or after `recent_since_ms` — one read for a
    /// console's throughput (recent) and run-time quantiles (whole window).
    pub async fn window(
        &self,
        stage: &str,
        since_ms: i64,
        recent_since_ms: i64,
    ) -> Result<StageWindow, StoreError> {
        let max = i64::try_from(WINDOW_MAX_RUNS).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT status, finished_at_ms - started_at_ms, finished_at_ms FROM stage_runs \
             WHERE stage = $1 AND finished_at_ms >= $2 ORDER BY finished_at_ms DESC LIMIT $3",
        )
        .bind(stage)
        .bind(since_ms)
        .bind(max + 1)
        .fetch_all(&self.pool)
        .await?;
        let mut out = StageWindow {
            truncated: rows.len() > WINDOW_MAX_RUNS,
            ..StageWindow::default()
        };
        let mut durations = Vec::with_capacity(rows.len().min(WINDOW_MAX_RUNS));
        for r in rows.iter().take(WINDOW_MAX_RUNS) {
            let status: String = r.try_get(0)?;
            let recent = r.try_get::<i64, _>(2)? >= recent_since_ms;
            match StageStatus::parse(&status) {
                Some(StageStatus::Done) => {
                    out.done += 1;
                    out.recent_done += u64::from(recent);
                    durations.push(r.try_get::<i64, _>(1)?.max(0));
                }
                Some(_) => {
                    out.failed += 1;
                    out.recent_failed += u64::from(recent);
                }
                None => {}
            }
        }
        durations.sort_unstable();
        out.p50_ms = crate::stats::quantile(&durations, 0.50);
        out.p99_ms = crate::stats::quantile(&durations, 0.99);
        Ok(out)
    }

    /// [`ResultStore::latest_runs`] of each (tenant, document) in `docs`, in one query.
    pub async fn latest_runs_of(
        &self,
        docs: &[(String, String)],
    ) -> Result<Vec<Vec<StageRun>>, StoreError> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (1..=docs.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {COLUMNS} FROM stage_runs WHERE document_id IN ({}) \
             ORDER BY tenant_id, document_id, stage, stage_version DESC",
            placeholders.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for (_, doc) in docs {
            q = q.bind(doc);
        }
        let rows = q.fetch_all(&self.pool).await?;
        let mut out: Vec<Vec<StageRun>> = vec![Vec::new(); docs.len()];
        for r in &rows {
            let run = from_row(r)?;
            for (i, (tenant, doc)) in docs.iter().enumerate() {
                if &run.tenant_id == tenant && &run.document_id == doc {
                    let runs = &mut out[i];
                    if runs
                        .last()
                        .is_none_or(|prev: &StageRun| prev.stage != run.stage)
                    {
                        runs.push(run.clone());
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    fn run(stage: &str, version: i32, status: StageStatus) -> StageRun {
        StageRun {
            tenant_id: "t1".into(),
            document_id: "d1".into(),
            stage: stage.into(),
            stage_version: version,
            status,
            idempotency_key: Some(format!("k-{stage}-{version}")),
            result_ref: (status == StageStatus::Done).then(|| format!("ref-{stage}-{version}")),
            output: None,
            error: (status != StageStatus::Done).then(|| "boom".to_owned()),
            attempts: 1,
            started_at_ms: 1_000,
            finished_at_ms: 1_250,
            event_sent_at_ms: None,
        }
    }

    async fn exercise(db: &ScratchDb) {
        let store = ResultStore::new(crate::open(&db.url, 2).await.unwrap());
        // Migrating again (a second replica) is a no-op.
        crate::migrate(store.pool()).await.unwrap();

        // failed → dead_lettered → done; done is final.
        let failed = store
            .record(&run("thumbnails", 1, StageStatus::Failed))
            .await
            .unwrap();
        assert_eq!(failed.status, StageStatus::Failed);
        let dl = store
            .record(&run("thumbnails", 1, StageStatus::DeadLettered))
            .await
            .unwrap();
        assert_eq!(dl.status, StageStatus::DeadLettered);
        let done = store
            .record(&run("thumbnails", 1, StageStatus::Done))
            .await
            .unwrap();
        assert_eq!(done.status, StageStatus::Done);
        assert_eq!(done.result_ref.as_deref(), Some("ref-thumbnails-1"));
        assert_eq!(done.duration_ms(), 250);
        let mut later = run("thumbnails", 1, StageStatus::Failed);
        later.started_at_ms = 9_000;
        let still = store.record(&later).await.unwrap();
        assert_eq!(still, done, "a done run is never rewritten");

        // Outbox mark: set once.
        store.mark_event_sent(&done, 5).await.unwrap();
        store.mark_event_sent(&done, 6).await.unwrap();
        let marked = store
            .get("t1", "d1", "thumbnails", 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(marked.event_sent_at_ms, Some(5));

        // Newest version per stage; other tenants see nothing.
        store
            .record(&run("thumbnails", 2, StageStatus::Done))
            .await
            .unwrap();
        store
            .record(&run("analytics-rollup", 1, StageStatus::Done))
            .await
            .unwrap();
        let latest = store.latest_runs("t1", "d1").await.unwrap();
        let got: Vec<(&str, i32)> = latest
            .iter()
            .map(|r| (r.stage.as_str(), r.stage_version))
            .collect();
        assert_eq!(got, vec![("analytics-rollup", 1), ("thumbnails", 2)]);
        assert!(store.latest_runs("t2", "d1").await.unwrap().is_empty());
        assert!(
            store
                .get("t2", "d1", "thumbnails", 1)
                .await
                .unwrap()
                .is_none()
        );

        // The same, for several documents at once (the console's recent jobs).
        let of = store
            .latest_runs_of(&[
                ("t1".into(), "d1".into()),
                ("t2".into(), "d1".into()),
                ("t1".into(), "nope".into()),
            ])
            .await
            .unwrap();
        assert_eq!(of[0], latest);
        assert!(of[1].is_empty() && of[2].is_empty());

        // A stage's window: done runs' quantiles, failures counted apart, older runs out.
        for (i, ms) in [10_i64, 20, 30, 40, 1_000].into_iter().enumerate() {
            let mut r = run("ocr", 1, StageStatus::Done);
            r.document_id = format!("w{i}");
            r.started_at_ms = 100_000;
            r.finished_at_ms = 100_000 + ms;
            store.record(&r).await.unwrap();
        }
        let mut failed = run("ocr", 1, StageStatus::DeadLettered);
        failed.document_id = "wf".into();
        failed.started_at_ms = 100_000;
        failed.finished_at_ms = 100_500;
        store.record(&failed).await.unwrap();
        let mut old = run("ocr", 1, StageStatus::Done);
        old.document_id = "old".into();
        store.record(&old).await.unwrap();
        let w = store.window("ocr", 50_000, 100_035).await.unwrap();
        assert_eq!(
            w,
            StageWindow {
                done: 5,
                failed: 1,
                recent_done: 2,
                recent_failed: 1,
                p50_ms: Some(30),
                p99_ms: Some(1_000),
                truncated: false
            }
        );
        assert_eq!(
            store.window("ocr", 200_000, 200_000).await.unwrap(),
            StageWindow::default()
        );
    }

    #[tokio::test]
    async fn runs_on_sqlite_and_postgres() {
        for db in ScratchDb::all().await.unwrap() {
            exercise(&db).await;
            db.drop_now().await.unwrap();
        }
    }
}
