-- 0009_time_power: runs recorded before the flow solvers stepped on the
-- time grid t_k = (k / K)^p (sample.time_power).  Applied once, inside a
-- transaction opened by the migrator.

-- The new default (2) would change the bytes a recorded model serves, so
-- those runs get the old uniform grid written out: 1.  A config that names
-- a value keeps it.
UPDATE runs
SET config = json_set(config,
                      '$.sample.time_power',
                      coalesce(json_extract(config, '$.sample.time_power'), 1));
