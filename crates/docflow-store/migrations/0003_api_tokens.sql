-- API tokens kept in the database (besides the ones in the ingest's configuration): only the
-- SHA-256 of a token is stored, so a leaked table leaks no usable token.
CREATE TABLE IF NOT EXISTS api_tokens (
    token_sha256  TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    label         TEXT NULL,
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT NULL
);
CREATE INDEX IF NOT EXISTS api_tokens_tenant ON api_tokens (tenant_id);
