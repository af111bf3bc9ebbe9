/* routes: the service's HTTP handlers, and the one table that lists them.
 * Each handler's contract is described in api/openapi.json. Depends on
 * http, store, app, build_info and the engine's gt_devices. */
#ifndef ROUTES_H
#define ROUTES_H

#include "gt_error.h"
#include "http.h"

/* Adds every shipped route to r. The handlers expect an app * as context. */
int routes_register(http_router *r, gt_error *err);

#endif
