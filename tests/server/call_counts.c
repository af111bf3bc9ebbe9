/* call_counts: what giant_test_server counts for the request-path tests
 * (test_request_paths), per thread name (the workers name their threads:
 * "sampling", "scheduler", ...; the HTTP pool's threads have other names).
 *
 * - geometry loads, config reads and data path checks: the link wraps
 *   geo_load_memory, geo_load_file, the four model_config readers and
 *   gt_path_inside (-Wl,--wrap=..., tests/server/CMakeLists.txt), so every
 *   call from another object file, the engine's included, passes here;
 * - statements on the shared connection: SQLite's trace of it
 *   (sqlite3_trace_v2, SQLITE_TRACE_STMT), installed by call_counts_reset. */
#define _GNU_SOURCE   /* pthread_getname_np */
#include "call_counts.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "geo.h"
#include "gt_path.h"
#include "model_config.h"

enum { C_STATEMENTS, C_GEOMETRY, C_CONFIG, C_PATH, C_KINDS };
static const char *const kind_names[C_KINDS] = {"statements", "geometry_loads",
                                                "config_reads", "path_checks"};

#define MAX_THREADS 32
#define MAX_SQL 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[16];
    long long n[C_KINDS];
} threads[MAX_THREADS];
static int nthreads;
static struct {
    char thread[16];
    char sql[200];
} sqls[MAX_SQL];
static int nsql;

static void count(int kind, const char *sql)
{
    char name[16] = "";
    if (pthread_getname_np(pthread_self(), name, sizeof name) != 0)
        snprintf(name, sizeof name, "?");
    pthread_mutex_lock(&mu);
    int t = 0;
    while (t < nthreads && strcmp(threads[t].name, name) != 0)
        t++;
    if (t == nthreads && nthreads < MAX_THREADS)
        snprintf(threads[nthreads++].name, sizeof threads[0].name, "%s", name);
    if (t < nthreads)
        threads[t].n[kind]++;
    if (sql && nsql < MAX_SQL) {
        snprintf(sqls[nsql].thread, sizeof sqls[0].thread, "%s", name);
        snprintf(sqls[nsql].sql, sizeof sqls[0].sql, "%s", sql);
        nsql++;
    }
    pthread_mutex_unlock(&mu);
}

static int on_trace(unsigned type, void *ctx, void *stmt, void *text)
{
    (void)ctx;
    (void)stmt;
    const char *sql = text;
    /* a trigger's program is announced as "-- ..." inside its statement */
    if (type == SQLITE_TRACE_STMT && !(sql && strncmp(sql, "--", 2) == 0))
        count(C_STATEMENTS, sql ? sql : "");
    return 0;
}

void call_counts_reset(store *db)
{
    pthread_mutex_lock(&mu);
    memset(threads, 0, sizeof threads);
    nthreads = 0;
    nsql = 0;
    pthread_mutex_unlock(&mu);
    if (db)
        sqlite3_trace_v2(store_db(db), SQLITE_TRACE_STMT, on_trace, NULL);
}

json_t *call_counts_json(void)
{
    json_t *t = json_object(), *q = json_array();
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nthreads; i++) {
        json_t *o = json_object();
        for (int k = 0; k < C_KINDS; k++)
            json_object_set_new(o, kind_names[k], json_integer(threads[i].n[k]));
        json_object_set_new(t, threads[i].name, o);
    }
    for (int i = 0; i < nsql; i++)
        json_array_append_new(q, json_pack("{s:s, s:s}", "thread", sqls[i].thread, "sql",
                                           sqls[i].sql));
    pthread_mutex_unlock(&mu);
    return json_pack("{s:o, s:o}", "threads", t, "statements", q);
}

/* ---------------------------------------------------------------------------
 * The wrapped calls
 * ------------------------------------------------------------------------- */

/* Declares __real_NAME and defines __wrap_NAME: counts the call as kind,
 * then makes it. */
#define WRAP(kind, name, params, args)                                                    \
    int __real_##name params;                                                              \
    int __wrap_##name params;                                                              \
    int __wrap_##name params                                                               \
    {                                                                                      \
        count(kind, NULL);                                                                 \
        return __real_##name args;                                                         \
    }

WRAP(C_GEOMETRY, geo_load_memory, (geo_geometry *g, const char *xml, int len, gt_error *err),
     (g, xml, len, err))
WRAP(C_GEOMETRY, geo_load_file, (geo_geometry *g, const char *path, gt_error *err),
     (g, path, err))
WRAP(C_CONFIG, model_config_parse,
     (const char *text, size_t len, model_config *cfg, char *field, size_t field_len,
      gt_error *err),
     (text, len, cfg, field, field_len, err))
WRAP(C_CONFIG, model_config_parse_stored,
     (const char *text, size_t len, model_config *cfg, char *field, size_t field_len,
      gt_error *err),
     (text, len, cfg, field, field_len, err))
WRAP(C_CONFIG, model_config_from_json,
     (const json_t *root, model_config *cfg, char *field, size_t field_len, gt_error *err),
     (root, cfg, field, field_len, err))
WRAP(C_CONFIG, model_config_from_stored_json,
     (const json_t *root, model_config *cfg, char *field, size_t field_len, gt_error *err),
     (root, cfg, field, field_len, err))
WRAP(C_PATH, gt_path_inside,
     (const char *root, const char *rel, char *real, size_t cap, gt_error *err),
     (root, rel, real, cap, err))
