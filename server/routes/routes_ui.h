/* routes_ui: the dashboard's static files (server/ui/, embedded at build
 * time): GET / is index.html, GET /ui/{file} the others.  Open routes: the
 * page itself holds no data; its API calls carry the token. */
#ifndef ROUTES_UI_H
#define ROUTES_UI_H

#include "http.h"

void route_ui_index(http_request *req, void *ctx);
void route_ui_file(http_request *req, void *ctx);

#endif
