-- How a schema's fingerprint was computed, so that a change of rule can recompute it:
--   json-sorted  sha256 of the JSON with its keys sorted (every schema before this one)
--   canonical    sha256 of Confluent's canonical string (AvroSchema.canonicalString)
--   normalized   sha256 of Confluent's normalized form (registered with ?normalize=true)
-- The registry recomputes 'json-sorted' rows as 'canonical' when it starts.
ALTER TABLE sr_schemas ADD COLUMN identity TEXT NOT NULL DEFAULT 'json-sorted';
