-- One row per (tenant, document): written before the event is produced, so a stored blob
-- always has a record, and a failed produce is visible (status produce_failed) and retried
-- by the next upload of the same bytes.
CREATE TABLE ingest_jobs (
    tenant_id     TEXT   NOT NULL,
    document_id   TEXT   NOT NULL,
    object_uri    TEXT   NOT NULL,
    content_type  TEXT   NOT NULL,
    size_bytes    BIGINT NOT NULL,
    file_name     TEXT   NULL,
    status        TEXT   NOT NULL,
    uploads       BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    produced_at_ms BIGINT NULL,
    PRIMARY KEY (tenant_id, document_id)
);
