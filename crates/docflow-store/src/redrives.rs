//! Which dead letters were handled (`dlq_redrives` table): sent back to their source topic
//! — the memory of `docflow replay dlq`, so a dead letter is redriven once, whatever the
//! filters of each run — or discarded by an operator, who and when recorded (never
//! redriven after).

use sqlx::AnyPool;

use crate::StoreError;

/// `action` of a discarded dead letter.
const DISCARDED: &str = "discarded";

/// How a dead letter was handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// Discarded by an operator (else redriven).
    pub discarded: bool,
    /// Who discarded it ('' for a redrive).
    pub by: String,
    /// When, ms since the epoch.
    pub at_ms: i64,
}

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

    /// How the dead letter at (`dlq_topic`, `partition`, `offset`) was handled, if it was.
    pub async fn handled(
        &self,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Option<Handled>, StoreError> {
        let row: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT action, handled_by, redriven_at_ms FROM dlq_redrives \
             WHERE dlq_topic = $1 AND part = $2 AND off = $3",
        )
        .bind(dlq_topic)
        .bind(i64::from(partition))
        .bind(offset)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(action, by, at_ms)| Handled {
            discarded: action == DISCARDED,
            by,
            at_ms,
        }))
    }

    /// Records that `by` discarded the dead letter (it will not be redriven); `false` when
    /// it was handled already (redriven or discarded: that record stays).
    pub async fn discard(
        &self,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
        group: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO dlq_redrives \
             (dlq_topic, part, off, consumer_group, redriven_at_ms, action, handled_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (dlq_topic, part, off) DO NOTHING",
        )
        .bind(dlq_topic)
        .bind(i64::from(partition))
        .bind(offset)
        .bind(group)
        .bind(now_ms)
        .bind(DISCARDED)
        .bind(by)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether the dead letter at (`dlq_topic`, `partition`, `offset`) was handled:
    /// redriven, or discarded (either way it is not redriven again).
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
            // A discard is handled too (never redriven, not waiting), with who and when;
            // a dead letter already handled keeps its first record.
            assert!(r.discard("t.dlq.g", 0, 7, "g", "alice", 9).await.unwrap());
            assert!(!r.discard("t.dlq.g", 0, 7, "g", "bob", 10).await.unwrap());
            assert!(!r.discard("t.dlq.g", 0, 5, "g", "bob", 10).await.unwrap());
            assert!(r.was_redriven("t.dlq.g", 0, 7).await.unwrap());
            assert_eq!(r.count_in("t.dlq.g", 0, 0, 10).await.unwrap(), 4);
            let h = r.handled("t.dlq.g", 0, 7).await.unwrap().unwrap();
            assert_eq!((h.discarded, h.by.as_str(), h.at_ms), (true, "alice", 9));
            let h = r.handled("t.dlq.g", 0, 5).await.unwrap().unwrap();
            assert_eq!((h.discarded, h.by.as_str(), h.at_ms), (false, "", 1));
            assert_eq!(r.handled("t.dlq.g", 0, 4).await.unwrap(), None);
            db.drop_now().await.unwrap();
        }
    }
}
