-- 0015_acceptance: a run's learned acceptance test (model.accept), trained
-- at the end of the run from its best checkpoints, which the sampler then
-- applies (engine/model/model_accept.h).  Applied once, inside a
-- transaction opened by the migrator.

-- One test per run, for the pair of best checkpoints it was trained
-- against: when either is replaced (a resumed run that found a better one)
-- the test no longer applies and is not served.  The blob is the last
-- column, as in checkpoints.
CREATE TABLE acceptance_tests (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL UNIQUE REFERENCES runs(id) ON DELETE CASCADE,
    energy_ckpt INTEGER NOT NULL,              -- checkpoints.id of the best of each stage
    shower_ckpt INTEGER NOT NULL,
    showers     INTEGER NOT NULL CHECK (showers > 0),
    auc         REAL,                          -- the classifier's held-out AUC
    acceptance  REAL,                          -- mean keep probability
    checksum    TEXT NOT NULL,                 -- hex sha256 of blob
    size_bytes  INTEGER NOT NULL CHECK (size_bytes >= 0),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    blob        BLOB NOT NULL,
    CHECK (size_bytes = length(blob))
);
