-- One row per (tenant, document, stage, stage version): what a pipeline stage did with a
-- document. The row is the durable side effect a stage commits before its offset is stored;
-- `done` is final (a redelivery or replay with the same version rewrites nothing), `failed`
-- and `dead_lettered` can still become `done` when the record is replayed after a fix.
CREATE TABLE stage_runs (
    tenant_id       TEXT   NOT NULL,
    document_id     TEXT   NOT NULL,
    stage           TEXT   NOT NULL,
    stage_version   BIGINT NOT NULL,
    status          TEXT   NOT NULL,
    idempotency_key TEXT   NULL,
    result_ref      TEXT   NULL,
    output          TEXT   NULL,
    error           TEXT   NULL,
    attempts        BIGINT NOT NULL,
    started_at_ms   BIGINT NOT NULL,
    finished_at_ms  BIGINT NOT NULL,
    event_sent_at_ms BIGINT NULL,
    PRIMARY KEY (tenant_id, document_id, stage, stage_version)
);
