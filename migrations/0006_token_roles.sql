-- 0006_token_roles: api_tokens with the service's four roles, and the
-- token that queued each run.
-- Applied once, inside a transaction opened by the migrator.

-- 0001 had roles read / write / admin and nothing used them yet. The
-- service's roles are reader (runs, metrics, events, checkpoints, datasets),
-- trainer (that, plus submitting and cancelling runs), sampler (samples,
-- for farm jobs) and admin (everything, tokens included). SQLite cannot
-- change a CHECK in place: the table is rebuilt, read becoming reader and
-- write trainer.
CREATE TABLE api_tokens_new (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,                -- the public part, shown in listings
    token_hash    TEXT NOT NULL UNIQUE,         -- hex SHA-256 of the whole token
    role          TEXT NOT NULL CHECK (role IN ('reader', 'trainer', 'sampler', 'admin')),
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at    TEXT,
    last_used_at  TEXT,
    revoked_at    TEXT
);
INSERT INTO api_tokens_new (id, name, prefix, token_hash, role, created_at, expires_at,
                            last_used_at, revoked_at)
    SELECT id, name, prefix, token_hash,
           CASE role WHEN 'read' THEN 'reader' WHEN 'write' THEN 'trainer' ELSE role END,
           created_at, expires_at, last_used_at, revoked_at
    FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_new RENAME TO api_tokens;

-- A presented token is found by its prefix, then its hash compared in
-- constant time (server/auth.c).
CREATE INDEX api_tokens_by_prefix ON api_tokens(prefix);

-- The token that submitted a run (NULL: offline, or a request without a
-- token on loopback), for the per-token limit of queued runs.
ALTER TABLE runs ADD COLUMN token_id INTEGER REFERENCES api_tokens(id);
CREATE INDEX runs_by_token ON runs(token_id, status) WHERE token_id IS NOT NULL;
