/* gt_embed: files compiled into a binary by cmake/embed.cmake.
 *
 * Each embedded set is an array of gt_embed_file sorted by name, generated at
 * build time; data is NUL-terminated (size excludes the NUL), so text files
 * can be used as C strings. */
#ifndef GT_EMBED_H
#define GT_EMBED_H

#include <stddef.h>

typedef struct gt_embed_file {
    const char *name;              /* file name without directories */
    const unsigned char *data;
    size_t size;
} gt_embed_file;

#endif
