-- 0004_rings: runs recorded before stage 2 could split each layer's energy
-- over its radial rings, and before its dequantization noise had its own
-- field.  Applied once, inside a transaction opened by the migrator.

-- The new defaults (model.stage2.rings true, model.stage2.dequantize_top
-- 1e-4) describe another shower vector than the runs recorded before them
-- were trained on (their checkpoints' statistics have no ring features,
-- and a resumed run would re-encode its data with other noise), so those
-- runs get the old values written out.  A config that names a value keeps
-- it.
UPDATE runs
SET config = json_set(config,
                      '$.model.stage2.rings',
                      json(coalesce(json_type(config, '$.model.stage2.rings'), 'false')),
                      '$.model.stage2.dequantize_top',
                      coalesce(json_extract(config, '$.model.stage2.dequantize_top'), 0.1));
