-- 0008_ring_counts: runs recorded before stage 2 learned each ring's hit
-- count (model.stage2.ring_counts).  Applied once, inside a transaction
-- opened by the migrator.

-- The new default (true) would add features to a resumed run's shower
-- vector and change the bytes a recorded model serves, so those runs get
-- the old value written out: false.  A config that names a value keeps it.
UPDATE runs
SET config = json_set(config,
                      '$.model.stage2.ring_counts',
                      json(coalesce(json_type(config, '$.model.stage2.ring_counts'), 'false')));
