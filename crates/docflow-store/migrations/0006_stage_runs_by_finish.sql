-- The search index reads a tenant's runs of one stage finished since its last look.
CREATE INDEX stage_runs_by_finish ON stage_runs (tenant_id, stage, finished_at_ms);
