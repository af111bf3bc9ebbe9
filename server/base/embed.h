/* embed: the files compiled into the giant binary (cmake/embed.cmake
 * generates the arrays; gt_embed.h declares their element type). */
#ifndef EMBED_H
#define EMBED_H

#include <stddef.h>

#include "gt_embed.h"

typedef gt_embed_file embed_file;

/* migrations/NNNN_name.sql files, in name (= version) order */
extern const gt_embed_file embed_migrations[];
extern const size_t embed_migrations_count;

/* api/openapi.json */
extern const gt_embed_file embed_openapi[];
extern const size_t embed_openapi_count;

/* server/ui/: the dashboard's files (index.html, app.js, style.css) */
extern const gt_embed_file embed_ui[];
extern const size_t embed_ui_count;

#endif
