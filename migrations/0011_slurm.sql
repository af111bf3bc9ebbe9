-- 0011_slurm: runs that train as Slurm batch jobs (server/slurm.c submits
-- and follows them; server/slurm_jobs.c owns every statement on
-- slurm_jobs).  Applied once, inside a transaction opened by the migrator.

-- Which executor trains a run: the service's own scheduler takes only
-- 'local' runs from the queue, the Slurm thread only 'slurm' ones.  Filled
-- from the config's executor.kind when the run is created; every run
-- recorded before is local.
ALTER TABLE runs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local'
    CHECK (executor IN ('local', 'slurm'));

-- The Slurm job of a slurm run: one row per run, rewritten at each
-- submission (a resumed run gets a new job; a requeued job keeps its id).
-- state and reason are Slurm's words as squeue last showed them (PENDING,
-- RUNNING, COMPLETED, FAILED, ... and Resources, BeginTime, ...).  active
-- is 1 from sbatch until the job has left Slurm's queue for good: the
-- poller follows active jobs only.  token_hash is the hex SHA-256 of the
-- job's ingest token (the token itself is only in the job script).
CREATE TABLE slurm_jobs (
    run_id        INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    job_id        INTEGER CHECK (job_id IS NULL OR job_id > 0),
    state         TEXT,
    reason        TEXT,
    node          TEXT,
    active        INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),
    token_hash    TEXT UNIQUE CHECK (token_hash IS NULL OR length(token_hash) = 64),
    submissions   INTEGER NOT NULL DEFAULT 0 CHECK (submissions >= 0),
    restarts      INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    scancel_sent  INTEGER NOT NULL DEFAULT 0 CHECK (scancel_sent IN (0, 1)),
    reported      TEXT CHECK (reported IS NULL OR reported IN ('succeeded', 'failed')),
    report_error  TEXT,
    submitted_at  TEXT,
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX slurm_jobs_active ON slurm_jobs(active) WHERE active = 1;
CREATE INDEX runs_by_executor ON runs(executor, status, id);
