/* Test-only routes (see test_routes.c). */
#ifndef TEST_ROUTES_H
#define TEST_ROUTES_H

#include "gt_error.h"
#include "http.h"

int test_routes_add(http_router *r, gt_error *err);

#endif
