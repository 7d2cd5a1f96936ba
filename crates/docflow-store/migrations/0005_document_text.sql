-- What a text stage (ocr-embeddings) extracted from a document: one row per page and one per
-- chunk with its embedding, keyed by (tenant, document, stage, stage version) like the run
-- itself, so a redelivery or a replay with the same version inserts nothing new. Vectors are
-- little-endian f32 blobs (384 of them for all-MiniLM-L6-v2).
CREATE TABLE document_pages (
    tenant_id     TEXT   NOT NULL,
    document_id   TEXT   NOT NULL,
    stage         TEXT   NOT NULL,
    stage_version BIGINT NOT NULL,
    page          BIGINT NOT NULL,
    source        TEXT   NOT NULL,
    confidence    DOUBLE PRECISION NULL,
    body          TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, document_id, stage, stage_version, page)
);

CREATE TABLE document_chunks (
    tenant_id     TEXT   NOT NULL,
    document_id   TEXT   NOT NULL,
    stage         TEXT   NOT NULL,
    stage_version BIGINT NOT NULL,
    chunk         BIGINT NOT NULL,
    page          BIGINT NOT NULL,
    start_byte    BIGINT NOT NULL,
    end_byte      BIGINT NOT NULL,
    body          TEXT   NOT NULL,
    vector        BYTEA  NOT NULL,
    PRIMARY KEY (tenant_id, document_id, stage, stage_version, chunk)
);

-- Search scans one tenant's chunks.
CREATE INDEX document_chunks_by_tenant ON document_chunks (tenant_id, stage, stage_version);
