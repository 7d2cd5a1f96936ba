-- Schema registry storage. Portable SQL: runs unchanged on SQLite and PostgreSQL.

-- One row per distinct schema; ids are never reused, rows are never deleted, so a
-- record written with an id stays decodable.
CREATE TABLE sr_schemas (
    id          BIGINT PRIMARY KEY,
    fingerprint TEXT   NOT NULL UNIQUE,
    schema_type TEXT   NOT NULL,
    schema_text TEXT   NOT NULL
);

-- last_version only grows, so versions keep increasing after deletes.
CREATE TABLE sr_subjects (
    subject      TEXT   PRIMARY KEY,
    last_version BIGINT NOT NULL
);

CREATE TABLE sr_versions (
    subject   TEXT   NOT NULL,
    version   BIGINT NOT NULL,
    schema_id BIGINT NOT NULL REFERENCES sr_schemas (id),
    deleted   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (subject, version)
);

CREATE INDEX sr_versions_by_schema ON sr_versions (schema_id);

-- scope '' is the global level; any other scope is a subject.
CREATE TABLE sr_config (
    scope         TEXT PRIMARY KEY,
    compatibility TEXT NOT NULL
);
