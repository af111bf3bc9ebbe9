/* store: opening (WAL, foreign keys), migrations on an empty database,
 * re-run is a no-op, a newer schema or a changed migration is refused, a
 * failing migration leaves nothing behind, a non-database is refused, the
 * first schema enforces what its README promises, 0003 writes the old
 * model defaults into the configs of runs recorded before it, 0006
 * maps the tokens' old roles to the new ones, 0010's models table
 * holds one model per content hash and per name, and 0011 makes every
 * recorded run local and holds one Slurm job per run. */
#include "check.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

static void remove_db(const char *path)
{
    char aux[256];
    remove(path);
    snprintf(aux, sizeof aux, "%s-wal", path);
    remove(aux);
    snprintf(aux, sizeof aux, "%s-shm", path);
    remove(aux);
}

static int exec(store *s, const char *sql)
{
    return sqlite3_exec(store_db(s), sql, NULL, NULL, NULL);
}

static long long scalar(store *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static const char *text(store *s, const char *sql, char *buf, size_t cap)
{
    sqlite3_stmt *st = NULL;
    buf[0] = '\0';
    if (sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return buf;
}

int main(void)
{
    const char *path = "test_store.db";
    remove_db(path);
    gt_error err = { 0 };
    char buf[256];

    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    CHECK(n >= 1);
    CHECK_EQ_INT(list[0].version, 1);
    CHECK(strcmp(list[0].name, "0001_init.sql") == 0);
    int latest = list[n - 1].version;

    /* Empty database: everything applied, in order, recorded. */
    store *s = NULL;
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    if (!s)
        return check_finish();
    CHECK(strcmp(text(s, "PRAGMA journal_mode", buf, sizeof buf), "wal") == 0);
    CHECK_EQ_INT(scalar(s, "PRAGMA foreign_keys"), 1);
    CHECK(scalar(s, "PRAGMA busy_timeout") == STORE_BUSY_TIMEOUT_MS);
    int version = -1, applied = -1;
    CHECK_EQ_INT(store_schema_version(s, &version, &err), GT_OK);
    CHECK_EQ_INT(version, 0);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n);
    CHECK_EQ_INT(store_schema_version(s, &version, &err), GT_OK);
    CHECK_EQ_INT(version, latest);
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM schema_migrations"), n);
    const char *tables[] = { "datasets", "runs", "metrics", "val_losses", "checkpoints",
                             "api_tokens", "run_events" };
    for (int i = 0; i < 7; i++) {
        char q[128];
        snprintf(q, sizeof q, "SELECT COUNT(*) FROM sqlite_schema WHERE name = '%s'", tables[i]);
        CHECK_MSG(scalar(s, q) == 1, "table %s missing", tables[i]);
    }

    /* Re-run: a no-op. */
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, 0);
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM schema_migrations"), n);

    /* The schema enforces its rules. */
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"a\":1}')"), SQLITE_OK);
    long long run = scalar(s, "SELECT MAX(id) FROM runs");
    CHECK_EQ_INT(scalar(s, "SELECT status = 'queued' AND precision = 'fp32' FROM runs"), 1);
    CHECK(exec(s, "INSERT INTO runs(config) VALUES ('not json')") != SQLITE_OK);
    CHECK(exec(s, "UPDATE runs SET status = 'exploded'") != SQLITE_OK);
    CHECK(exec(s, "UPDATE runs SET precision = 'fp16'") != SQLITE_OK);
    CHECK(exec(s, "UPDATE runs SET progress = 1.5") != SQLITE_OK);
    CHECK(exec(s, "INSERT INTO runs(config, dataset_id) VALUES ('{}', 999)") != SQLITE_OK);
    CHECK(exec(s, "INSERT INTO metrics VALUES (999, 'energy', 'loss', 0, 1.0, 0)") != SQLITE_OK);
    char q[512];
    snprintf(q, sizeof q, "INSERT INTO metrics VALUES (%lld, 'energy', 'loss', 0, 1.0, 0)", run);
    CHECK_EQ_INT(exec(s, q), SQLITE_OK);
    CHECK(exec(s, q) != SQLITE_OK);                         /* one value per step */
    snprintf(q, sizeof q,
             "INSERT INTO checkpoints(run_id, stage, step, val_loss, is_best, checksum, "
             "size_bytes, blob) VALUES (%lld, 'energy', 10, 0.5, 1, 'c', 3, x'010203')", run);
    CHECK_EQ_INT(exec(s, q), SQLITE_OK);
    snprintf(q, sizeof q,
             "INSERT INTO checkpoints(run_id, stage, step, val_loss, is_best, checksum, "
             "size_bytes, blob) VALUES (%lld, 'energy', 20, 0.4, 1, 'c', 3, x'010203')", run);
    CHECK(exec(s, q) != SQLITE_OK);                         /* one best per stage */
    snprintf(q, sizeof q,
             "INSERT INTO checkpoints(run_id, stage, step, val_loss, is_best, checksum, "
             "size_bytes, blob) VALUES (%lld, 'energy', 20, 0.4, 0, 'c', 5, x'010203')", run);
    CHECK(exec(s, q) != SQLITE_OK);                         /* size matches blob */
    CHECK_EQ_INT(exec(s, "DELETE FROM runs"), SQLITE_OK);   /* cascades */
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM metrics"), 0);
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM checkpoints"), 0);

    /* A changed migration file is refused. */
    store_migration changed[STORE_MAX_MIGRATIONS];
    memcpy(changed, list, sizeof(store_migration) * (size_t)n);
    changed[0].sql = "CREATE TABLE whatever(x);";
    CHECK_EQ_INT(store_migrate(s, changed, n, &applied, &err), GT_EFORMAT);
    CHECK_MSG(strstr(err.message, "0001_init.sql") && strstr(err.message, "never change"), "%s",
              err.message);

    /* A failing migration rolls back entirely and is not recorded. */
    memcpy(changed, list, sizeof(store_migration) * (size_t)n);
    changed[n] = (store_migration){ latest + 1, "9998_broken.sql",
                                    "CREATE TABLE half_done(x); INSERT INTO nowhere VALUES (1);" };
    CHECK_EQ_INT(store_migrate(s, changed, n + 1, &applied, &err), GT_EIO);
    CHECK_MSG(strstr(err.message, "9998_broken.sql") != NULL, "%s", err.message);
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'half_done'"), 0);
    CHECK_EQ_INT(store_schema_version(s, &version, &err), GT_OK);
    CHECK_EQ_INT(version, latest);

    /* A good extra migration applies; the binary that lacks it then refuses
     * the database, naming both versions. */
    changed[n] = (store_migration){ latest + 1, "9998_more.sql", "CREATE TABLE extra(x);" };
    CHECK_EQ_INT(store_migrate(s, changed, n + 1, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, 1);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_EFORMAT);
    char want[128];
    snprintf(want, sizeof want, "version %d is newer than this binary supports (%d)",
             latest + 1, latest);
    CHECK_MSG(strstr(err.message, want) != NULL, "%s", err.message);

    /* Out-of-order lists are a programming error, caught. */
    store_migration swapped[2] = { { 2, "0002_b.sql", "" }, { 1, "0001_a.sql", "" } };
    CHECK_EQ_INT(store_migrate(s, swapped, 2, NULL, &err), GT_EINVAL);
    CHECK_EQ_INT(store_close(s, &err), GT_OK);
    remove_db(path);

    /* Not a database: refused at open with the path in the message. */
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 200; i++)
        fputs("this is not an SQLite file at all. ", f);
    fclose(f);
    s = NULL;
    CHECK(store_open(&s, path, &err) != GT_OK);
    CHECK(s == NULL);
    CHECK_MSG(strstr(err.message, path) != NULL, "%s", err.message);
    remove_db(path);
    CHECK(store_open(&s, "no-such-dir/x.db", &err) == GT_EIO);
    CHECK(store_open(&s, "", &err) == GT_EINVAL);
    CHECK_EQ_INT(store_close(NULL, &err), GT_OK);

    /* 0003: a run recorded at version 2 (its canonical config from before
     * the skip and dequantize fields) keeps the networks it trained; a run
     * that names the new values keeps them. */
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 3 && list[2].version == 3);
    CHECK_EQ_INT(store_migrate(s, list, 2, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"model\":{\"stage1\":"
                         "{\"objective\":\"flow\",\"trunk\":{\"kind\":\"expert\"}},"
                         "\"stage2\":{\"mode\":\"oneshot\",\"objective\":\"flow\","
                         "\"trunk\":{\"kind\":\"routed\",\"hidden\":8}}}}')"), SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"model\":{\"stage1\":"
                         "{\"trunk\":{\"skip\":\"none\"}},\"stage2\":{\"dequantize\":true,"
                         "\"trunk\":{\"skip\":\"gated\"}}}}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 2);
    CHECK(!strcmp(text(s, "SELECT json_extract(config, '$.model.stage1.trunk.skip') || ' ' || "
                          "json_extract(config, '$.model.stage2.trunk.skip') || ' ' || "
                          "json_type(config, '$.model.stage2.dequantize') || ' ' || "
                          "json_extract(config, '$.model.stage2.trunk.hidden') || ' ' || "
                          "json_extract(config, '$.model.stage2.voxel_alpha') "
                          "FROM runs WHERE id = 1", buf, sizeof buf),
                  "none none false 8 1.0e-06"));
    CHECK(!strcmp(text(s, "SELECT json_extract(config, '$.model.stage2.trunk.skip') || ' ' || "
                          "json_type(config, '$.model.stage2.dequantize') FROM runs WHERE id = 2",
                       buf, sizeof buf),
                  "gated true"));
    /* 0004: the same runs keep the shower vector they were trained on */
    CHECK(n >= 4 && list[3].version == 4);
    CHECK(!strcmp(text(s, "SELECT json_type(config, '$.model.stage2.rings') || ' ' || "
                          "json_extract(config, '$.model.stage2.dequantize_top') "
                          "FROM runs WHERE id = 1", buf, sizeof buf),
                  "false 0.1"));
    /* 0005: and the decoding and loss they were trained and served with */
    CHECK(n >= 5 && list[4].version == 5);
    CHECK(!strcmp(text(s, "SELECT json_type(config, '$.model.stage2.keep_largest') || ' ' || "
                          "json_extract(config, '$.model.stage2.layer_weight') "
                          "FROM runs WHERE id = 2", buf, sizeof buf),
                  "false 1"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0004 alone: a config that names the new fields keeps them */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK_EQ_INT(store_migrate(s, list, 3, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"model\":{\"stage2\":"
                         "{\"rings\":true,\"dequantize_top\":0.001}}}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 3);
    CHECK(!strcmp(text(s, "SELECT json_type(config, '$.model.stage2.rings') || ' ' || "
                          "json_extract(config, '$.model.stage2.dequantize_top') "
                          "FROM runs WHERE id = 1", buf, sizeof buf),
                  "true 0.001"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0005 alone: a config that names the new fields keeps them; one that
     * names one of them gets the old value of the other */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK_EQ_INT(store_migrate(s, list, 4, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"model\":{\"stage2\":"
                         "{\"keep_largest\":true,\"layer_weight\":2.5}}}')"), SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"model\":{\"stage2\":"
                         "{\"keep_largest\":true}}}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 4);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_type(config, '$.model.stage2.keep_largest') "
                          "|| ' ' || json_extract(config, '$.model.stage2.layer_weight'), ', ') "
                          "FROM runs", buf, sizeof buf),
                  "true 2.5, true 1"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0006: tokens of 0001's roles become reader / trainer / admin and keep
     * everything else; the new roles and runs.token_id are there. */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 6 && list[5].version == 6);
    CHECK_EQ_INT(store_migrate(s, list, 5, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO api_tokens(name, prefix, token_hash, role, expires_at,"
                         " revoked_at) VALUES ('a', 'gt_1', 'h1', 'read', '2030-01-01', NULL),"
                         " ('b', 'gt_2', 'h2', 'write', NULL, '2026-01-01'),"
                         " ('c', 'gt_3', 'h3', 'admin', NULL, NULL)"), SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK(!strcmp(text(s, "SELECT group_concat(id || ' ' || name || ' ' || role || ' ' ||"
                          " COALESCE(expires_at, '-') || ' ' || COALESCE(revoked_at, '-'), ', ')"
                          " FROM api_tokens ORDER BY id", buf, sizeof buf),
                  "1 a reader 2030-01-01 -, 2 b trainer - 2026-01-01, 3 c admin - -"));
    CHECK(exec(s, "UPDATE api_tokens SET role = 'read' WHERE id = 1") != SQLITE_OK);
    CHECK_EQ_INT(exec(s, "UPDATE api_tokens SET role = 'sampler' WHERE id = 1"), SQLITE_OK);
    CHECK(exec(s, "INSERT INTO api_tokens(name, prefix, token_hash, role)"
                  " VALUES ('d', 'gt_4', 'h1', 'reader')") != SQLITE_OK);  /* hash unique */
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM runs WHERE token_id IS NULL"), 1);
    CHECK_EQ_INT(exec(s, "UPDATE runs SET token_id = 3"), SQLITE_OK);
    CHECK(exec(s, "UPDATE runs SET token_id = 99") != SQLITE_OK);    /* a real token */
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0008: runs recorded before ring hit counts keep the shower vector they
     * were trained on (false); one that names the field keeps it */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 8 && list[7].version == 8);
    CHECK_EQ_INT(store_migrate(s, list, 7, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{}'), ('{\"model\":{\"stage2\":"
                         "{\"ring_counts\":true}}}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 7);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_type(config, '$.model.stage2.ring_counts'),"
                          " ', ') FROM runs", buf, sizeof buf),
                  "false, true"));

    /* 0010: imported models, one per content hash and per name; the stored
     * size is the file's, the manifest JSON */
#define MODEL_ROW(name, sha, manifest, size, file)                                        \
    "INSERT INTO models (name, content_sha256, file_sha256, manifest, geometry,"        \
    " source_run_id, size_bytes, file) VALUES ('" name "', '" sha "', '" sha "', '"       \
    manifest "', 'dataset_2', 3, " size ", " file ")"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    CHECK(scalar(s, "SELECT max(version) FROM schema_migrations") >= 10);
    CHECK_EQ_INT(exec(s, MODEL_ROW("m1", SHA_A, "{}", "3", "x'010203'")), SQLITE_OK);
    CHECK(exec(s, MODEL_ROW("m2", SHA_A, "{}", "3", "x'010203'")) != SQLITE_OK);  /* same content */
    CHECK(exec(s, MODEL_ROW("m1", SHA_B, "{}", "3", "x'010203'")) != SQLITE_OK);  /* same name */
    CHECK(exec(s, MODEL_ROW("m2", SHA_B, "{}", "4", "x'010203'")) != SQLITE_OK);  /* wrong size */
    CHECK(exec(s, MODEL_ROW("m2", SHA_B, "{", "3", "x'010203'")) != SQLITE_OK);   /* not JSON */
    CHECK(exec(s, MODEL_ROW("m2", "abc", "{}", "3", "x'010203'")) != SQLITE_OK);  /* short hash */
    CHECK(exec(s, MODEL_ROW("", SHA_B, "{}", "3", "x'010203'")) != SQLITE_OK);    /* no name */
    CHECK_EQ_INT(exec(s, MODEL_ROW("m2", SHA_B, "{}", "3", "x'010203'")), SQLITE_OK);
    CHECK_EQ_INT(scalar(s, "SELECT count(*) FROM models WHERE created_at LIKE '____-__-__T%Z'"),
                 2);
#undef MODEL_ROW
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0011: runs recorded before it are local; a slurm run has at most one
     * job row, with a 64-digit token hash held by no other job */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 11 && list[10].version == 11);
    CHECK_EQ_INT(store_migrate(s, list, 10, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(scalar(s, "SELECT count(*) FROM runs WHERE executor = 'local'"), 1);
    CHECK(exec(s, "INSERT INTO runs(config, executor) VALUES ('{}', 'pbs')") != SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config, executor) VALUES ('{}', 'slurm')"), SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO slurm_jobs(run_id, job_id, active, token_hash) VALUES"
                         " (2, 7, 1, '" SHA_A "')"), SQLITE_OK);
    CHECK(exec(s, "INSERT INTO slurm_jobs(run_id, job_id) VALUES (2, 8)") != SQLITE_OK);
    CHECK(exec(s, "INSERT INTO slurm_jobs(run_id, token_hash) VALUES (1, '" SHA_A "')") !=
          SQLITE_OK);                                              /* another job's token */
    CHECK(exec(s, "INSERT INTO slurm_jobs(run_id, token_hash) VALUES (1, 'abc')") != SQLITE_OK);
    CHECK(exec(s, "INSERT INTO slurm_jobs(run_id, active) VALUES (1, 2)") != SQLITE_OK);
    CHECK(exec(s, "INSERT INTO slurm_jobs(run_id) VALUES (99)") != SQLITE_OK); /* no such run */
    CHECK_EQ_INT(exec(s, "DELETE FROM runs WHERE id = 2"), SQLITE_OK);
    CHECK_EQ_INT(scalar(s, "SELECT count(*) FROM slurm_jobs"), 0);
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0009: runs recorded before the power time grid keep the uniform one
     * (1); one that names the field keeps it */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 9 && list[8].version == 9);
    CHECK_EQ_INT(store_migrate(s, list, 8, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{}'), ('{\"sample\":"
                         "{\"time_power\":3}}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 8);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_extract(config, '$.sample.time_power'),"
                          " ', ') FROM runs", buf, sizeof buf),
                  "1, 3"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0012: runs recorded before the turned showers do not turn them
     * (false, as JSON false: the config parser takes no 0); one that names
     * the field keeps it */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 12 && list[11].version == 12);
    CHECK_EQ_INT(store_migrate(s, list, 11, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES ('{\"sample\":{\"steps\":7}}'),"
                         " ('{\"sample\":{\"symmetrize\":true}}'), ('{}')"), SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 11);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_extract(config, '$.sample'), ' ') FROM runs",
                       buf, sizeof buf),
                  "{\"steps\":7,\"symmetrize\":false} {\"symmetrize\":true} "
                  "{\"symmetrize\":false}"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0013: runs recorded before the stick-broken hit counts keep each
     * ring's count; one that names the field keeps it, and a config with
     * no model object gains one */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 13 && list[12].version == 13);
    CHECK_EQ_INT(store_migrate(s, list, 12, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES"
                         " ('{\"model\":{\"stage2\":{\"rings\":true}}}'),"
                         " ('{\"model\":{\"stage2\":{\"count_stick\":true}}}'), ('{}')"),
                 SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 12);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_extract(config, '$.model.stage2'), ' ') "
                          "FROM runs", buf, sizeof buf),
                  "{\"rings\":true,\"count_stick\":false} {\"count_stick\":true} "
                  "{\"count_stick\":false}"));
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    /* 0014: runs recorded before stage 1 drew the shower's profile keep a
     * one-feature stage 1; one that names the field keeps it, and a config
     * with no model object gains one */
    remove_db(path);
    CHECK_EQ_INT(store_open(&s, path, &err), GT_OK);
    CHECK(n >= 14 && list[13].version == 14);
    CHECK_EQ_INT(store_migrate(s, list, 13, &applied, &err), GT_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO runs(config) VALUES"
                         " ('{\"model\":{\"stage1\":{\"objective\":\"flow\"}}}'),"
                         " ('{\"model\":{\"stage1\":{\"profile\":true}}}'), ('{}')"),
                 SQLITE_OK);
    CHECK_EQ_INT(store_migrate(s, list, n, &applied, &err), GT_OK);
    CHECK_EQ_INT(applied, n - 13);
    CHECK(!strcmp(text(s, "SELECT group_concat(json_extract(config, '$.model.stage1'), ' ') "
                          "FROM runs", buf, sizeof buf),
                  "{\"objective\":\"flow\",\"profile\":false} {\"profile\":true} "
                  "{\"profile\":false}"));
    /* 0015: the acceptance tests' table, one a run, its blob's size checked */
    CHECK(n >= 15 && list[14].version == 15);
    CHECK_EQ_INT(scalar(s, "SELECT COUNT(*) FROM acceptance_tests"), 0);
    CHECK(exec(s, "INSERT INTO acceptance_tests (run_id, energy_ckpt, shower_ckpt, showers,"
                  " checksum, size_bytes, blob) VALUES (1, 1, 2, 10, 'x', 3, x'0102')") !=
          SQLITE_OK);
    CHECK_EQ_INT(exec(s, "INSERT INTO acceptance_tests (run_id, energy_ckpt, shower_ckpt, showers,"
                         " checksum, size_bytes, blob) VALUES (1, 1, 2, 10, 'x', 2, x'0102')"),
                 SQLITE_OK);
    CHECK(exec(s, "INSERT INTO acceptance_tests (run_id, energy_ckpt, shower_ckpt, showers,"
                  " checksum, size_bytes, blob) VALUES (1, 3, 4, 10, 'x', 2, x'0102')") !=
          SQLITE_OK);
    CHECK_EQ_INT(store_close(s, &err), GT_OK);

    remove_db(path);

    char sum[17];
    store_checksum_text("", sum);
    CHECK(strcmp(sum, "cbf29ce484222325") == 0);              /* FNV-1a 64 offset basis */
    return check_finish();
}
