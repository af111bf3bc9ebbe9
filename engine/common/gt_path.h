/* gt_path: confining a caller's relative path to a directory.
 *
 * A service that reads files named by its clients must never open one
 * outside its data directory: not by an absolute path, not through "..",
 * not through a symbolic link that leads out.  These checks are the one
 * place that decides it (the HTTP routes at submission, the trainer again
 * when it opens the file, since a link can change in between).  Their
 * messages name the path as the caller gave it, never the directory's real
 * location on the server. */
#ifndef GT_PATH_H
#define GT_PATH_H

#include <stddef.h>
#include <stdio.h>

#include "gt_error.h"

/* Lexical check of a caller's path: non-empty, relative, no "." or ".."
 * component, no empty component ("a//b"), no backslash.  GT_OK or GT_EINVAL
 * with the reason. */
int gt_path_check_relative(const char *rel, gt_error *err);

/* The real path of root/rel (symbolic links resolved) into real[cap] when
 * rel passes gt_path_check_relative, the file exists and it lies inside
 * root's real path.  GT_ENOTFOUND when there is no such file, GT_EINVAL
 * when rel is refused or leads out of root, GT_EIO when root itself
 * cannot be resolved. */
int gt_path_inside(const char *root, const char *rel, char *real, size_t cap, gt_error *err);

/* Rewrites msg (a NUL-terminated string in a buffer of cap bytes) with
 * every occurrence of real replaced by shown: a library's message about the
 * file it opened, told in the caller's terms.  Truncates to fit. */
void gt_path_scrub(char *msg, size_t cap, const char *real, const char *shown);

/* Reads the whole file at path into *out (malloc'd, *len bytes and a NUL
 * after them; free() it).  GT_EIO naming the path when it cannot be opened
 * or read, GT_ENOMEM when it does not fit in memory. */
int gt_path_read_all(const char *path, void **out, size_t *len, gt_error *err);

/* The same from a stream already open (stdin, say) to its end; name is
 * what an error calls it. */
int gt_path_read_stream(FILE *f, const char *name, void **out, size_t *len, gt_error *err);

#endif
