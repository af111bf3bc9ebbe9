-- 0001_init: the first schema of giant.
-- Applied once, inside a transaction opened by the migrator: no BEGIN/COMMIT
-- here. Never edit this file after it has shipped; add 0002_*.sql instead.
-- Times of entities are ISO-8601 UTC text (readable in the sqlite3 shell);
-- metric times are REAL unix seconds (compact, one per metric row).

-- Training data: the built-in shower simulator's output or an HDF5 file.
CREATE TABLE datasets (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL CHECK (kind IN ('synthetic', 'file')),
    geometry    TEXT NOT NULL,                 -- binning XML the voxels follow
    path        TEXT,                          -- HDF5 file under the data dir
    spec        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(spec)),
    n_showers   INTEGER CHECK (n_showers IS NULL OR n_showers >= 0),
    n_voxels    INTEGER CHECK (n_voxels IS NULL OR n_voxels > 0),
    size_bytes  INTEGER CHECK (size_bytes IS NULL OR size_bytes >= 0),
    checksum    TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Training runs: queued -> running -> succeeded | failed | cancelled.
CREATE TABLE runs (
    id               INTEGER PRIMARY KEY,
    dataset_id       INTEGER REFERENCES datasets(id) ON DELETE RESTRICT,
    name             TEXT,
    config           TEXT NOT NULL CHECK (json_valid(config)),
    status           TEXT NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    stage            TEXT CHECK (stage IS NULL OR stage IN ('energy', 'shower')),
    device           TEXT,                     -- "cpu" or "cuda:N" while running
    precision        TEXT NOT NULL DEFAULT 'fp32' CHECK (precision IN ('fp32', 'bf16')),
    progress         REAL NOT NULL DEFAULT 0 CHECK (progress >= 0 AND progress <= 1),
    step             INTEGER NOT NULL DEFAULT 0,
    total_steps      INTEGER,
    error            TEXT,                     -- failure reason, NULL otherwise
    idempotency_key  TEXT UNIQUE,              -- client key: a retried POST finds its run
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    attempts         INTEGER NOT NULL DEFAULT 0, -- starts, including resumes after a crash
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    started_at       TEXT,
    finished_at      TEXT,
    updated_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX runs_by_status ON runs(status, id);

-- Per-step training metrics (loss, grad_norm, lr, throughput, ...).
-- value NULL means non-finite (SQLite stores NaN as NULL).
CREATE TABLE metrics (
    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage   TEXT NOT NULL CHECK (stage IN ('energy', 'shower')),
    name    TEXT NOT NULL,
    step    INTEGER NOT NULL CHECK (step >= 0),
    value   REAL,
    time    REAL NOT NULL,                      -- unix seconds
    PRIMARY KEY (run_id, stage, name, step)
) WITHOUT ROWID;

-- Validation losses, always computed in fp32, one per stage and step.
CREATE TABLE val_losses (
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage      TEXT NOT NULL CHECK (stage IN ('energy', 'shower')),
    step       INTEGER NOT NULL CHECK (step >= 0),
    loss       REAL,                            -- NULL means non-finite
    n_samples  INTEGER NOT NULL CHECK (n_samples > 0),
    time       REAL NOT NULL,                   -- unix seconds
    PRIMARY KEY (run_id, stage, step)
) WITHOUT ROWID;

-- Checkpoints: weights and optimizer state. The blob is the last column so
-- that listing checkpoints never reads the blobs' overflow pages.
CREATE TABLE checkpoints (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage       TEXT NOT NULL CHECK (stage IN ('energy', 'shower')),
    step        INTEGER NOT NULL CHECK (step >= 0),
    val_loss    REAL,
    is_best     INTEGER NOT NULL DEFAULT 0 CHECK (is_best IN (0, 1)),
    precision   TEXT NOT NULL DEFAULT 'fp32' CHECK (precision IN ('fp32', 'bf16')),
    checksum    TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL CHECK (size_bytes >= 0),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    blob        BLOB NOT NULL,
    CHECK (size_bytes = length(blob)),
    UNIQUE (run_id, stage, step)
);
-- At most one best checkpoint per run and stage, enforced by the database.
CREATE UNIQUE INDEX checkpoints_one_best ON checkpoints(run_id, stage) WHERE is_best = 1;

-- API tokens. Only a hash of the secret is stored; prefix identifies a
-- token in listings and logs without revealing it.
CREATE TABLE api_tokens (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,         -- hex SHA-256 of the secret
    role          TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at    TEXT,
    last_used_at  TEXT,
    revoked_at    TEXT
);

-- Run events for Server-Sent Events. AUTOINCREMENT: ids are never reused,
-- so a client's Last-Event-ID always means the same point in the stream.
CREATE TABLE run_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,                  -- status, metric, val_loss, checkpoint, log
    data        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX run_events_by_run ON run_events(run_id, id);
