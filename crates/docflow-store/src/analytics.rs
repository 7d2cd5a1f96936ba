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
//! replicas cannot deadlock on them. A batch costs a fixed number of statements, however
//! many records and count rows it holds: one multi-row statement per table.

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

/// Rows per multi-row statement (at most 5 parameters each; SQLite allows 32,766).
const ROWS_PER_STATEMENT: usize = 500;

/// A stage result's key: tenant, document, stage, version, outcome.
type StageResult<'a> = (&'a String, &'a String, &'a String, i64, &'a String);

/// Adds each row's count into `table`'s `count` column, keyed by (tenant_id, hour_ms,
/// `keys`), in the rows' order (sorted: concurrent replicas cannot deadlock on them), one
/// multi-row upsert per [`ROWS_PER_STATEMENT`].
async fn add_counts(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &str,
    keys: [&str; 2],
    count: &str,
    rows: BTreeMap<(&str, i64, &str, &str), i64>,
) -> Result<(), StoreError> {
    let rows: Vec<_> = rows.into_iter().collect();
    let [a, b] = keys;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = values_sql(
            &format!("INSERT INTO {table} (tenant_id, hour_ms, {a}, {b}, {count})"),
            5,
            chunk.len(),
            &format!(
                " ON CONFLICT (tenant_id, hour_ms, {a}, {b}) \
                 DO UPDATE SET {count} = {table}.{count} + excluded.{count}"
            ),
        );
        let mut q = sqlx::query(&sql);
        for ((tenant, hour, x, y), n) in chunk {
            q = q.bind(*tenant).bind(*hour).bind(*x).bind(*y).bind(*n);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// `head VALUES ($1, …), (…) tail`: `rows` rows of `cols` parameters.
fn values_sql(head: &str, cols: usize, rows: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * cols * 6 + 8);
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for r in 0..rows {
        sql.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..cols {
            let _ = write!(
                sql,
                "{}${}",
                if c == 0 { "" } else { ", " },
                r * cols + c + 1
            );
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

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
    ///
    /// A fixed number of statements whatever the batch holds: one touch of the partitions'
    /// positions, then per table one multi-row insert (in chunks of [`ROWS_PER_STATEMENT`]):
    /// the counted offsets, the stage results, and the three count tables' upserts.
    pub async fn apply(&self, batch: &[Delivery]) -> Result<Vec<Applied>, StoreError> {
        let mut outcomes = vec![Applied::Duplicate; batch.len()];
        if batch.is_empty() {
            return Ok(outcomes);
        }
        let mut tx = self.pool.begin().await?;

        // The live group's position of each partition, its row locked, in a fixed order
        // (a multi-row insert takes its rows in the order written).
        let tps: Vec<(&str, i32)> = batch
            .iter()
            .map(|d| (d.topic.as_str(), d.partition))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut floor: HashMap<(&str, i32), i64> = HashMap::new();
        for chunk in tps.chunks(ROWS_PER_STATEMENT) {
            let sql = values_sql(
                "INSERT INTO analytics_positions (consumer_group, topic, part, next_offset)",
                4,
                chunk.len(),
                " ON CONFLICT (consumer_group, topic, part) \
                 DO UPDATE SET next_offset = analytics_positions.next_offset \
                 RETURNING topic, part, next_offset",
            );
            let mut q = sqlx::query(&sql);
            for (topic, part) in chunk {
                q = q
                    .bind(self.live_group.as_str())
                    .bind(*topic)
                    .bind(i64::from(*part))
                    .bind(0_i64);
            }
            for row in q.fetch_all(&mut *tx).await? {
                let (topic, part): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                if let Some(&tp) = chunk
                    .iter()
                    .find(|(t, p)| *t == topic && i64::from(*p) == part)
                {
                    floor.insert(tp, row.try_get(2)?);
                }
            }
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
        // Which candidate each returned (topic, partition, offset) is.
        let index: HashMap<(&str, i64, i64), usize> = candidates
            .iter()
            .map(|&i| {
                let d = &batch[i];
                ((d.topic.as_str(), i64::from(d.partition), d.offset), i)
            })
            .collect();
        let mut new: HashSet<usize> = HashSet::new();
        for chunk in candidates.chunks(ROWS_PER_STATEMENT) {
            let sql = values_sql(
                "INSERT INTO analytics_applied (topic, part, off)",
                3,
                chunk.len(),
                " ON CONFLICT (topic, part, off) DO NOTHING RETURNING topic, part, off",
            );
            let mut q = sqlx::query(&sql);
            for &i in chunk {
                let d = &batch[i];
                q = q
                    .bind(d.topic.as_str())
                    .bind(i64::from(d.partition))
                    .bind(d.offset);
            }
            for row in q.fetch_all(&mut *tx).await? {
                let topic: String = row.try_get(0)?;
                if let Some(&i) = index.get(&(topic.as_str(), row.try_get(1)?, row.try_get(2)?)) {
                    new.insert(i);
                }
            }
        }
        let fresh: Vec<usize> = candidates.into_iter().filter(|i| new.contains(i)).collect();

        // A stage result counts once: the new records' results not recorded before, each
        // counted at its first record in the batch.
        let mut first_of: BTreeMap<StageResult<'_>, usize> = BTreeMap::new();
        for &i in &fresh {
            if let Fact::Processed {
                tenant,
                document_id,
                stage,
                stage_version,
                outcome,
                ..
            } = &batch[i].fact
            {
                first_of
                    .entry((
                        tenant,
                        document_id,
                        stage,
                        i64::from(*stage_version),
                        outcome,
                    ))
                    .or_insert(i);
            }
        }
        let results: Vec<(&StageResult<'_>, &usize)> = first_of.iter().collect();
        let mut recorded: HashSet<(String, String, String, i64, String)> = HashSet::new();
        for chunk in results.chunks(ROWS_PER_STATEMENT) {
            let sql = values_sql(
                "INSERT INTO analytics_stage_results \
                 (tenant_id, document_id, stage, stage_version, outcome)",
                5,
                chunk.len(),
                " ON CONFLICT DO NOTHING \
                 RETURNING tenant_id, document_id, stage, stage_version, outcome",
            );
            let mut q = sqlx::query(&sql);
            for ((tenant, document_id, stage, version, outcome), _) in chunk {
                q = q
                    .bind(tenant.as_str())
                    .bind(document_id.as_str())
                    .bind(stage.as_str())
                    .bind(*version)
                    .bind(outcome.as_str());
            }
            for row in q.fetch_all(&mut *tx).await? {
                recorded.insert((
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                ));
            }
        }
        let first_new: HashSet<usize> = first_of
            .iter()
            .filter(|((t, d, s, v, o), _)| {
                recorded.contains(&((*t).clone(), (*d).clone(), (*s).clone(), *v, (*o).clone()))
            })
            .map(|(_, i)| *i)
            .collect();

        // What the new records say.
        let mut uploads: BTreeMap<(&str, i64, &str), Counts> = BTreeMap::new();
        let mut stages: BTreeMap<(&str, i64, &str, &str), i64> = BTreeMap::new();
        let mut dead: BTreeMap<(&str, i64, &str, &str), i64> = BTreeMap::new();
        for &i in &fresh {
            let d = &batch[i];
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
                    stage,
                    outcome,
                    at_ms,
                    ..
                } => {
                    if first_new.contains(&i) {
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

        // The counts, one upsert per table (keys in a fixed order, so concurrent replicas
        // cannot deadlock on them).
        let uploads: Vec<_> = uploads.into_iter().collect();
        for chunk in uploads.chunks(ROWS_PER_STATEMENT) {
            let sql = values_sql(
                "INSERT INTO analytics_uploads (tenant_id, hour_ms, content_type, documents, bytes)",
                5,
                chunk.len(),
                " ON CONFLICT (tenant_id, hour_ms, content_type) \
                 DO UPDATE SET documents = analytics_uploads.documents + excluded.documents, \
                 bytes = analytics_uploads.bytes + excluded.bytes",
            );
            let mut q = sqlx::query(&sql);
            for ((tenant, hour, content_type), c) in chunk {
                q = q
                    .bind(*tenant)
                    .bind(*hour)
                    .bind(*content_type)
                    .bind(c.documents)
                    .bind(c.bytes);
            }
            q.execute(&mut *tx).await?;
        }
        add_counts(
            &mut tx,
            "analytics_outcomes",
            ["stage", "outcome"],
            "documents",
            stages,
        )
        .await?;
        add_counts(
            &mut tx,
            "analytics_dead_letters",
            ["topic", "error_class"],
            "records",
            dead,
        )
        .await?;
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

    /// A mixed batch (tenants, hours, content types, partitions, stage results announced
    /// twice within it, dead letters, deliveries repeated in it) counted in one call ends
    /// with the same rollup, and the same outcome per delivery, as each delivery counted
    /// alone in order.
    #[tokio::test]
    async fn one_batch_counts_what_its_records_count_one_by_one() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut batch = Vec::new();
        for offset in 0..600_i64 {
            let partition = i32::try_from(next(3)).unwrap();
            let tenant = ["a", "b", "c"][usize::try_from(next(3)).unwrap()].to_owned();
            let at_ms = i64::try_from(next(5)).unwrap() * HOUR_MS + 17;
            let fact = match next(10) {
                0..=5 => Fact::Uploaded {
                    tenant,
                    content_type: ["application/pdf", "image/png"]
                        [usize::try_from(next(2)).unwrap()]
                    .into(),
                    bytes: i64::try_from(next(1000)).unwrap(),
                    at_ms,
                },
                6..=8 => Fact::Processed {
                    tenant,
                    document_id: format!("d{}", next(40)),
                    stage: ["thumbnails", "ocr-embeddings"][usize::try_from(next(2)).unwrap()]
                        .into(),
                    stage_version: 1,
                    outcome: ["OK", "FAILED"][usize::try_from(next(2)).unwrap()].into(),
                    at_ms,
                },
                _ => Fact::DeadLettered {
                    tenant: (next(2) == 0).then_some(tenant),
                    error_class: "avro".into(),
                    at_ms,
                },
            };
            let d = Delivery {
                topic: if matches!(fact, Fact::Processed { .. }) {
                    "done".into()
                } else {
                    "up".into()
                },
                partition,
                offset,
                fact,
            };
            // Now and then the same delivery twice.
            if next(20) == 0 {
                batch.push(d.clone());
            }
            batch.push(d);
        }
        for (db, a) in backends().await {
            let (db1, a1) = {
                let db1 = crate::scratch::ScratchDb::all()
                    .await
                    .unwrap()
                    .into_iter()
                    .find(|d| d.backend() == db.backend())
                    .unwrap();
                let pool = crate::open(&db1.url, 2).await.unwrap();
                (db1, Analytics::new(pool, "live"))
            };
            let together = a.apply(&batch).await.unwrap();
            let mut alone = Vec::new();
            for d in &batch {
                alone.extend(a1.apply(std::slice::from_ref(d)).await.unwrap());
            }
            assert_eq!(together, alone, "{:?}", db.backend());
            assert!(together.contains(&Applied::Duplicate));
            let day = 5 * HOUR_MS;
            for tenant in [None, Some("a"), Some("b")] {
                assert_eq!(
                    a.rollup(tenant, 0, day, Granularity::Hour).await.unwrap(),
                    a1.rollup(tenant, 0, day, Granularity::Hour).await.unwrap(),
                    "{:?} {tenant:?}",
                    db.backend()
                );
            }
            for (d, x) in [(db, a), (db1, a1)] {
                x.pool.close().await;
                d.drop_now().await.unwrap();
            }
        }
    }

    #[test]
    fn values_sql_numbers_every_parameter() {
        assert_eq!(
            values_sql("INSERT INTO t (a, b)", 2, 3, " ON CONFLICT DO NOTHING"),
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6) ON CONFLICT DO NOTHING"
        );
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
