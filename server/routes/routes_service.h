/* routes_service: the service's own routes: /healthz (liveness),
 * /readyz (the database at this binary's schema, the engine's devices, not
 * draining, a replica's models loaded), /v1/info (build, devices, sampling
 * counts) and /v1/openapi.json (the embedded document).  Depends on http,
 * store, sampling, replica, build_info, embed and app. */
#ifndef ROUTES_SERVICE_H
#define ROUTES_SERVICE_H

#include "http.h"

void route_healthz(http_request *req, void *ctx);
void route_readyz(http_request *req, void *ctx);
void route_info(http_request *req, void *ctx);
void route_openapi(http_request *req, void *ctx);

#endif
