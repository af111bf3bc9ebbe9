-- 0012_skip_spent_layers: runs recorded before an autoregressive stage 2
-- trained only on the layers its sampler generates
-- (model.stage2.skip_spent_layers).  Applied once, inside a transaction
-- opened by the migrator.

-- The new default (true) changes which rows a run trains on, so a recorded
-- run resumed after this migration would continue on other data than it
-- started with; those runs get the old behaviour written out: false.  A
-- config that names a value keeps it.  Sampling does not read the field.
UPDATE runs
SET config = json_set(config, '$.model.stage2.skip_spent_layers', json('false'))
WHERE json_type(config, '$.model.stage2.skip_spent_layers') IS NULL;
