//! Which dead letters were sent back to their source topic (`dlq_redrives` table): the
//! memory of `docflow replay dlq`, so a dead letter is redriven once, whatever the filters
//! of each run.

use sqlx::AnyPool;

use crate::StoreError;

/// Redrive records over the docflow database.
#[derive(Debug, Clone)]
pub struct Redrives {
    pool: AnyPool,
}

impl Redrives {
    /// Wraps a pool on a migrated docflow database (`docflow_store::open`).
    pub fn new(pool: AnyPool) -> Self {
        Redrives { pool }
    }

    /// Whether the dead letter at (`dlq_topic`, `partition`, `offset`) was redriven.
    pub async fn was_redriven(
        &self,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM dlq_redrives WHERE dlq_topic = $1 AND part = $2 AND off = $3",
        )
        .bind(dlq_topic)
        .bind(i64::from(partition))
        .bind(offset)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    /// Records that the dead letter was redriven (after its copy was acknowledged);
    /// recording it again changes nothing.
    pub async fn record(
        &self,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
        group: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO dlq_redrives (dlq_topic, part, off, consumer_group, redriven_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (dlq_topic, part, off) DO NOTHING",
        )
        .bind(dlq_topic)
        .bind(i64::from(partition))
        .bind(offset)
        .bind(group)
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
