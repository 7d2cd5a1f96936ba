//! Text a stage extracted from a document: pages (with where the text came from) and chunks
//! with their embeddings, for the job view and for search.
//!
//! Rows are keyed by (tenant, document, stage, stage version, page | chunk) and inserted with
//! `ON CONFLICT DO NOTHING`, all of one document in one transaction, before the stage's
//! `done` run is recorded: a redelivery after a crash writes the same rows again harmlessly,
//! and a replay with the same version writes nothing. Readers take the newest version.

use sqlx::{AnyPool, Row};

use crate::StoreError;

/// Where a page's text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextSource {
    /// The PDF's own text layer.
    TextLayer,
    /// Optical character recognition of the rendered page or the image.
    Ocr,
}

impl TextSource {
    /// The stored (and API) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TextSource::TextLayer => "text_layer",
            TextSource::Ocr => "ocr",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "text_layer" => Some(TextSource::TextLayer),
            "ocr" => Some(TextSource::Ocr),
            _ => None,
        }
    }
}

/// One page's text.
#[derive(Debug, Clone, PartialEq)]
pub struct PageText {
    /// Page number, from 1.
    pub page: u32,
    /// Where the text came from.
    pub source: TextSource,
    /// Mean recognition confidence of the page's lines (OCR only), 0..1.
    pub confidence: Option<f32>,
    /// The text, lines in reading order.
    pub text: String,
    /// OCR only: where each line is on the page's image.
    pub layout: Option<PageLayout>,
}

/// Where an OCR page's lines are on the image that was read (stored as JSON with the page;
/// `GET /v1/jobs/{id}` returns it, for highlighting search hits on the page image).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PageLayout {
    /// Width of the image read, pixels (a PDF page: as rasterised).
    pub width: u32,
    /// Its height.
    pub height: u32,
    /// Degrees clockwise the image was turned to read it upright (0, 90, 180, 270).
    pub rotation: u16,
    /// Text boxes found past the page's cap and not read (0: the page was read whole).
    pub unread_boxes: usize,
    /// The lines, in reading order.
    pub lines: Vec<LineBox>,
}

/// One line of an OCR page.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LineBox {
    /// Its text.
    pub text: String,
    /// Mean confidence of its characters, 0..1.
    pub confidence: f32,
    /// Its corners in the image's pixels (as delivered, before any turn), in the text's own
    /// order: top-left, top-right, bottom-right, bottom-left of the upright line.
    pub quad: [[f32; 2]; 4],
}

/// One chunk of a page and its embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRow {
    /// Page number, from 1.
    pub page: u32,
    /// Byte range in the page's text.
    pub start: usize,
    /// End of it.
    pub end: usize,
    /// The chunk's text.
    pub text: String,
    /// Its unit vector.
    pub vector: Vec<f32>,
}

/// A document's extracted text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocumentText {
    /// Pages, in order.
    pub pages: Vec<PageText>,
    /// Chunks, in order (numbered by position).
    pub chunks: Vec<ChunkRow>,
}

/// Which document and stage run the rows belong to.
#[derive(Debug, Clone, Copy)]
pub struct TextKey<'a> {
    /// Owning tenant.
    pub tenant_id: &'a str,
    /// Document id.
    pub document_id: &'a str,
    /// Stage name.
    pub stage: &'a str,
    /// Stage version.
    pub stage_version: i32,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Document id.
    pub document_id: String,
    /// Page number.
    pub page: u32,
    /// Cosine similarity to the query.
    pub score: f32,
    /// The chunk's text.
    pub text: String,
}

/// Little-endian f32s.
pub fn vector_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32s of a little-endian blob (a trailing partial value is ignored).
pub fn vector_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Page and chunk rows.
#[derive(Debug, Clone)]
pub struct TextStore {
    pool: AnyPool,
}

fn int(v: u32) -> i64 {
    i64::from(v)
}

fn size(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A `document_pages` row as a page.
fn page_of_row(r: &sqlx::any::AnyRow) -> Result<PageText, StoreError> {
    let page: i64 = r.try_get("page")?;
    let source: String = r.try_get("source")?;
    let confidence: Option<f64> = r.try_get("confidence")?;
    let layout: Option<String> = r.try_get("layout")?;
    Ok(PageText {
        page: u32::try_from(page).unwrap_or(0),
        source: TextSource::parse(&source).unwrap_or(TextSource::Ocr),
        #[allow(clippy::cast_possible_truncation)]
        confidence: confidence.map(|c| c as f32),
        text: r.try_get("body")?,
        // A layout that does not parse (written by a newer version) is left out, not an
        // error for the page's text.
        layout: layout.and_then(|l| serde_json::from_str(&l).ok()),
    })
}

/// Inserts page `p` under `key` (a row already there stays).
async fn insert_page<'c, E>(exec: E, key: TextKey<'_>, p: &PageText) -> Result<(), StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let layout = p
        .layout
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|source| StoreError::Encode {
            what: "a page layout",
            source,
        })?;
    // A NULL is written as a literal, never bound: through sqlx's Any driver a statement
    // first prepared with a NULL parameter keeps that parameter's type on PostgreSQL, and a
    // later float in the same place is refused ("incorrect binary data format") on
    // whichever pooled connection cached it. So each combination of present values is its
    // own statement.
    let mut next = 8;
    let mut value = |present: bool| {
        if present {
            next += 1;
            format!("${}", next - 1)
        } else {
            "NULL".to_owned()
        }
    };
    let (confidence, layout_at) = (value(p.confidence.is_some()), value(layout.is_some()));
    let sql = format!(
        "INSERT INTO document_pages \
         (tenant_id, document_id, stage, stage_version, page, source, body, confidence, layout) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, {confidence}, {layout_at}) ON CONFLICT DO NOTHING"
    );
    let mut q = sqlx::query(&sql)
        .bind(key.tenant_id)
        .bind(key.document_id)
        .bind(key.stage)
        .bind(i64::from(key.stage_version))
        .bind(int(p.page))
        .bind(p.source.as_str())
        .bind(&p.text);
    if let Some(c) = p.confidence {
        q = q.bind(f64::from(c));
    }
    if let Some(l) = &layout {
        q = q.bind(l);
    }
    q.execute(exec).await?;
    Ok(())
}

impl TextStore {
    /// Over `pool` (migrated).
    pub fn new(pool: AnyPool) -> Self {
        TextStore { pool }
    }

    /// Stores a document's pages and chunks, in one transaction; rows already there stay.
    pub async fn put(&self, key: TextKey<'_>, text: &DocumentText) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for p in &text.pages {
            insert_page(&mut *tx, key, p).await?;
        }
        for (i, c) in text.chunks.iter().enumerate() {
            sqlx::query(
                "INSERT INTO document_chunks \
                 (tenant_id, document_id, stage, stage_version, chunk, page, start_byte, end_byte, body, vector) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
            )
            .bind(key.tenant_id)
            .bind(key.document_id)
            .bind(key.stage)
            .bind(i64::from(key.stage_version))
            .bind(size(i))
            .bind(int(c.page))
            .bind(size(c.start))
            .bind(size(c.end))
            .bind(&c.text)
            .bind(vector_to_bytes(&c.vector))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Stores one page (a row already there stays): a stage keeps a long document's pages
    /// as it reads them, so a redelivery continues after them.
    pub async fn put_page(&self, key: TextKey<'_>, page: &PageText) -> Result<(), StoreError> {
        insert_page(&self.pool, key, page).await
    }

    /// The pages stored under exactly `key`, in order (those an earlier delivery kept).
    pub async fn pages_of(&self, key: TextKey<'_>) -> Result<Vec<PageText>, StoreError> {
        let rows = sqlx::query(
            "SELECT page, source, confidence, body, layout FROM document_pages \
             WHERE tenant_id = $1 AND document_id = $2 AND stage = $3 AND stage_version = $4 \
             ORDER BY page",
        )
        .bind(key.tenant_id)
        .bind(key.document_id)
        .bind(key.stage)
        .bind(i64::from(key.stage_version))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(page_of_row).collect()
    }

    /// The pages of a document from `stage` at its newest version with pages.
    pub async fn pages(
        &self,
        tenant_id: &str,
        document_id: &str,
        stage: &str,
    ) -> Result<Vec<PageText>, StoreError> {
        let rows = sqlx::query(
            "SELECT page, source, confidence, body, layout FROM document_pages \
             WHERE tenant_id = $1 AND document_id = $2 AND stage = $3 AND stage_version = \
             (SELECT MAX(stage_version) FROM document_pages \
              WHERE tenant_id = $1 AND document_id = $2 AND stage = $3) \
             ORDER BY page",
        )
        .bind(tenant_id)
        .bind(document_id)
        .bind(stage)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(page_of_row).collect()
    }

    /// The `k` chunks of `tenant_id` (from `stage`, each document at its newest version)
    /// closest to `query` (a unit vector), best first. Exact: every chunk of the tenant is
    /// scored (the cost is stated in bench/results/ocr-embed.md).
    pub async fn search(
        &self,
        tenant_id: &str,
        stage: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        use futures::TryStreamExt;
        let mut rows = sqlx::query(
            "SELECT c.document_id, c.page, c.body, c.vector FROM document_chunks c \
             WHERE c.tenant_id = $1 AND c.stage = $2 AND c.stage_version = \
             (SELECT MAX(v.stage_version) FROM document_chunks v \
              WHERE v.tenant_id = c.tenant_id AND v.document_id = c.document_id AND v.stage = c.stage)",
        )
        .bind(tenant_id)
        .bind(stage)
        .fetch(&self.pool);
        // A bounded min-heap of the best k, scored as rows stream in.
        let mut best: Vec<Hit> = Vec::with_capacity(k + 1);
        while let Some(row) = rows.try_next().await? {
            let blob: Vec<u8> = row.try_get("vector")?;
            let v = vector_from_bytes(&blob);
            let score: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
            if best.len() == k && best.last().is_some_and(|w| w.score >= score) {
                continue;
            }
            let page: i64 = row.try_get("page")?;
            let hit = Hit {
                document_id: row.try_get("document_id")?,
                page: u32::try_from(page).unwrap_or(0),
                score,
                text: row.try_get("body")?,
            };
            let at = best.partition_point(|h| h.score >= score);
            best.insert(at, hit);
            best.truncate(k);
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_as_little_endian() {
        let v = vec![0.5f32, -1.25, f32::MIN_POSITIVE, 3.0];
        let b = vector_to_bytes(&v);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[..4], &0.5f32.to_le_bytes());
        assert_eq!(vector_from_bytes(&b), v);
        assert_eq!(vector_from_bytes(&b[..7]), vec![0.5]);
    }

    #[tokio::test]
    async fn put_is_idempotent_and_search_stays_in_the_tenant() {
        for db in crate::scratch::ScratchDb::all().await.unwrap() {
            let pool = crate::open(&db.url, 2).await.unwrap();
            exercise(&TextStore::new(pool)).await;
            db.drop_now().await.unwrap();
        }
    }

    /// One connection: a page without a confidence or layout (NULLs), then pages with them,
    /// then without again (sqlx's Any driver caches a statement's parameter types per
    /// connection); the layout comes back as stored.
    #[tokio::test]
    async fn pages_with_and_without_confidence_share_a_connection() {
        let layout = PageLayout {
            width: 1700,
            height: 2200,
            rotation: 90,
            unread_boxes: 0,
            lines: vec![LineBox {
                text: "Total due".into(),
                confidence: 0.97,
                quad: [[10.0, 20.0], [110.0, 20.0], [110.0, 40.0], [10.0, 40.0]],
            }],
        };
        for db in crate::scratch::ScratchDb::all().await.unwrap() {
            let store = TextStore::new(crate::open(&db.url, 1).await.unwrap());
            let cases = [
                (None, None),
                (Some(0.93), Some(layout.clone())),
                (None, None),
                (Some(0.5), None),
                (Some(0.7), Some(layout.clone())),
            ];
            for (i, (confidence, layout)) in cases.into_iter().enumerate() {
                let page = PageText {
                    page: 1,
                    source: if confidence.is_some() {
                        TextSource::Ocr
                    } else {
                        TextSource::TextLayer
                    },
                    confidence,
                    text: format!("page {i}"),
                    layout,
                };
                let doc = format!("doc{i}");
                let key = TextKey {
                    tenant_id: "t",
                    document_id: &doc,
                    stage: "ocr-embeddings",
                    stage_version: 1,
                };
                let text = DocumentText {
                    pages: vec![page.clone()],
                    chunks: Vec::new(),
                };
                store.put(key, &text).await.unwrap();
                let back = store.pages("t", &doc, "ocr-embeddings").await.unwrap();
                assert_eq!(back.len(), 1);
                assert_eq!(back[0].text, page.text);
                assert_eq!(back[0].confidence.is_some(), confidence.is_some());
                assert_eq!(back[0].layout, page.layout);
            }
            db.drop_now().await.unwrap();
        }
    }

    /// Pages kept one at a time come back under exactly their version; the document's
    /// final put keeps them as they are and adds the rest.
    #[tokio::test]
    async fn pages_kept_one_at_a_time_are_found_by_their_exact_version() {
        for db in crate::scratch::ScratchDb::all().await.unwrap() {
            let store = TextStore::new(crate::open(&db.url, 2).await.unwrap());
            let key = |stage_version| TextKey {
                tenant_id: "t",
                document_id: "long",
                stage: "ocr-embeddings",
                stage_version,
            };
            let page = |page: u32, text: &str| PageText {
                page,
                source: TextSource::Ocr,
                confidence: Some(0.9),
                text: text.into(),
                layout: None,
            };
            assert!(store.pages_of(key(2)).await.unwrap().is_empty());
            store.put_page(key(2), &page(3, "third")).await.unwrap();
            store.put_page(key(2), &page(1, "first")).await.unwrap();
            store.put_page(key(2), &page(1, "again")).await.unwrap();
            store
                .put_page(key(1), &page(2, "old version"))
                .await
                .unwrap();
            let kept = store.pages_of(key(2)).await.unwrap();
            assert_eq!(
                kept.iter()
                    .map(|p| (p.page, p.text.as_str()))
                    .collect::<Vec<_>>(),
                [(1, "first"), (3, "third")]
            );
            let whole = DocumentText {
                pages: vec![page(1, "x"), page(2, "second"), page(3, "y")],
                chunks: Vec::new(),
            };
            store.put(key(2), &whole).await.unwrap();
            let all = store.pages_of(key(2)).await.unwrap();
            assert_eq!(
                all.iter().map(|p| p.text.as_str()).collect::<Vec<_>>(),
                ["first", "second", "third"]
            );
            db.drop_now().await.unwrap();
        }
    }

    async fn exercise(store: &TextStore) {
        let unit = |x: f32, y: f32| {
            let n = (x * x + y * y).sqrt();
            vec![x / n, y / n]
        };
        let doc = |v: Vec<f32>| DocumentText {
            pages: vec![PageText {
                page: 1,
                source: TextSource::Ocr,
                confidence: Some(0.9),
                text: "hello world".into(),
                layout: None,
            }],
            chunks: vec![ChunkRow {
                page: 1,
                start: 0,
                end: 11,
                text: "hello world".into(),
                vector: v,
            }],
        };
        let key = |tenant, document| TextKey {
            tenant_id: tenant,
            document_id: document,
            stage: "ocr-embeddings",
            stage_version: 1,
        };
        store
            .put(key("a", "d1"), &doc(unit(1.0, 0.0)))
            .await
            .unwrap();
        store
            .put(key("a", "d1"), &doc(unit(0.0, 1.0)))
            .await
            .unwrap();
        store
            .put(key("a", "d2"), &doc(unit(1.0, 1.0)))
            .await
            .unwrap();
        store
            .put(key("b", "d3"), &doc(unit(1.0, 0.0)))
            .await
            .unwrap();
        let hits = store
            .search("a", "ocr-embeddings", &unit(1.0, 0.0), 10)
            .await
            .unwrap();
        assert_eq!(
            hits.len(),
            2,
            "one chunk per document, tenant a only: {hits:?}"
        );
        assert_eq!(hits[0].document_id, "d1", "the first put stays");
        assert!((hits[0].score - 1.0).abs() < 1e-6);
        assert_eq!(hits[1].document_id, "d2");
        let top1 = store
            .search("a", "ocr-embeddings", &unit(0.0, 1.0), 1)
            .await
            .unwrap();
        assert_eq!(top1.len(), 1);
        assert_eq!(top1[0].document_id, "d2");
        let pages = store.pages("a", "d1", "ocr-embeddings").await.unwrap();
        assert_eq!(pages.len(), 1);
        assert_eq!(pages[0].source, TextSource::Ocr);
        assert!(
            store
                .pages("b", "d1", "ocr-embeddings")
                .await
                .unwrap()
                .is_empty()
        );
    }
}
