//! The index behind `GET /v1/search`: every chunk vector of a tenant in memory, scored
//! exactly (recall 1.0), refreshed from the result store before each search.
//!
//! Why exact and in memory: the store's streaming scan reads every chunk blob of the tenant
//! per query (linear in the database's I/O; measured in bench/results/ocr-embed.md), while a
//! dot product over 100,000 × 384 floats in memory takes a few milliseconds on one core —
//! under the 50 ms p99 goal at that size with nothing approximate to tune. Past a tenant's
//! `max_chunks` the index steps aside and the store's exact scan answers (slower, never an
//! out-of-memory); an approximate index (pgvector HNSW) is the step after that.
//!
//! Freshness: a document's chunks are written before its `done` run, so a `done` row means
//! its chunks are there. The first search of a tenant loads all its chunks; later searches
//! read the `done` runs finished since the last look (minus a margin for runs committed a
//! little after their finish time) and load only documents that are new or have a newer
//! stage version.

use std::collections::HashMap;
use std::sync::Arc;

use futures::TryStreamExt;
use sqlx::{AnyPool, Row};

use crate::text::{Hit, TextStore, vector_from_bytes};
use crate::{StageStatus, StoreError};

/// Runs finished this long before the newest one seen are read again at the next refresh
/// (a run's finish time is taken just before its row is committed).
const MARGIN_MS: i64 = 60_000;

/// One document's chunks at its newest version.
#[derive(Debug)]
struct Doc {
    document_id: String,
    version: i64,
    chunks: Vec<i64>,
    pages: Vec<u32>,
    /// `chunks.len() × dims` floats.
    vectors: Vec<f32>,
}

#[derive(Debug, Default)]
struct Tenant {
    loaded: bool,
    /// Over `max_chunks`: searched by the store's scan instead.
    oversize: bool,
    by_id: HashMap<String, usize>,
    docs: Vec<Doc>,
    chunks: usize,
    watermark_ms: i64,
}

impl Tenant {
    fn put(&mut self, doc: Doc) {
        self.chunks += doc.chunks.len();
        match self.by_id.get(&doc.document_id) {
            Some(&i) => {
                self.chunks -= self.docs[i].chunks.len();
                self.docs[i] = doc;
            }
            None => {
                self.by_id.insert(doc.document_id.clone(), self.docs.len());
                self.docs.push(doc);
            }
        }
    }

    fn version_of(&self, document_id: &str) -> Option<i64> {
        self.by_id.get(document_id).map(|&i| self.docs[i].version)
    }
}

/// The search index of one stage's chunks, per tenant; cheap to clone.
#[derive(Debug, Clone)]
pub struct SearchIndex {
    pool: AnyPool,
    stage: String,
    max_chunks: usize,
    store: TextStore,
    tenants: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Tenant>>>>>,
}

impl SearchIndex {
    /// An empty index of `stage`'s chunks over `pool`; a tenant with more than `max_chunks`
    /// chunks is searched by the store's scan instead.
    pub fn new(pool: AnyPool, stage: &str, max_chunks: usize) -> Self {
        SearchIndex {
            store: TextStore::new(pool.clone()),
            pool,
            stage: stage.to_owned(),
            max_chunks,
            tenants: Arc::default(),
        }
    }

    fn tenant(&self, tenant_id: &str) -> Arc<tokio::sync::Mutex<Tenant>> {
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tenants.entry(tenant_id.to_owned()).or_default().clone()
    }

    /// Chunks of `tenant_id` held in memory (after its first search).
    pub async fn chunks_in_memory(&self, tenant_id: &str) -> usize {
        let t = self.tenant(tenant_id);
        let t = t.lock().await;
        if t.oversize { 0 } else { t.chunks }
    }

    /// The `k` chunks of `tenant_id` closest to `query` (a unit vector), best first.
    pub async fn search(
        &self,
        tenant_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let tenant = self.tenant(tenant_id);
        let mut t = tenant.lock().await;
        self.refresh(tenant_id, &mut t).await?;
        if t.oversize {
            drop(t);
            return self.store.search(tenant_id, &self.stage, query, k).await;
        }
        // (score, doc, chunk), best k kept sorted.
        let mut best: Vec<(f32, usize, usize)> = Vec::with_capacity(k + 1);
        let dims = query.len();
        for (d, doc) in t.docs.iter().enumerate() {
            // Vectors of another width (another model's) are not comparable: skipped.
            if dims == 0 || doc.vectors.len() != doc.chunks.len() * dims {
                continue;
            }
            for (c, v) in doc.vectors.chunks_exact(dims).enumerate() {
                let score: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
                if best.len() == k && best.last().is_some_and(|w| w.0 >= score) {
                    continue;
                }
                let at = best.partition_point(|h| h.0 >= score);
                best.insert(at, (score, d, c));
                best.truncate(k);
            }
        }
        let mut hits = Vec::with_capacity(best.len());
        for (score, d, c) in best {
            let doc = &t.docs[d];
            let body: Option<String> = sqlx::query_scalar(
                "SELECT body FROM document_chunks WHERE tenant_id = $1 AND document_id = $2 \
                 AND stage = $3 AND stage_version = $4 AND chunk = $5",
            )
            .bind(tenant_id)
            .bind(&doc.document_id)
            .bind(&self.stage)
            .bind(doc.version)
            .bind(doc.chunks[c])
            .fetch_optional(&self.pool)
            .await?;
            hits.push(Hit {
                document_id: doc.document_id.clone(),
                page: doc.pages[c],
                score,
                text: body.unwrap_or_default(),
            });
        }
        Ok(hits)
    }

    async fn refresh(&self, tenant_id: &str, t: &mut Tenant) -> Result<(), StoreError> {
        if t.oversize {
            return Ok(());
        }
        // The newest finish time first: whatever finishes after it is read next time.
        let since = if t.loaded {
            t.watermark_ms - MARGIN_MS
        } else {
            i64::MIN
        };
        let runs = sqlx::query(
            "SELECT document_id, stage_version, finished_at_ms FROM stage_runs \
             WHERE tenant_id = $1 AND stage = $2 AND status = $3 AND finished_at_ms >= $4",
        )
        .bind(tenant_id)
        .bind(&self.stage)
        .bind(StageStatus::Done.as_str())
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        let mut newest = t.watermark_ms;
        let mut wanted: Vec<(String, i64)> = Vec::new();
        for r in &runs {
            let id: String = r.try_get("document_id")?;
            let version: i64 = r.try_get("stage_version")?;
            newest = newest.max(r.try_get("finished_at_ms")?);
            if t.version_of(&id).is_none_or(|v| v < version) {
                wanted.push((id, version));
            }
        }
        if !t.loaded {
            self.load_all(tenant_id, t).await?;
            t.loaded = true;
        } else {
            for (id, version) in wanted {
                if t.version_of(&id).is_some_and(|v| v >= version) {
                    continue;
                }
                let doc = self.load_doc(tenant_id, &id, version).await?;
                t.put(doc);
            }
        }
        t.watermark_ms = newest;
        if t.chunks > self.max_chunks {
            tracing::warn!(
                tenant = tenant_id,
                chunks = t.chunks,
                max = self.max_chunks,
                "tenant over the in-memory search index's size: searched by the store's scan"
            );
            *t = Tenant {
                oversize: true,
                ..Tenant::default()
            };
        }
        Ok(())
    }

    /// Every chunk of the tenant, each document at its newest version.
    async fn load_all(&self, tenant_id: &str, t: &mut Tenant) -> Result<(), StoreError> {
        let mut rows = sqlx::query(
            "SELECT document_id, stage_version, chunk, page, vector FROM document_chunks \
             WHERE tenant_id = $1 AND stage = $2 ORDER BY document_id, stage_version, chunk",
        )
        .bind(tenant_id)
        .bind(&self.stage)
        .fetch(&self.pool);
        let mut current: Option<Doc> = None;
        while let Some(row) = rows.try_next().await? {
            let id: String = row.try_get("document_id")?;
            let version: i64 = row.try_get("stage_version")?;
            let same = current
                .as_ref()
                .is_some_and(|d| d.document_id == id && d.version == version);
            if !same {
                if let Some(done) = current.take() {
                    t.put(done); // a later version of the same document replaces it
                }
                if t.chunks > self.max_chunks {
                    break;
                }
                current = Some(Doc {
                    document_id: id,
                    version,
                    chunks: Vec::new(),
                    pages: Vec::new(),
                    vectors: Vec::new(),
                });
            }
            if let Some(d) = current.as_mut() {
                push_chunk(d, &row)?;
            }
        }
        if let Some(done) = current {
            t.put(done);
        }
        Ok(())
    }

    async fn load_doc(&self, tenant_id: &str, id: &str, version: i64) -> Result<Doc, StoreError> {
        let rows = sqlx::query(
            "SELECT chunk, page, vector FROM document_chunks WHERE tenant_id = $1 \
             AND document_id = $2 AND stage = $3 AND stage_version = $4 ORDER BY chunk",
        )
        .bind(tenant_id)
        .bind(id)
        .bind(&self.stage)
        .bind(version)
        .fetch_all(&self.pool)
        .await?;
        let mut doc = Doc {
            document_id: id.to_owned(),
            version,
            chunks: Vec::with_capacity(rows.len()),
            pages: Vec::with_capacity(rows.len()),
            vectors: Vec::new(),
        };
        for row in &rows {
            push_chunk(&mut doc, row)?;
        }
        Ok(doc)
    }
}

fn push_chunk(doc: &mut Doc, row: &sqlx::any::AnyRow) -> Result<(), StoreError> {
    let page: i64 = row.try_get("page")?;
    let blob: Vec<u8> = row.try_get("vector")?;
    doc.chunks.push(row.try_get("chunk")?);
    doc.pages.push(u32::try_from(page).unwrap_or(0));
    doc.vectors.extend(vector_from_bytes(&blob));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{ChunkRow, DocumentText, PageText, TextKey, TextSource};
    use crate::{ResultStore, StageRun};

    fn unit(x: f32, y: f32) -> Vec<f32> {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    }

    async fn put(pool: &AnyPool, tenant: &str, doc: &str, version: i32, v: Vec<f32>, text: &str) {
        let key = TextKey {
            tenant_id: tenant,
            document_id: doc,
            stage: "ocr-embeddings",
            stage_version: version,
        };
        let body = DocumentText {
            pages: vec![PageText {
                page: 1,
                source: TextSource::TextLayer,
                confidence: None,
                text: text.into(),
                layout: None,
            }],
            chunks: vec![ChunkRow {
                page: 1,
                start: 0,
                end: text.len(),
                text: text.into(),
                vector: v,
            }],
        };
        TextStore::new(pool.clone()).put(key, &body).await.unwrap();
        let now = docflow_now_ms();
        let run = StageRun {
            tenant_id: tenant.into(),
            document_id: doc.into(),
            stage: "ocr-embeddings".into(),
            stage_version: version,
            status: StageStatus::Done,
            idempotency_key: None,
            result_ref: None,
            output: None,
            error: None,
            attempts: 1,
            started_at_ms: now,
            finished_at_ms: now,
            event_sent_at_ms: None,
        };
        ResultStore::new(pool.clone()).record(&run).await.unwrap();
    }

    fn docflow_now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
    }

    #[tokio::test]
    async fn the_index_sees_new_documents_and_versions_and_keeps_tenants_apart() {
        for db in crate::scratch::ScratchDb::all().await.unwrap() {
            let pool = crate::open(&db.url, 2).await.unwrap();
            let index = SearchIndex::new(pool.clone(), "ocr-embeddings", 1_000);
            put(&pool, "a", "d1", 1, unit(1.0, 0.0), "east").await;
            put(&pool, "b", "d9", 1, unit(1.0, 0.0), "bob's east").await;
            let hits = index.search("a", &unit(1.0, 0.1), 10).await.unwrap();
            assert_eq!(hits.len(), 1);
            assert_eq!(
                (hits[0].document_id.as_str(), hits[0].text.as_str()),
                ("d1", "east")
            );
            // A new document after the first load; a new version of d1 replaces it.
            put(&pool, "a", "d2", 1, unit(0.0, 1.0), "north").await;
            put(&pool, "a", "d1", 2, unit(-1.0, 0.0), "west").await;
            let hits = index.search("a", &unit(0.0, 1.0), 10).await.unwrap();
            let got: Vec<(&str, &str)> = hits
                .iter()
                .map(|h| (h.document_id.as_str(), h.text.as_str()))
                .collect();
            assert_eq!(got, [("d2", "north"), ("d1", "west")]);
            assert_eq!(index.chunks_in_memory("a").await, 2);
            // The same answers as the store's exact scan.
            let exact = TextStore::new(pool.clone())
                .search("a", "ocr-embeddings", &unit(0.0, 1.0), 10)
                .await
                .unwrap();
            assert_eq!(exact, hits);
            // Over the size limit: the store's scan answers, the same.
            let small = SearchIndex::new(pool.clone(), "ocr-embeddings", 1);
            let hits = small.search("a", &unit(0.0, 1.0), 10).await.unwrap();
            assert_eq!(hits, exact);
            assert_eq!(small.chunks_in_memory("a").await, 0);
            db.drop_now().await.unwrap();
        }
    }
}
