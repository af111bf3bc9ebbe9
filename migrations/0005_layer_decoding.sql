-- 0005_layer_decoding: runs recorded before stage 2 weighted its
-- stick-breaking columns (model.stage2.layer_weight) and before decoding
-- kept the largest voxel of a ring or layer whose energy reaches the
-- readout threshold (model.stage2.keep_largest).  Applied once, inside a
-- transaction opened by the migrator.

-- Their new defaults (4 and true) would re-standardise a resumed run's data
-- and change the bytes a recorded model serves, so those runs get the old
-- values written out: layer_weight 1 (no weighting) and keep_largest
-- false.  A config that names a value keeps it.
UPDATE runs
SET config = json_set(config,
                      '$.model.stage2.keep_largest',
                      json(coalesce(json_type(config, '$.model.stage2.keep_largest'), 'false')),
                      '$.model.stage2.layer_weight',
                      coalesce(json_extract(config, '$.model.stage2.layer_weight'), 1));
