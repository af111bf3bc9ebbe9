/* calo_h5_internal: what the reader (calo_h5.c) and the writer
 * (calo_h5_write.c) of CaloChallenge HDF5 files share.  Internal to
 * engine/data. */
#ifndef CALO_H5_INTERNAL_H
#define CALO_H5_INTERNAL_H

#include <stdint.h>

#include <hdf5.h>

#include "gt_error.h"

/* The Debian libhdf5 is built without thread safety: every call into it
 * holds one process-wide (recursive) lock, taken here (which also keeps
 * HDF5 from printing its error stack on the calling thread). */
void calo_h5_lock(void);
void calo_h5_unlock(void);

/* Sets err (code) to "what path: HDF5's outermost message (innermost)"
 * from HDF5's current error stack, and clears the stack. */
int calo_h5_fail(gt_error *err, int code, const char *what, const char *path);

/* The rows [row0, row0 + n) of a 2-D dataset `width` wide: the selection in
 * the file (*fspace) and a matching memory space (*mspace).  Negative on
 * failure; either way the caller closes both with calo_h5_close_rows. */
herr_t calo_h5_select_rows(hid_t ds, int64_t row0, int64_t n, int64_t width, hid_t *fspace,
                           hid_t *mspace);
void calo_h5_close_rows(hid_t fspace, hid_t mspace);

#endif
