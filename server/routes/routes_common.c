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
    routes_reply_no_run(req);
    return 0;
}

void routes_reply_no_run(http_request *req)
{
    http_reply_error(req, 404, HTTP_E_NOT_FOUND, NULL, "run '%s' does not exist",
                     http_param(req, "id"));
}

void routes_reply_internal(http_request *req, const gt_error *err)
{
    http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err->message);
}

void routes_reply_list(http_request *req, store *db,
                       int (*list)(store *db, json_t **rows, gt_error *err))
{
    json_t *rows = NULL;
    gt_error err = {0};
    if (list(db, &rows, &err) != GT_OK) {
        routes_reply_internal(req, &err);
        return;
    }
    http_reply_json(req, 200, json_pack("{s:o}", "items", rows));
}

int routes_reply_rc(http_request *req, int rc, const gt_error *err, unsigned notfound,
                    unsigned invalid, const char *field)
{
    if (rc == GT_OK)
        return 1;
    unsigned status = rc == GT_ENOTFOUND ? notfound : rc == GT_EINVAL ? invalid : 0;
    const char *code = status == 404   ? HTTP_E_NOT_FOUND
                       : status == 409 ? HTTP_E_CONFLICT
                       : status == 422 ? HTTP_E_VALIDATION
                                       : NULL;
    if (code)
        http_reply_error(req, status, code, field, "%s", err->message);
    else
        routes_reply_internal(req, err);
    return 0;
}
