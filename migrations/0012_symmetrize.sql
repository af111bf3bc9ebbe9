-- 0012_symmetrize: runs recorded before the sampler turned and mirrored
-- each shower about the beam axis (sample.symmetrize).  Applied once,
-- inside a transaction opened by the migrator.

-- The new default (true) would change the bytes a recorded model serves, so
-- those runs get false written out.  A config that names a value keeps it.
-- (A model file exported before the field existed is read the same way by
-- server/model_pack.c: its config names every field of its day.)
UPDATE runs
SET config = json_set(config, '$.sample.symmetrize', json('false'))
WHERE json_type(config, '$.sample.symmetrize') IS NULL;
