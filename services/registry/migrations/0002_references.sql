-- Schema references (Confluent's `references`): the JSON list [{name, subject, version}]
-- a schema was registered with. '[]' for schemas that use none, as every earlier one.
ALTER TABLE sr_schemas ADD COLUMN references_json TEXT NOT NULL DEFAULT '[]';
