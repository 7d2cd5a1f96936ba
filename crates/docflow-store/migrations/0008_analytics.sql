-- The analytics rollup (services/analytics-rollup). Counts are per tenant per UTC hour
-- (`hour_ms`: the hour's start, Unix milliseconds); days are sums of hours. Each count
-- changes in the same transaction as the rows that make it exact: the consumed records
-- (`analytics_applied`), the group's positions (`analytics_positions`) and the stage
-- results already counted (`analytics_stage_results`). Portable SQL: SQLite and PostgreSQL.

-- Uploads (`doc.uploaded` records) by content type.
CREATE TABLE analytics_uploads (
    tenant_id    TEXT   NOT NULL,
    hour_ms      BIGINT NOT NULL,
    content_type TEXT   NOT NULL,
    documents    BIGINT NOT NULL,
    bytes        BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour_ms, content_type)
);

-- Stage outcomes (`doc.processed`): one per (document, stage, version, outcome).
CREATE TABLE analytics_outcomes (
    tenant_id TEXT   NOT NULL,
    hour_ms   BIGINT NOT NULL,
    stage     TEXT   NOT NULL,
    outcome   TEXT   NOT NULL,
    documents BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour_ms, stage, outcome)
);

-- Records the rollup could not count (dead-lettered); tenant '' when it was unreadable.
CREATE TABLE analytics_dead_letters (
    tenant_id   TEXT   NOT NULL,
    hour_ms     BIGINT NOT NULL,
    topic       TEXT   NOT NULL,
    error_class TEXT   NOT NULL,
    records     BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour_ms, topic, error_class)
);

-- Per consumer group and partition: every record below `next_offset` is counted (or
-- dead-lettered). The live group's row is where its replicas start on assignment.
CREATE TABLE analytics_positions (
    consumer_group TEXT   NOT NULL,
    topic          TEXT   NOT NULL,
    part           BIGINT NOT NULL,
    next_offset    BIGINT NOT NULL,
    PRIMARY KEY (consumer_group, topic, part)
);

-- Records counted at or above the live group's position (rows below it are pruned: the
-- position says it for them).
CREATE TABLE analytics_applied (
    topic TEXT   NOT NULL,
    part  BIGINT NOT NULL,
    off   BIGINT NOT NULL,
    PRIMARY KEY (topic, part, off)
);

-- Stage results already counted, so a `doc.processed` announced twice counts once.
CREATE TABLE analytics_stage_results (
    tenant_id     TEXT   NOT NULL,
    document_id   TEXT   NOT NULL,
    stage         TEXT   NOT NULL,
    stage_version BIGINT NOT NULL,
    outcome       TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, document_id, stage, stage_version, outcome)
);
