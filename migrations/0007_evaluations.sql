-- 0007_evaluations: evaluations of a run's best checkpoints against a
-- reference dataset (server/evaluations.c owns every statement on it).
-- Applied once, inside a transaction opened by the migrator.

-- queued -> running -> succeeded | failed.  The request as the client sent
-- it (with defaults filled) is kept beside the result, so a stored
-- evaluation says what it measured.
CREATE TABLE evaluations (
    id              INTEGER PRIMARY KEY,
    run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    dataset_id      INTEGER NOT NULL REFERENCES datasets(id) ON DELETE RESTRICT,
    ref2_dataset_id INTEGER REFERENCES datasets(id) ON DELETE RESTRICT,
    n               INTEGER NOT NULL CHECK (n > 0),
    seed            INTEGER NOT NULL,
    request         TEXT NOT NULL CHECK (json_valid(request)),
    status          TEXT NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    phase           TEXT,
    progress        REAL NOT NULL DEFAULT 0 CHECK (progress >= 0 AND progress <= 1),
    error           TEXT,
    result          TEXT CHECK (result IS NULL OR json_valid(result)),
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    started_at      TEXT,
    finished_at     TEXT
);

-- A run's evaluations, newest first; the worker's queue (oldest queued first).
CREATE INDEX evaluations_by_run ON evaluations(run_id, id);
CREATE INDEX evaluations_queue ON evaluations(status, id) WHERE status IN ('queued', 'running');
