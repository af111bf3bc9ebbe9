-- 0002_service: state the training and sampling service needs.
-- Applied once, inside a transaction opened by the migrator.

-- Datasets made in the background (synthetic) have a life cycle:
-- pending -> ready | failed; registered files are ready at once.
ALTER TABLE datasets ADD COLUMN status TEXT NOT NULL DEFAULT 'ready'
    CHECK (status IN ('pending', 'ready', 'failed'));
ALTER TABLE datasets ADD COLUMN progress REAL NOT NULL DEFAULT 1
    CHECK (progress >= 0 AND progress <= 1);
ALTER TABLE datasets ADD COLUMN error TEXT;
ALTER TABLE datasets ADD COLUMN e_min_mev REAL;
ALTER TABLE datasets ADD COLUMN e_max_mev REAL;

-- The scheduler picks the oldest queued run: FIFO by id.
CREATE INDEX IF NOT EXISTS runs_queue ON runs(status, id) WHERE status = 'queued';
