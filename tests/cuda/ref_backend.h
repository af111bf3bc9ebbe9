/* ref_backend: a naive host implementation of the nn_backend vtable (plain
 * loops over nn_math.h), the reference the GPU is compared with where the
 * CPU backend (giant_nn, which needs OpenBLAS and oneDNN) cannot be built,
 * e.g. on a GPU machine without those libraries.  Test code only: no
 * threads, no blocking, no speed. */
#ifndef REF_BACKEND_H
#define REF_BACKEND_H

#include "gt_error.h"
#include "nn_backend.h"

int ref_backend_create(nn_backend **out, gt_error *err);

#endif
