/* loader: deterministic shuffling, train/validation split and batching.
 *
 * Data stays where the caller put it (pre-transformed, contiguous rows of
 * float).  The loader only deals out row indices; loader_gather copies the
 * rows of one batch into a caller-provided buffer, the single copy a batch
 * needs.  Everything is a pure function of the seed: the same seed gives the
 * same split and the same batch order, epoch after epoch. */
#ifndef LOADER_H
#define LOADER_H

#include <stdint.h>

#include "gt_error.h"

/* Splits rows 0..n-1 at random (seeded) into n_val validation rows
 * (round(n * val_fraction), at least 1 when 0 < val_fraction and n >= 2) and
 * the rest for training.  Both lists come back sorted ascending (free()). */
int loader_split(int64_t n, double val_fraction, uint64_t seed, int64_t **train,
                 int64_t *n_train, int64_t **val, int64_t *n_val, gt_error *err);

/* In-place Fisher-Yates shuffle driven by (seed, stream). */
void loader_shuffle(int64_t *idx, int64_t n, uint64_t seed, uint64_t stream);

typedef struct loader {
    const int64_t *rows; /* the pool (e.g. the training rows), borrowed   */
    int64_t n_rows;
    int64_t batch;
    uint64_t seed;
    int shuffle;         /* 0: pool order (validation), 1: reshuffle per epoch */
    int drop_last;       /* 1: skip an incomplete last batch                   */
    int64_t epoch;
    int64_t pos;
    int64_t *order;      /* owned: this epoch's permutation of rows            */
} loader;

int loader_init(loader *l, const int64_t *rows, int64_t n_rows, int64_t batch, uint64_t seed,
                int shuffle, int drop_last, gt_error *err);
void loader_free(loader *l);

/* Next batch: *idx points at `count` row indices (valid until the next
 * call).  Returns the count; 0 at the end of an epoch, after which the
 * next call starts epoch + 1 (reshuffled with stream = epoch). */
int64_t loader_next(loader *l, const int64_t **idx);

/* 1 when idx[0..n) are consecutive rows: the batch is then simply
 * src + idx[0] * dim and needs no gather (validation over a contiguous
 * pool, unshuffled). */
int loader_is_contiguous(const int64_t *idx, int64_t n);

/* Copies rows idx[0..n) of src (row length dim) into dst (n * dim). */
void loader_gather(const float *src, int dim, const int64_t *idx, int64_t n, float *dst);

#endif
