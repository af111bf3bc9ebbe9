/* routes_metrics: GET /metrics, the Prometheus exposition of the service:
 * gauges read at scrape time from their owners (the database's counts by
 * status and device, device memory, the sampling worker, the HTTP layer),
 * counters and the histograms the HTTP layer, the sampling worker and the
 * scheduler keep, in the text format or, for a scraper that asks for it,
 * OpenMetrics (metrics.h writes both).  Depends on http, metrics, runs,
 * evaluations, sampling, sched, build_info and app. */
#ifndef ROUTES_METRICS_H
#define ROUTES_METRICS_H

#include "http.h"

void route_metrics(http_request *req, void *ctx);

#endif
