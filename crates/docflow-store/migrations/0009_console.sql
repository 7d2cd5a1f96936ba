-- The operators' console (`/console`, `/v1/admin/...`) reads across tenants: the newest
-- jobs, and each stage's runs finished in the last minutes (throughput, p50/p99).
CREATE INDEX ingest_jobs_by_created ON ingest_jobs (created_at_ms);
CREATE INDEX stage_runs_by_stage_finish ON stage_runs (stage, finished_at_ms);
