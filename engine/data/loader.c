/* loader: seeded split, shuffle and batches of row indices. */
#include "loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#define LOADER_STREAM_SPLIT 0x53504c4954000000ULL

void loader_shuffle(int64_t *idx, int64_t n, uint64_t seed, uint64_t stream)
{
    rng_state r = rng_init(seed, stream);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_next_below(&r, (uint64_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

int loader_split(int64_t n, double val_fraction, uint64_t seed, int64_t **train,
                 int64_t *n_train, int64_t **val, int64_t *n_val, gt_error *err)
{
    *train = *val = NULL;
    *n_train = *n_val = 0;
    if (n < 1)
        return gt_error_set(err, GT_EINVAL, "split: no rows");
    if (!(val_fraction >= 0 && val_fraction < 1))
        return gt_error_set(err, GT_EINVAL, "split: validation fraction %g outside [0, 1)",
                            val_fraction);
    int64_t nv = (int64_t)llround(val_fraction * (double)n);
    if (val_fraction > 0 && nv < 1 && n >= 2)
        nv = 1;
    if (nv >= n)
        nv = n - 1;
    int64_t *perm = malloc(n * sizeof *perm);
    char *is_val = calloc(n, 1);
    int64_t *t = malloc((n - nv > 0 ? n - nv : 1) * sizeof *t);
    int64_t *v = malloc((nv > 0 ? nv : 1) * sizeof *v);
    if (!perm || !is_val || !t || !v) {
        free(perm);
        free(is_val);
        free(t);
        free(v);
        return gt_error_set(err, GT_ENOMEM, "split: out of memory for %lld rows", (long long)n);
    }
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    loader_shuffle(perm, n, seed ^ LOADER_STREAM_SPLIT, 0);
    for (int64_t i = 0; i < nv; i++)
        is_val[perm[i]] = 1;
    int64_t a = 0, b = 0;
    /* sorted lists: reading the rows in file order is kinder to caches */
    for (int64_t i = 0; i < n; i++) {
        if (is_val[i])
            v[b++] = i;
        else
            t[a++] = i;
    }
    free(perm);
    free(is_val);
    *train = t;
    *n_train = a;
    *val = v;
    *n_val = b;
    return GT_OK;
}

int loader_init(loader *l, const int64_t *rows, int64_t n_rows, int64_t batch, uint64_t seed,
                int shuffle, int drop_last, gt_error *err)
{
    memset(l, 0, sizeof *l);
    if (!rows || n_rows < 1)
        return gt_error_set(err, GT_EINVAL, "loader: no rows");
    if (batch < 1)
        return gt_error_set(err, GT_EINVAL, "loader: batch size %lld < 1", (long long)batch);
    if (drop_last && batch > n_rows)
        return gt_error_set(err, GT_EINVAL, "loader: batch %lld larger than the %lld rows "
                            "with drop_last", (long long)batch, (long long)n_rows);
    l->order = malloc(n_rows * sizeof *l->order);
    if (!l->order)
        return gt_error_set(err, GT_ENOMEM, "loader: out of memory");
    l->rows = rows;
    l->n_rows = n_rows;
    l->batch = batch;
    l->seed = seed;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->epoch = -1;
    l->pos = n_rows; /* the first call starts epoch 0 */
    return GT_OK;
}

void loader_free(loader *l)
{
    if (l) {
        free(l->order);
        l->order = NULL;
    }
}

static void loader_start_epoch(loader *l)
{
    l->epoch++;
    l->pos = 0;
    memcpy(l->order, l->rows, l->n_rows * sizeof *l->order);
    if (l->shuffle)
        loader_shuffle(l->order, l->n_rows, l->seed, (uint64_t)l->epoch);
}

int64_t loader_next(loader *l, const int64_t **idx)
{
    int64_t left = l->n_rows - l->pos;
    if (left <= 0 || (l->drop_last && left < l->batch)) {
        int ended = l->epoch >= 0;
        loader_start_epoch(l);
        if (ended) {
            *idx = NULL;
            return 0;
        }
        left = l->n_rows;
    }
    int64_t n = left < l->batch ? left : l->batch;
    *idx = l->order + l->pos;
    l->pos += n;
    return n;
}

int loader_is_contiguous(const int64_t *idx, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        if (idx[i] != idx[0] + i)
            return 0;
    return n > 0;
}

void loader_gather(const float *src, int dim, const int64_t *idx, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * (int64_t)dim, src + idx[i] * (int64_t)dim, (size_t)dim * sizeof *dst);
}
