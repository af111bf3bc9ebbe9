/* routes_events: GET /v1/runs/{id}/events, Server-Sent Events from
 * run_events until the run ends.  The handler expects an app * as context;
 * routes.c registers it.  Depends on routes (shared helpers), http and runs. */
#ifndef ROUTES_EVENTS_H
#define ROUTES_EVENTS_H

#include "http.h"

void route_runs_events(http_request *req, void *ctx);

#endif
