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

    /// How many dead letters at offsets `from..to` of `partition` of `dlq_topic` were
    /// redriven (those still in the topic, when `from..to` is its log start..end).
    pub async fn count_in(
        &self,
        dlq_topic: &str,
        partition: i32,
        from: i64,
        to: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM dlq_redrives \
             WHERE dlq_topic = $1 AND part = $2 AND off >= $3 AND off < $4",
        )
        .bind(dlq_topic)
        .bind(i64::from(partition))
        .bind(from)
        .bind(to)
        .fetch_one(&self.pool)
        .await?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    #[tokio::test]
    async fn redrives_are_remembered_and_counted_by_range() {
        for db in ScratchDb::all().await.unwrap() {
            let r = Redrives::new(crate::open(&db.url, 2).await.unwrap());
            for off in [3, 5, 9] {
                r.record("t.dlq.g", 0, off, "g", 1).await.unwrap();
            }
            r.record("t.dlq.g", 0, 5, "g", 2).await.unwrap();
            r.record("t.dlq.g", 1, 4, "g", 1).await.unwrap();
            assert!(r.was_redriven("t.dlq.g", 0, 5).await.unwrap());
            assert!(!r.was_redriven("t.dlq.g", 0, 4).await.unwrap());
            assert_eq!(r.count_in("t.dlq.g", 0, 0, 10).await.unwrap(), 3);
            // Retention took offsets before 4: the redrive of 3 is no longer in the topic.
            assert_eq!(r.count_in("t.dlq.g", 0, 4, 10).await.unwrap(), 2);
            assert_eq!(r.count_in("t.dlq.g", 0, 4, 9).await.unwrap(), 1);
            assert_eq!(r.count_in("t.dlq.g", 1, 0, 10).await.unwrap(), 1);
            assert_eq!(r.count_in("other", 0, 0, 10).await.unwrap(), 0);
            db.drop_now().await.unwrap();
        }
    }
}
