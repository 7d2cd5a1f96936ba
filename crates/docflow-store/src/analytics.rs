//! The analytics rollup's tables: per-tenant counts per UTC hour, kept exact under
//! at-least-once delivery, replays and rescaling.
//!
//! [`Analytics::apply`] counts a batch of consumed records in **one transaction** that also
//! records which records it counted:
//! * a record below the live group's position (`analytics_positions`, the group named at
//!   [`Analytics::new`]) is already counted and skipped — whoever delivers it again (a
//!   redelivery, an offset reset, a replay under another group);
//! * a record at or above it is counted only if inserting its (topic, partition, offset) into
//!   `analytics_applied` succeeds; rows below the position are pruned when it is saved;
//! * a `doc.processed` counts once per (tenant, document, stage, version, outcome), so a
//!   stage announcing a result twice (its outbox is at least once) counts once.
//!
//! The transaction starts by touching the live group's position row of each partition in the
//! batch (an upsert that changes nothing), in a fixed order: on PostgreSQL that locks the row,
//! so a position save and its pruning can never interleave with a count of the same partition;
//! SQLite serialises writers anyway. Counts are upserted in a fixed order too, so concurrent
//! replicas cannot deadlock on them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use sqlx::{AnyPool, Row};

use crate::StoreError;

/// The live consumer group of the rollup, by default.
pub const LIVE_GROUP: &str = "analytics-rollup";

/// One hour, milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// One day, milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// Rows per multi-row insert of counted offsets (3 parameters each; SQLite allows 32,766).
const APPLIED_CHUNK: usize = 500;

/// What one record tells the rollup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// A `doc.uploaded`: one document of `bytes` accepted at `at_ms`.
    Uploaded {
        /// Tenant.
        tenant: String,
        /// Sniffed MIME type.
        content_type: String,
        /// Size.
        bytes: i64,
        /// Acceptance time, Unix ms.
        at_ms: i64,
    },
    /// A `doc.processed`: a stage finished with a document.
    Processed {
        /// Tenant.
        tenant: String,
        /// Document id.
        document_id: String,
        /// Stage name.
        stage: String,
        /// Stage version.
        stage_version: i32,
        /// `OK`, `FAILED` or `DEAD_LETTERED`.
        outcome: String,
        /// Finish time, Unix ms.
        at_ms: i64,
    },
    /// A record the rollup could not count (dead-lettered by its consumer).
    DeadLettered {
        /// Tenant, when the record was readable that far.
        tenant: Option<String>,
        /// The dead-letter error class.
        error_class: String,
        /// The record's time, Unix ms.
        at_ms: i64,
    },
}

/// A consumed record and its fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// What it says.
    pub fact: Fact,
}

/// What [`Analytics::apply`] did with one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Counted now.
    Counted,
    /// Counted before (the record, or the stage result it announces): nothing changed.
    Duplicate,
}

/// Hour or day buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// UTC hours.
    Hour,
    /// UTC days.
    Day,
}

impl Granularity {
    /// Length of a bucket, ms.
    pub fn millis(self) -> i64 {
        match self {
            Granularity::Hour => HOUR_MS,
            Granularity::Day => DAY_MS,
        }
    }

    /// Start of the bucket holding `t_ms`.
    pub fn floor(self, t_ms: i64) -> i64 {
        t_ms - t_ms.rem_euclid(self.millis())
    }

    /// `t_ms` rounded up to a bucket boundary.
    pub fn ceil(self, t_ms: i64) -> i64 {
        let f = self.floor(t_ms);
        if f == t_ms {
            f
        } else {
            f.saturating_add(self.millis())
        }
    }
}

impl std::str::FromStr for Granularity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hour" => Ok(Granularity::Hour),
            "day" => Ok(Granularity::Day),
            other => Err(format!("granularity {other:?}: use hour or day")),
        }
    }
}

/// Documents and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Uploads.
    pub documents: i64,
    /// Their bytes.
    pub bytes: i64,
}

/// One hour or day of one tenant (or of all).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Bucket {
    /// Start, Unix ms (UTC).
    pub start_ms: i64,
    /// Uploads in it.
    pub documents: i64,
    /// Their bytes.
    pub bytes: i64,
    /// Uploads by content type.
    pub by_content_type: BTreeMap<String, Counts>,
    /// Stage → outcome → documents.
    pub stages: BTreeMap<String, BTreeMap<String, i64>>,
    /// Records the rollup itself dead-lettered (it could not read or count them): not the
    /// documents a stage dead-lettered, which are the `DEAD_LETTERED` outcome in
    /// [`Bucket::stages`].
    pub rollup_dead_lettered: i64,
}

/// The sum of `buckets` (its `start_ms`: the first bucket's, 0 when there is none).
pub fn totals(buckets: &[Bucket]) -> Bucket {
    let mut t = Bucket {
        start_ms: buckets.first().map_or(0, |b| b.start_ms),
        ..Bucket::default()
    };
    for b in buckets {
        t.documents += b.documents;
        t.bytes += b.bytes;
        t.rollup_dead_lettered += b.rollup_dead_lettered;
        for (ct, c) in &b.by_content_type {
            let e = t.by_content_type.entry(ct.clone()).or_default();
            e.documents += c.documents;
            e.bytes += c.bytes;
        }
        for (stage, outcomes) in &b.stages {
            let e = t.stages.entry(stage.clone()).or_default();
            for (o, n) in outcomes {
                *e.entry(o.clone()).or_default() += n;
            }
        }
    }
    t
}

/// The rollup over the docflow database.
#[derive(Debug, Clone)]
pub struct Analytics {
    pool: AnyPool,
    live_group: String,
}

type Tp = (String, i32);

impl Analytics {
    /// Wraps a pool on a migrated docflow database. `live_group` is the consumer group whose
    /// position says what is counted (`analytics-rollup`); a replay under another group
    /// counts only what it has not.
    pub fn new(pool: AnyPool, live_group: impl Into<String>) -> Self {
        Analytics {
            pool,
            live_group: live_group.into(),
        }
    }

    /// The live group.
    pub fn live_group(&self) -> &str {
        &self.live_group
    }

    /// Counts `batch` in one transaction; the outcome of each delivery, in order.
    pub async fn apply(&self, batch: &[Delivery]) -> Result<Vec<Applied>, StoreError> {
        let mut outcomes = vec![Applied::Duplicate; batch.len()];
        if batch.is_empty() {
            return Ok(outcomes);
        }
        let mut tx = self.pool.begin().await?;

        // The live group's position of each partition, its row locked, in a fixed order.
        let tps: BTreeSet<(&str, i32)> = batch
            .iter()
            .map(|d| (d.topic.as_str(), d.partition))
            .collect();
        let mut floor: HashMap<(&str, i32), i64> = HashMap::new();
        for (topic, part) in &tps {
            let next: i64 = sqlx::query_scalar(
                "INSERT INTO analytics_positions (consumer_group, topic, part, next_offset) \
                 VALUES ($1, $2, $3, 0) ON CONFLICT (consumer_group, topic, part) \
                 DO UPDATE SET next_offset = analytics_positions.next_offset RETURNING next_offset",
            )
            .bind(&self.live_group)
            .bind(*topic)
            .bind(i64::from(*part))
            .fetch_one(&mut *tx)
            .await?;
            floor.insert((topic, *part), next);
        }

        // Records at or above it, each once.
        let mut seen = HashSet::new();
        let candidates: Vec<usize> = (0..batch.len())
            .filter(|&i| {
                let d = &batch[i];
                let at_or_above = floor
                    .get(&(d.topic.as_str(), d.partition))
                    .is_none_or(|f| d.offset >= *f);
                at_or_above && seen.insert((d.topic.as_str(), d.partition, d.offset))
            })
            .collect();
        let mut new: HashSet<(String, i64, i64)> = HashSet::new();
        for chunk in candidates.chunks(APPLIED_CHUNK) {
            let mut sql = String::from("INSERT INTO analytics_applied (topic, part, off) VALUES ");
            for n in 0..chunk.len() {
                let b = 3 * n;
                let sep = if n == 0 { "" } else { ", " };
                let _ = write!(sql, "{sep}(${}, ${}, ${})", b + 1, b + 2, b + 3);
            }
            sql.push_str(" ON CONFLICT (topic, part, off) DO NOTHING RETURNING topic, part, off");
            let mut q = sqlx::query(&sql);
            for &i in chunk {
                let d = &batch[i];
                q = q
                    .bind(d.topic.as_str())
                    .bind(i64::from(d.partition))
                    .bind(d.offset);
            }
            for row in q.fetch_all(&mut *tx).await? {
                new.insert((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
            }
        }

        // What the new records say.
        let mut uploads: BTreeMap<(&str, i64, &str), Counts> = BTreeMap::new();
        let mut stages: BTreeMap<(&str, i64, &str, &str), i64> = BTreeMap::new();
        let mut dead: BTreeMap<(&str, i64, &str, &str), i64> = BTreeMap::new();
        for &i in &candidates {
            let d = &batch[i];
            if !new.contains(&(d.topic.clone(), i64::from(d.partition), d.offset)) {
                continue;
            }
            match &d.fact {
                Fact::Uploaded {
                    tenant,
                    content_type,
                    bytes,
                    at_ms,
                } => {
                    let c = uploads
                        .entry((tenant, Granularity::Hour.floor(*at_ms), content_type))
                        .or_default();
                    c.documents += 1;
                    c.bytes += bytes;
                    outcomes[i] = Applied::Counted;
                }
                Fact::Processed {
                    tenant,
                    document_id,
                    stage,
                    stage_version,
                    outcome,
                    at_ms,
                } => {
                    let first = sqlx::query(
                        "INSERT INTO analytics_stage_results \
                         (tenant_id, document_id, stage, stage_version, outcome) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    )
                    .bind(tenant.as_str())
                    .bind(document_id.as_str())
                    .bind(stage.as_str())
                    .bind(i64::from(*stage_version))
                    .bind(outcome.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                        > 0;
                    if first {
                        *stages
                            .entry((tenant, Granularity::Hour.floor(*at_ms), stage, outcome))
                            .or_default() += 1;
                        outcomes[i] = Applied::Counted;
                    }
                }
                Fact::DeadLettered {
                    tenant,
                    error_class,
                    at_ms,
                } => {
                    *dead
                        .entry((
                            tenant.as_deref().unwrap_or(""),
                            Granularity::Hour.floor(*at_ms),
                            d.topic.as_str(),
                            error_class,
                        ))
                        .or_default() += 1;
                    outcomes[i] = Applied::Counted;
                }
            }
        }

        for ((tenant, hour, content_type), c) in &uploads {
            sqlx::query(
                "INSERT INTO analytics_uploads (tenant_id, hour_ms, content_type, documents, bytes) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, hour_ms, content_type) \
                 DO UPDATE SET documents = analytics_uploads.documents + excluded.documents, \
                 bytes = analytics_uploads.bytes + excluded.bytes",
            )
            .bind(*tenant)
            .bind(*hour)
            .bind(*content_type)
            .bind(c.documents)
            .bind(c.bytes)
            .execute(&mut *tx)
            .await?;
        }
        for ((tenant, hour, stage, outcome), n) in &stages {
            sqlx::query(
                "INSERT INTO analytics_outcomes (tenant_id, hour_ms, stage, outcome, documents) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, hour_ms, stage, outcome) \
                 DO UPDATE SET documents = analytics_outcomes.documents + excluded.documents",
            )
            .bind(*tenant)
            .bind(*hour)
            .bind(*stage)
            .bind(*outcome)
            .bind(*n)
            .execute(&mut *tx)
            .await?;
        }
        for ((tenant, hour, topic, class), n) in &dead {
            sqlx::query(
                "INSERT INTO analytics_dead_letters (tenant_id, hour_ms, topic, error_class, records) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, hour_ms, topic, error_class) \
                 DO UPDATE SET records = analytics_dead_letters.records + excluded.records",
            )
            .bind(*tenant)
            .bind(*hour)
            .bind(*topic)
            .bind(*class)
            .bind(*n)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// The stored positions of `group` among `partitions`.
    pub async fn positions(
        &self,
        group: &str,
        partitions: &[Tp],
    ) -> Result<Vec<(Tp, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, part, next_offset FROM analytics_positions WHERE consumer_group = $1",
        )
        .bind(group)
        .fetch_all(&self.pool)
        .await?;
        let wanted: HashSet<&Tp> = partitions.iter().collect();
        let mut out = Vec::new();
        for row in rows {
            let part: i64 = row.try_get(1)?;
            let tp: Tp = (row.try_get(0)?, i32::try_from(part).unwrap_or(i32::MAX));
            if wanted.contains(&tp) {
                out.push((tp, row.try_get(2)?));
            }
        }
        Ok(out)
    }

    /// Saves `group`'s positions (each only forward). For the live group this also prunes
    /// the counted offsets below them: the position now says it for them.
    pub async fn save_positions(
        &self,
        group: &str,
        positions: &[(Tp, i64)],
    ) -> Result<(), StoreError> {
        let mut sorted = positions.to_vec();
        sorted.sort();
        let mut tx = self.pool.begin().await?;
        for ((topic, part), next) in &sorted {
            sqlx::query(
                "INSERT INTO analytics_positions (consumer_group, topic, part, next_offset) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (consumer_group, topic, part) \
                 DO UPDATE SET next_offset = CASE WHEN excluded.next_offset > analytics_positions.next_offset \
                 THEN excluded.next_offset ELSE analytics_positions.next_offset END",
            )
            .bind(group)
            .bind(topic.as_str())
            .bind(i64::from(*part))
            .bind(*next)
            .execute(&mut *tx)
            .await?;
            if group == self.live_group {
                sqlx::query(
                    "DELETE FROM analytics_applied WHERE topic = $1 AND part = $2 AND off < $3",
                )
                .bind(topic.as_str())
                .bind(i64::from(*part))
                .bind(*next)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The rollup of `tenant` (all tenants when `None`) over the hours in [`from_ms`,
    /// `to_ms`) widened to whole buckets, oldest bucket first; buckets with nothing are left
    /// out.
    pub async fn rollup(
        &self,
        tenant: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        granularity: Granularity,
    ) -> Result<Vec<Bucket>, StoreError> {
        let from = granularity.floor(from_ms);
        let to = granularity.ceil(to_ms);
        let (filter, first) = match tenant {
            Some(t) => ("tenant_id = $1", t),
            None => ("$1 = $1", ""),
        };
        let mut buckets: BTreeMap<i64, Bucket> = BTreeMap::new();
        fn at(
            buckets: &mut BTreeMap<i64, Bucket>,
            granularity: Granularity,
            hour: i64,
        ) -> &mut Bucket {
            let start = granularity.floor(hour);
            buckets.entry(start).or_insert_with(|| Bucket {
                start_ms: start,
                ..Bucket::default()
            })
        }
        let uploads = sqlx::query(&format!(
            "SELECT hour_ms, content_type, CAST(SUM(documents) AS BIGINT), CAST(SUM(bytes) AS BIGINT) \
             FROM analytics_uploads WHERE {filter} AND hour_ms >= $2 AND hour_ms < $3 \
             GROUP BY hour_ms, content_type"
        ))
        .bind(first)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        for row in uploads {
            let (documents, bytes): (i64, i64) = (row.try_get(2)?, row.try_get(3)?);
            let b = at(&mut buckets, granularity, row.try_get(0)?);
            b.documents += documents;
            b.bytes += bytes;
            let c = b.by_content_type.entry(row.try_get(1)?).or_default();
            c.documents += documents;
            c.bytes += bytes;
        }
        let outcomes = sqlx::query(&format!(
            "SELECT hour_ms, stage, outcome, CAST(SUM(documents) AS BIGINT) \
             FROM analytics_outcomes WHERE {filter} AND hour_ms >= $2 AND hour_ms < $3 \
             GROUP BY hour_ms, stage, outcome"
        ))
        .bind(first)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        for row in outcomes {
            let n: i64 = row.try_get(3)?;
            *at(&mut buckets, granularity, row.try_get(0)?)
                .stages
                .entry(row.try_get(1)?)
                .or_default()
                .entry(row.try_get(2)?)
                .or_default() += n;
        }
        let dead = sqlx::query(&format!(
            "SELECT hour_ms, CAST(SUM(records) AS BIGINT) \
             FROM analytics_dead_letters WHERE {filter} AND hour_ms >= $2 AND hour_ms < $3 \
             GROUP BY hour_ms"
        ))
        .bind(first)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        for row in dead {
            let n: i64 = row.try_get(1)?;
            at(&mut buckets, granularity, row.try_get(0)?).rollup_dead_lettered += n;
        }
        Ok(buckets.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uploaded(offset: i64, tenant: &str, at_ms: i64) -> Delivery {
        Delivery {
            topic: "up".into(),
            partition: 0,
            offset,
            fact: Fact::Uploaded {
                tenant: tenant.into(),
                content_type: "application/pdf".into(),
                bytes: 10,
                at_ms,
            },
        }
    }

    /// The rollup on every backend this machine can test (SQLite; PostgreSQL when
    /// DATABASE_URL is set), each in its own scratch database.
    async fn backends() -> Vec<(crate::scratch::ScratchDb, Analytics)> {
        let mut out = Vec::new();
        for db in crate::scratch::ScratchDb::all().await.unwrap() {
            let pool = crate::open(&db.url, 2).await.unwrap();
            out.push((db, Analytics::new(pool, "live")));
        }
        out
    }

    #[test]
    fn buckets_are_utc_hours_and_days() {
        let t = 1_764_843_123_456; // 2025-12-04T10:12:03.456Z
        assert_eq!(Granularity::Hour.floor(t) % HOUR_MS, 0);
        assert!(Granularity::Hour.floor(t) <= t && t < Granularity::Hour.floor(t) + HOUR_MS);
        assert_eq!(Granularity::Day.floor(t) % DAY_MS, 0);
        assert_eq!(
            Granularity::Day.ceil(Granularity::Day.floor(t)),
            Granularity::Day.floor(t)
        );
        assert_eq!(Granularity::Day.ceil(t), Granularity::Day.floor(t) + DAY_MS);
        assert_eq!(Granularity::Hour.floor(-1), -HOUR_MS);
        assert!("week".parse::<Granularity>().is_err());
    }

    #[tokio::test]
    async fn a_record_counts_once_however_often_it_comes() {
        for (db, a) in backends().await {
            let batch = vec![
                uploaded(0, "t", 0),
                uploaded(1, "t", 0),
                uploaded(1, "t", 0),
            ];
            assert_eq!(
                a.apply(&batch).await.unwrap(),
                vec![Applied::Counted, Applied::Counted, Applied::Duplicate]
            );
            assert_eq!(
                a.apply(&batch[..2]).await.unwrap(),
                vec![Applied::Duplicate, Applied::Duplicate]
            );
            let r = a
                .rollup(Some("t"), 0, HOUR_MS, Granularity::Hour)
                .await
                .unwrap();
            assert_eq!(r.len(), 1);
            assert_eq!((r[0].documents, r[0].bytes), (2, 20));
            // Another tenant sees nothing of it.
            assert!(
                a.rollup(Some("u"), 0, HOUR_MS, Granularity::Hour)
                    .await
                    .unwrap()
                    .is_empty()
            );
            a.pool.close().await;
            db.drop_now().await.unwrap();
        }
    }

    #[tokio::test]
    async fn below_the_live_position_nothing_counts_even_after_pruning() {
        for (db, a) in backends().await {
            a.apply(&[uploaded(0, "t", 0), uploaded(1, "t", 0)])
                .await
                .unwrap();
            // The live group passed both: their offsets are pruned, the position covers them.
            a.save_positions("live", &[(("up".into(), 0), 2)])
                .await
                .unwrap();
            let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM analytics_applied")
                .fetch_one(&a.pool)
                .await
                .unwrap();
            assert_eq!(left, 0);
            // A replay (any group) delivers them again, then one new record.
            assert_eq!(
                a.apply(&[
                    uploaded(0, "t", 0),
                    uploaded(1, "t", 0),
                    uploaded(2, "t", 0)
                ])
                .await
                .unwrap(),
                vec![Applied::Duplicate, Applied::Duplicate, Applied::Counted]
            );
            // A replay group's save does not move the live position or prune.
            a.save_positions("replay", &[(("up".into(), 0), 3)])
                .await
                .unwrap();
            assert_eq!(
                a.positions("live", &[("up".into(), 0)]).await.unwrap(),
                vec![(("up".into(), 0), 2)]
            );
            assert_eq!(
                a.apply(&[uploaded(2, "t", 0)]).await.unwrap(),
                vec![Applied::Duplicate]
            );
            // Positions only move forward.
            a.save_positions("live", &[(("up".into(), 0), 1)])
                .await
                .unwrap();
            assert_eq!(
                a.positions("live", &[("up".into(), 0)]).await.unwrap(),
                vec![(("up".into(), 0), 2)]
            );
            let r = a.rollup(None, 0, DAY_MS, Granularity::Day).await.unwrap();
            assert_eq!(r[0].documents, 3);
            a.pool.close().await;
            db.drop_now().await.unwrap();
        }
    }

    /// Four "replicas" count the same 400 records at once, in chunks, while the live
    /// position moves up behind what is counted and prunes: every record counts once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_counting_and_position_saves_count_each_record_once() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicI64, Ordering};
        for (db, a) in backends().await {
            let records: Arc<Vec<Delivery>> =
                Arc::new((0..400).map(|o| uploaded(o, "t", 0)).collect());
            // Offsets below this are counted by someone (a chunk committed).
            let counted_below = Arc::new(AtomicI64::new(0));
            let mut tasks = Vec::new();
            for r in 0..4usize {
                let (a, records, counted_below) =
                    (a.clone(), records.clone(), counted_below.clone());
                tasks.push(tokio::spawn(async move {
                    for chunk in records.chunks(10 + r * 7) {
                        loop {
                            match a.apply(chunk).await {
                                Ok(_) => break,
                                // A conflict rolled the transaction back: the runtime retries.
                                Err(e) if e.is_unavailable() => continue,
                                Err(e) => panic!("{e}"),
                            }
                        }
                        let end = chunk.last().map_or(0, |d| d.offset + 1);
                        counted_below.fetch_max(end, Ordering::SeqCst);
                    }
                }));
            }
            let saver = {
                let (a, counted_below) = (a.clone(), counted_below.clone());
                tokio::spawn(async move {
                    loop {
                        let w = counted_below.load(Ordering::SeqCst);
                        a.save_positions("live", &[(("up".into(), 0), w)])
                            .await
                            .unwrap();
                        if w >= 400 {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                })
            };
            for t in tasks {
                t.await.unwrap();
            }
            saver.await.unwrap();
            let r = a.rollup(None, 0, HOUR_MS, Granularity::Hour).await.unwrap();
            assert_eq!(r[0].documents, 400, "{:?}", db.backend());
            a.pool.close().await;
            db.drop_now().await.unwrap();
        }
    }

    #[tokio::test]
    async fn stage_results_count_once_and_dead_letters_are_counted_apart() {
        for (db, a) in backends().await {
            let processed = |offset, outcome: &str| Delivery {
                topic: "done".into(),
                partition: 0,
                offset,
                fact: Fact::Processed {
                    tenant: "t".into(),
                    document_id: "d".into(),
                    stage: "thumbnails".into(),
                    stage_version: 1,
                    outcome: outcome.into(),
                    at_ms: HOUR_MS + 5,
                },
            };
            let out = a
                .apply(&[
                    processed(0, "OK"),
                    processed(1, "OK"),
                    processed(2, "FAILED"),
                    processed(3, "DEAD_LETTERED"),
                    Delivery {
                        topic: "up".into(),
                        partition: 0,
                        offset: 7,
                        fact: Fact::DeadLettered {
                            tenant: None,
                            error_class: "avro".into(),
                            at_ms: HOUR_MS,
                        },
                    },
                ])
                .await
                .unwrap();
            assert_eq!(
                out,
                vec![
                    Applied::Counted,
                    Applied::Duplicate,
                    Applied::Counted,
                    Applied::Counted,
                    Applied::Counted
                ]
            );
            let t = a
                .rollup(Some("t"), 0, DAY_MS, Granularity::Hour)
                .await
                .unwrap();
            assert_eq!(t.len(), 1);
            assert_eq!(t[0].start_ms, HOUR_MS);
            assert_eq!(t[0].stages["thumbnails"]["OK"], 1);
            assert_eq!(t[0].stages["thumbnails"]["FAILED"], 1);
            // A document the stage dead-lettered is a stage outcome; the rollup's own
            // dead letters are apart, and an unreadable record is nobody's.
            assert_eq!(t[0].stages["thumbnails"]["DEAD_LETTERED"], 1);
            assert_eq!(t[0].rollup_dead_lettered, 0);
            let all = a.rollup(None, 0, DAY_MS, Granularity::Day).await.unwrap();
            assert_eq!(all[0].rollup_dead_lettered, 1);
            assert_eq!(all[0].documents, 0);
            let sum = totals(&a.rollup(None, 0, DAY_MS, Granularity::Hour).await.unwrap());
            assert_eq!(
                (
                    sum.rollup_dead_lettered,
                    sum.stages["thumbnails"]["OK"],
                    sum.stages["thumbnails"]["DEAD_LETTERED"]
                ),
                (1, 1, 1)
            );
            a.pool.close().await;
            db.drop_now().await.unwrap();
        }
    }
}
