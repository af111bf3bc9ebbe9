-- 0013_count_stick: runs recorded before a layer's ring hit counts became
-- one hit total and its stick-breaking over the rings
-- (model.stage2.count_stick).  Applied once, inside a transaction opened by
-- the migrator.

-- The new default (true) would read a recorded model's count features as
-- the other representation, so those runs get false written out.  A config
-- that names a value keeps it.  (A model file exported before the field
-- existed is read the same way by server/model_pack.c: its config names
-- every field of its day.)
UPDATE runs
SET config = json_set(config, '$.model.stage2.count_stick', json('false'))
WHERE json_type(config, '$.model.stage2.count_stick') IS NULL;
