/* app: the state the route handlers share, owned by cmd_serve.
 *
 * Filled before the HTTP server starts and read-only afterwards, except
 * through modules with their own locking (the store's connection is in
 * SQLite's serialized mode). */
#ifndef APP_H
#define APP_H

#include "gt_devices.h"
#include "settings.h"
#include "store.h"

#define APP_MAX_DEVICES 17     /* the CPU and up to 16 GPUs */

typedef struct app {
    settings cfg;
    store *db;
    int schema_latest;         /* newest migration this binary carries       */
    gt_device_info devices[APP_MAX_DEVICES];
    int ndevices;
    int engine_ok;             /* devices were listed without error          */
    char engine_error[512];    /* why not, for /readyz                        */
} app;

#endif
