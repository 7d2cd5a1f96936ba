//! The deliveries in hand of each consumer group (`deliveries` table): the durable side of
//! the runtime's crash counting (`docflow_runtime::ledger`).

use sqlx::{AnyPool, Row};

use crate::StoreError;

/// Deliveries storage over the docflow database.
#[derive(Debug, Clone)]
pub struct Deliveries {
    pool: AnyPool,
}

impl Deliveries {
    /// Wraps a pool on a migrated docflow database (`docflow_store::open`).
    pub fn new(pool: AnyPool) -> Self {
        Deliveries { pool }
    }

    /// Records one more delivery of (group, topic, partition, offset) at `now_ms`; returns
    /// the deliveries counted, this one included.
    pub async fn claim(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<u32, StoreError> {
        let row = sqlx::query(
            "INSERT INTO deliveries (consumer_group, topic, part, off, started, first_at_ms, last_at_ms) \
             VALUES ($1, $2, $3, $4, 1, $5, $5) \
             ON CONFLICT (consumer_group, topic, part, off) DO UPDATE SET \
             started = deliveries.started + 1, last_at_ms = excluded.last_at_ms \
             RETURNING started",
        )
        .bind(group)
        .bind(topic)
        .bind(i64::from(partition))
        .bind(offset)
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(u32::try_from(row.get::<i64, _>(0)).unwrap_or(u32::MAX))
    }

    /// The delivery ended in a live process: `finished` forgets the record, otherwise this
    /// one delivery is uncounted.
    pub async fn release(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        finished: bool,
    ) -> Result<(), StoreError> {
        let sql = if finished {
            "DELETE FROM deliveries WHERE consumer_group = $1 AND topic = $2 AND part = $3 AND off = $4"
        } else {
            "UPDATE deliveries SET started = started - 1 \
             WHERE consumer_group = $1 AND topic = $2 AND part = $3 AND off = $4 AND started > 0"
        };
        sqlx::query(sql)
            .bind(group)
            .bind(topic)
            .bind(i64::from(partition))
            .bind(offset)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deliveries counted for one record (0 when none is in hand).
    pub async fn count(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<u32, StoreError> {
        let row = sqlx::query(
            "SELECT started FROM deliveries \
             WHERE consumer_group = $1 AND topic = $2 AND part = $3 AND off = $4",
        )
        .bind(group)
        .bind(topic)
        .bind(i64::from(partition))
        .bind(offset)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map_or(0, |r| u32::try_from(r.get::<i64, _>(0)).unwrap_or(u32::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    #[tokio::test]
    async fn claims_count_until_released() {
        for db in ScratchDb::all().await.unwrap() {
            let d = Deliveries::new(crate::open(&db.url, 2).await.unwrap());
            assert_eq!(d.claim("g", "t", 0, 7, 1).await.unwrap(), 1);
            assert_eq!(
                d.claim("g", "t", 0, 7, 2).await.unwrap(),
                2,
                "never released: a crash"
            );
            assert_eq!(
                d.claim("g", "t", 1, 7, 2).await.unwrap(),
                1,
                "another partition"
            );
            assert_eq!(
                d.claim("h", "t", 0, 7, 2).await.unwrap(),
                1,
                "another group"
            );
            d.release("g", "t", 0, 7, false).await.unwrap();
            assert_eq!(
                d.count("g", "t", 0, 7).await.unwrap(),
                1,
                "an abandoned delivery is uncounted"
            );
            d.release("g", "t", 0, 7, true).await.unwrap();
            assert_eq!(d.count("g", "t", 0, 7).await.unwrap(), 0);
            assert_eq!(
                d.claim("g", "t", 0, 7, 3).await.unwrap(),
                1,
                "a redelivery after a finish starts over"
            );
            db.drop_now().await.unwrap();
        }
    }
}
