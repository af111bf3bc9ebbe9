-- 0014_profile: runs recorded before stage 1 also drew the shower's
-- longitudinal profile and stage 2 was conditioned on it
-- (model.stage1.profile).  Applied once, inside a transaction opened by the
-- migrator.

-- The new default (true) would give a recorded model's stage 1 three
-- features where its checkpoint has one, so those runs get false written
-- out.  A config that names a value keeps it.  (A model file exported
-- before the field existed is read the same way by server/model_pack.c.)
UPDATE runs
SET config = json_set(config, '$.model.stage1.profile', json('false'))
WHERE json_type(config, '$.model.stage1.profile') IS NULL;
