-- 0003_model_defaults: runs recorded before stage 2 gained its gated trunk
-- skip, its dequantized empty voxels and its voxel_alpha.
-- Applied once, inside a transaction opened by the migrator.

-- A run's config is the canonical JSON it ran with, and its checkpoints
-- only load into the networks and representation that config describes.
-- The new defaults (model.stage2.trunk.skip "gated", model.stage2.dequantize
-- true, model.stage2.voxel_alpha 1e-10) would describe others for the runs
-- recorded before them, so those runs get the old values written out.  A
-- config that names a value keeps it.
UPDATE runs
SET config = json_set(config,
                      '$.model.stage1.trunk.skip',
                      coalesce(json_extract(config, '$.model.stage1.trunk.skip'), 'none'),
                      '$.model.stage2.trunk.skip',
                      coalesce(json_extract(config, '$.model.stage2.trunk.skip'), 'none'),
                      '$.model.stage2.dequantize',
                      json(coalesce(json_type(config, '$.model.stage2.dequantize'), 'false')),
                      '$.model.stage2.voxel_alpha',
                      coalesce(json_extract(config, '$.model.stage2.voxel_alpha'), 1e-6));
