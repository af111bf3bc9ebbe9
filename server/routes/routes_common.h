/* routes_common: the helpers every routes_*.c file shares: ids and
 * integers of the path and the query (query_args.c behind them), the run a
 * path's {id} names, and the replies to a failure.  Depends on http,
 * store, runs and query_args. */
#ifndef ROUTES_COMMON_H
#define ROUTES_COMMON_H

#include <stdint.h>

#include "gt_error.h"
#include "http.h"
#include "store.h"

/* A positive decimal id of at most 18 digits, or 0. */
int64_t routes_parse_id(const char *s);

/* Optional integer query argument in [lo, hi]: def when absent, -1 when
 * malformed or out of range. */
long long routes_query_ll(http_request *req, const char *name, long long def, long long lo,
                          long long hi);

/* The run the path's {id} names, or 0 after a 404 reply. */
int64_t routes_path_run(http_request *req, store *db);

/* That 404: the path's {id} names no run. */
void routes_reply_no_run(http_request *req);

/* A failure the client cannot fix (the database's, out of memory) as a 500
 * with err's message. */
void routes_reply_internal(http_request *req, const gt_error *err);

/* GET of a whole list: 200 {"items": [...]} with every row list reads
 * (models_list, auth_token_list), or the 500 of its failure. */
void routes_reply_list(http_request *req, store *db,
                       int (*list)(store *db, json_t **rows, gt_error *err));

/* The one answer of a handler to a call's code: GT_OK sends nothing and
 * returns 1; GT_ENOTFOUND is answered with status `notfound` and GT_EINVAL
 * with status `invalid` (404 not_found, 409 conflict or 422
 * validation_failed; field may be NULL; err's message), each only when
 * given (0: that code is a failure like any other); any other failure is a
 * 500 (routes_reply_internal).  Returns 0 after a reply. */
int routes_reply_rc(http_request *req, int rc, const gt_error *err, unsigned notfound,
                    unsigned invalid, const char *field);

#endif
