/* routes_common: what every routes_*.c shares (routes_common.h). */
#include "routes_common.h"

#include "query_args.h"
#include "runs.h"

int64_t routes_parse_id(const char *s)
{
    return query_args_id(s);
}

long long routes_query_ll(http_request *req, const char *name, long long def, long long lo,
                          long long hi)
{
    return query_args_ll(http_query(req, name), def, lo, hi);
}

int64_t routes_path_run(http_request *req, store *db)
{
    int64_t id = routes_parse_id(http_param(req, "id"));
    if (id > 0 && runs_exists(db, id, NULL) == GT_OK)
        return id;
    http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "run '%s' does not exist",
                     http_param(req, "id"));
    return 0;
}

void routes_reply_internal(http_request *req, const gt_error *err)
{
    http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err->message);
}
