/* call_counts: geometry loads, run config reads, data path checks and
 * statements on the shared connection, per thread name, counted inside
 * giant_test_server (call_counts.c) and served by GET /test/counts. */
#ifndef CALL_COUNTS_H
#define CALL_COUNTS_H

#include <jansson.h>

#include "store.h"

/* Zeroes every count and traces the statements of db (NULL: none). */
void call_counts_reset(store *db);

/* {"threads": {"<thread name>": {"statements", "geometry_loads",
 * "config_reads", "path_checks"}, ...}, "statements": [{"thread", "sql"},
 * ... the first 64 since the reset]}. */
json_t *call_counts_json(void);

#endif
