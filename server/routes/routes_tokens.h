/* routes_tokens: /v1/tokens, the admin's view of the bearer tokens.
 * Handlers expect an app * as context; routes.c registers them (admin
 * only).  Contracts: api/openapi.json.  Depend on routes, http, auth. */
#ifndef ROUTES_TOKENS_H
#define ROUTES_TOKENS_H

#include "http.h"

void route_tokens_create(http_request *req, void *ctx);  /* POST   /v1/tokens       */
void route_tokens_list(http_request *req, void *ctx);    /* GET    /v1/tokens       */
void route_tokens_revoke(http_request *req, void *ctx);  /* DELETE /v1/tokens/{id}  */

#endif
