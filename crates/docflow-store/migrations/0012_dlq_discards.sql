-- A dead letter is handled once: redriven (`docflow replay dlq`, the console's Redrive) or
-- discarded by an operator (the console's Discard: looked at, not to be sent back). Both
-- are a row of dlq_redrives, so a discarded dead letter is never redriven and no longer
-- counts as waiting.
--   action      'redriven' or 'discarded'
--   handled_by  who discarded it (as they named themselves), '' for a redrive
-- redriven_at_ms is when it was handled, either way.
ALTER TABLE dlq_redrives ADD COLUMN action TEXT NOT NULL DEFAULT 'redriven';
ALTER TABLE dlq_redrives ADD COLUMN handled_by TEXT NOT NULL DEFAULT '';
