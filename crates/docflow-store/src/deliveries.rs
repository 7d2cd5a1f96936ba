//! The deliveries in hand of each consumer group (`deliveries` table): the durable side of
//! the runtime's crash counting (`docflow_runtime::ledger`).

use sqlx::{AnyPool, Row};

use crate::StoreError;

/// How long the evidence of deaths (`delivery_deaths`, `process_deaths`) is kept.
pub const EVIDENCE_MS: i64 = 7 * 24 * 3600 * 1000;

/// Deliveries storage over the docflow database.
#[derive(Debug, Clone)]
pub struct Deliveries {
    pool: AnyPool,
}

/// What a claim found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// Deliveries since the record was last finished, this one included.
    pub deliveries: u32,
    /// Deaths with the record in hand, of any kind: a record with one is a suspect.
    pub deaths: u32,
    /// Deaths while it ran alone, of a process whose cause of death was recorded
    /// ([`Deliveries::record_death`]: it died of its own fault).
    pub convicting: u32,
    /// Deaths while it ran alone, of any cause (seen or not).
    pub alone: u32,
}

/// One death found with a record in hand: the evidence a crash-loop dead letter names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The process life that died.
    pub life: String,
    /// Whether the record ran alone in it.
    pub alone: bool,
    /// Records that life was found holding when this death was found (this one included).
    pub in_hand: u32,
    /// How the life ended, as its supervisor saw it; `None`: nobody saw (killed from
    /// outside with its supervisor, a lost node).
    pub cause: Option<String>,
    /// When the death was found (ms since the epoch).
    pub found_at_ms: i64,
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds a record's key (group, topic, partition, offset) to `$1`..`$4` of `q`.
fn keyed<'q>(
    q: AnyQuery<'q>,
    group: &'q str,
    topic: &'q str,
    partition: i32,
    offset: i64,
) -> AnyQuery<'q> {
    q.bind(group)
        .bind(topic)
        .bind(i64::from(partition))
        .bind(offset)
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

/// The key columns' condition, binding $1..$4.
const KEY: &str = "consumer_group = $1 AND topic = $2 AND part = $3 AND off = $4";

impl Deliveries {
    /// Wraps a pool on a migrated docflow database (`docflow_store::open`).
    pub fn new(pool: AnyPool) -> Self {
        Deliveries { pool }
    }

    /// Records one more delivery of (group, topic, partition, offset) by process life
    /// `life` at `now_ms`. A delivery still in hand from an earlier claim by another life
    /// means that life died with it: the death is counted and its evidence kept. The deaths
    /// that count towards conviction are read at every claim, so a cause recorded late
    /// ([`Deliveries::record_death`]) still counts.
    pub async fn claim(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        life: &str,
        now_ms: i64,
    ) -> Result<Claimed, StoreError> {
        // One statement: the earlier delivery's life and mode are read from the row it
        // replaces (SET expressions see the old row), so no transaction is needed.
        let row = keyed(
            sqlx::query(
                "INSERT INTO deliveries (consumer_group, topic, part, off, started, first_at_ms, \
             last_at_ms, life, held, alone, deaths, died_life, died_alone) \
             VALUES ($1, $2, $3, $4, 1, $5, $5, $6, 1, 0, 0, '', 0) \
             ON CONFLICT (consumer_group, topic, part, off) DO UPDATE SET \
             started = deliveries.started + 1, last_at_ms = excluded.last_at_ms, \
             deaths = deliveries.deaths + CASE WHEN deliveries.held = 1 \
               AND deliveries.life <> excluded.life THEN 1 ELSE 0 END, \
             died_life = CASE WHEN deliveries.held = 1 AND deliveries.life <> excluded.life \
               THEN deliveries.life ELSE '' END, \
             died_alone = CASE WHEN deliveries.held = 1 AND deliveries.life <> excluded.life \
               THEN deliveries.alone ELSE 0 END, \
             life = excluded.life, held = 1, alone = 0 \
             RETURNING started, deaths, died_life, died_alone",
            ),
            group,
            topic,
            partition,
            offset,
        )
        .bind(now_ms)
        .bind(life)
        .fetch_one(&self.pool)
        .await?;
        let mut claimed = Claimed {
            deliveries: count(row.get::<i64, _>(0)),
            deaths: count(row.get::<i64, _>(1)),
            ..Claimed::default()
        };
        let died: String = row.get(2);
        if !died.is_empty() {
            // How many records the dead life held: those still in its hand plus those
            // already found.
            let held: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM deliveries \
                 WHERE consumer_group = $1 AND life = $2 AND held = 1",
            )
            .bind(group)
            .bind(&died)
            .fetch_one(&self.pool)
            .await?;
            let found: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM delivery_deaths WHERE consumer_group = $1 AND life = $2",
            )
            .bind(group)
            .bind(&died)
            .fetch_one(&self.pool)
            .await?;
            keyed(
                sqlx::query(
                    "INSERT INTO delivery_deaths (consumer_group, topic, part, off, life, alone, \
                 in_hand, found_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                ),
                group,
                topic,
                partition,
                offset,
            )
            .bind(&died)
            .bind(row.get::<i64, _>(3))
            .bind(held + found + 1)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        }
        if claimed.deaths > 0 {
            let alone = keyed(
                sqlx::query(&format!(
                    "SELECT COUNT(p.life), COUNT(*) FROM delivery_deaths d \
                 LEFT JOIN process_deaths p ON p.life = d.life \
                 WHERE d.{} AND d.alone = 1",
                    KEY.replace(" AND ", " AND d.")
                )),
                group,
                topic,
                partition,
                offset,
            )
            .fetch_one(&self.pool)
            .await?;
            claimed.convicting = count(alone.get::<i64, _>(0));
            claimed.alone = count(alone.get::<i64, _>(1));
        }
        Ok(claimed)
    }

    /// Marks the delivery `life` holds as running alone or not (a suspect holding every
    /// execution slot, or letting them go for a retry delay).
    #[allow(clippy::too_many_arguments)]
    pub async fn set_alone(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        life: &str,
        alone: bool,
    ) -> Result<(), StoreError> {
        keyed(
            sqlx::query(&format!(
                "UPDATE deliveries SET alone = $6 WHERE {KEY} AND life = $5"
            )),
            group,
            topic,
            partition,
            offset,
        )
        .bind(life)
        .bind(i64::from(alone))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The delivery `life` holds ended in a live process: `finished` forgets the record and
    /// its deaths (a later delivery, after a replay, starts clean); otherwise it is no
    /// longer in hand and its deaths stay (a suspect stays one). A delivery another life
    /// has claimed since (after a revoke) is left alone.
    pub async fn release(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        life: &str,
        finished: bool,
    ) -> Result<(), StoreError> {
        let sql = if finished {
            format!("DELETE FROM deliveries WHERE {KEY} AND life = $5")
        } else {
            format!("UPDATE deliveries SET held = 0, alone = 0 WHERE {KEY} AND life = $5")
        };
        let done = keyed(sqlx::query(&sql), group, topic, partition, offset)
            .bind(life)
            .execute(&self.pool)
            .await?;
        if finished && done.rows_affected() > 0 {
            keyed(
                sqlx::query(&format!("DELETE FROM delivery_deaths WHERE {KEY}")),
                group,
                topic,
                partition,
                offset,
            )
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    /// Records how process life `life` ended (`cause`: a signal or exit status and its last
    /// words), as its supervisor saw it: a death of that life counts against a record it
    /// ran alone. Evidence older than [`EVIDENCE_MS`] is dropped.
    pub async fn record_death(
        &self,
        life: &str,
        cause: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO process_deaths (life, cause, at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (life) DO UPDATE SET cause = excluded.cause, at_ms = excluded.at_ms",
        )
        .bind(life)
        .bind(cause)
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        let before = now_ms - EVIDENCE_MS;
        sqlx::query("DELETE FROM process_deaths WHERE at_ms < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM delivery_deaths WHERE found_at_ms < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The deaths found with one record in hand since it last finished, oldest first.
    pub async fn deaths(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Vec<Death>, StoreError> {
        let rows = keyed(
            sqlx::query(&format!(
                "SELECT d.life, d.alone, d.in_hand, p.cause, d.found_at_ms \
             FROM delivery_deaths d LEFT JOIN process_deaths p ON p.life = d.life \
             WHERE d.{} ORDER BY d.found_at_ms",
                KEY.replace(" AND ", " AND d.")
            )),
            group,
            topic,
            partition,
            offset,
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Death {
                life: r.get(0),
                alone: r.get::<i64, _>(1) == 1,
                in_hand: count(r.get::<i64, _>(2)),
                cause: r.get(3),
                found_at_ms: r.get(4),
            })
            .collect())
    }

    /// Deliveries in hand for one record (1 while claimed and not released, else 0).
    pub async fn count(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<u32, StoreError> {
        let row = keyed(
            sqlx::query(&format!("SELECT held FROM deliveries WHERE {KEY}")),
            group,
            topic,
            partition,
            offset,
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map_or(0, |r| count(r.get::<i64, _>(0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    #[tokio::test]
    async fn deaths_make_suspects_and_only_deaths_alone_convict() {
        for db in ScratchDb::all().await.unwrap() {
            let d = Deliveries::new(crate::open(&db.url, 2).await.unwrap());
            let c = |deliveries, deaths, convicting, alone| Claimed {
                deliveries,
                deaths,
                convicting,
                alone,
            };
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-1", 1).await.unwrap(),
                c(1, 0, 0, 0)
            );
            // life-1 held two records when it died, nobody saw how (killed from outside).
            d.claim("g", "t", 0, 8, "life-1", 1).await.unwrap();
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-2", 2).await.unwrap(),
                c(2, 1, 0, 0),
                "never released: a death, and a suspect, but not counted"
            );
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-2", 2).await.unwrap().deaths,
                1,
                "claimed again by the same live life: no death"
            );
            assert_eq!(
                d.claim("g", "t", 1, 7, "life-2", 2).await.unwrap().deaths,
                0,
                "another partition"
            );
            d.release("g", "t", 1, 7, "life-2", true).await.unwrap();
            assert_eq!(
                d.claim("h", "t", 0, 7, "life-2", 2).await.unwrap().deaths,
                0,
                "another group"
            );
            // Run alone in life-2, which dies of its own fault (its supervisor saw it).
            d.set_alone("g", "t", 0, 7, "life-2", true).await.unwrap();
            d.record_death("life-2", "killed by signal 6 (SIGABRT)", 3)
                .await
                .unwrap();
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-3", 3).await.unwrap(),
                c(4, 2, 1, 1),
                "a death alone, of the process's own fault, counts"
            );
            // Alone again, and killed from outside: counted as alone, not as its fault;
            // its cause recorded later still counts at the next claim.
            d.set_alone("g", "t", 0, 7, "life-3", true).await.unwrap();
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-4", 4).await.unwrap(),
                c(5, 3, 1, 2)
            );
            d.record_death("life-3", "exit status 101 (a panic)", 5)
                .await
                .unwrap();
            d.set_alone("g", "t", 0, 7, "life-4", false).await.unwrap();
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-5", 5).await.unwrap(),
                c(6, 4, 2, 2),
                "a death not alone does not count; the late cause does"
            );
            let deaths = d.deaths("g", "t", 0, 7).await.unwrap();
            assert_eq!(deaths.len(), 4);
            assert_eq!(deaths[0].life, "life-1");
            assert_eq!(deaths[0].in_hand, 2, "life-1 held two records");
            assert_eq!(deaths[0].cause, None);
            assert!(deaths[1].alone);
            assert_eq!(deaths[1].in_hand, 1);
            assert_eq!(
                deaths[1].cause.as_deref(),
                Some("killed by signal 6 (SIGABRT)")
            );
            assert!(!deaths[3].alone);

            // A late release by a life that no longer holds it changes nothing.
            d.release("g", "t", 0, 7, "life-4", true).await.unwrap();
            assert_eq!(d.count("g", "t", 0, 7).await.unwrap(), 1, "life-5 holds it");
            d.release("g", "t", 0, 7, "life-5", false).await.unwrap();
            assert_eq!(d.count("g", "t", 0, 7).await.unwrap(), 0, "not in hand");
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-5", 6).await.unwrap().deaths,
                4,
                "an abandoned delivery is no death, and the suspect stays one"
            );
            d.release("g", "t", 0, 7, "life-5", true).await.unwrap();
            assert_eq!(d.count("g", "t", 0, 7).await.unwrap(), 0);
            assert_eq!(
                d.claim("g", "t", 0, 7, "life-5", 7).await.unwrap(),
                c(1, 0, 0, 0),
                "a redelivery after a finish starts over"
            );
            assert!(d.deaths("g", "t", 0, 7).await.unwrap().is_empty());
            db.drop_now().await.unwrap();
        }
    }
}
