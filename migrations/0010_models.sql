-- 0010_models: models imported from exported files (server/models.c owns
-- every statement on it).  Applied once, inside a transaction opened by
-- the migrator.

-- The file itself is kept as a blob, as checkpoints are: the database stays
-- the one thing to back up, an import is one INSERT (no file left behind by
-- a crash half-way), and GET /v1/models/{name}/file can hand back the very
-- bytes that were imported.  content_sha256 is the model's identity (the
-- hash over its parts but the manifest, server/model_format.md): importing
-- the same model again finds this row.  source_run_id is the run's id in
-- the database that exported it, not a key into this database's runs.
CREATE TABLE models (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    content_sha256 TEXT NOT NULL UNIQUE CHECK (length(content_sha256) = 64),
    file_sha256    TEXT NOT NULL CHECK (length(file_sha256) = 64),
    manifest       TEXT NOT NULL CHECK (json_valid(manifest)),
    geometry       TEXT NOT NULL,
    source_run_id  INTEGER,
    size_bytes     INTEGER NOT NULL CHECK (size_bytes = length(file)),
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    file           BLOB NOT NULL
);
