-- Dead letters sent back to their source topic by `docflow replay dlq`: one row per
-- dead-letter record redriven, so a later run never redrives the same dead letter again
-- (whatever filters each run used). Portable SQL: SQLite and PostgreSQL.
CREATE TABLE dlq_redrives (
    dlq_topic      TEXT   NOT NULL,
    part           BIGINT NOT NULL,
    off            BIGINT NOT NULL,
    consumer_group TEXT   NOT NULL,
    redriven_at_ms BIGINT NOT NULL,
    PRIMARY KEY (dlq_topic, part, off)
);
