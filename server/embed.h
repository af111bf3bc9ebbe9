/* embed: files compiled into the binary (see embed.cmake).
 *
 * Each embedded set is an array of embed_file sorted by name, generated at
 * build time; data is NUL-terminated (size excludes the NUL), so text files
 * can be used as C strings. */
#ifndef EMBED_H
#define EMBED_H

#include <stddef.h>

typedef struct embed_file {
    const char *name;              /* file name without directories */
    const unsigned char *data;
    size_t size;
} embed_file;

/* migrations/NNNN_name.sql files, in name (= version) order */
extern const embed_file embed_migrations[];
extern const size_t embed_migrations_count;

/* api/openapi.json */
extern const embed_file embed_openapi[];
extern const size_t embed_openapi_count;

#endif
