/* dist.c: the checked entry points of dist.h, the one-rank implementation,
 * the environment of a launched rank, and batch sharding. */
#include "dist_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int dist_rank(const dist_comm *c) { return c ? c->rank : 0; }
int dist_size(const dist_comm *c) { return c ? c->size : 1; }
const char *dist_kind(const dist_comm *c) { return c ? c->ops->kind : "local"; }

int dist_allreduce_sum(dist_comm *c, float *buf, size_t n, gt_error *err)
{
    if (!c || c->size == 1 || n == 0)
        return GT_OK;
    if (!buf)
        return gt_error_set(err, GT_EINVAL, "dist_allreduce_sum: NULL buffer of %zu floats", n);
    return c->ops->allreduce_sum(c, buf, n, err);
}

int dist_broadcast(dist_comm *c, void *buf, size_t bytes, int root, gt_error *err)
{
    int size = dist_size(c);
    if (root < 0 || root >= size)
        return gt_error_set(err, GT_EINVAL, "dist_broadcast: root %d is not a rank of %d", root,
                            size);
    if (!c || size == 1 || bytes == 0)
        return GT_OK;
    if (!buf)
        return gt_error_set(err, GT_EINVAL, "dist_broadcast: NULL buffer of %zu bytes", bytes);
    return c->ops->broadcast(c, buf, bytes, root, err);
}

int dist_barrier(dist_comm *c, gt_error *err)
{
    if (!c || c->size == 1)
        return GT_OK;
    return c->ops->barrier(c, err);
}

void dist_abort(dist_comm *c)
{
    if (c && c->ops->abort)
        c->ops->abort(c);
}

void dist_destroy(dist_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

/* ---- local: one rank ---------------------------------------------------- */

static void local_destroy(dist_comm *c) { free(c); }

static const dist_ops local_ops = {"local", NULL, NULL, NULL, NULL, local_destroy};

int dist_local_create(nn_backend *b, dist_comm **out, gt_error *err)
{
    *out = NULL;
    dist_comm *c = calloc(1, sizeof *c);
    if (!c)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    c->ops = &local_ops;
    c->b = b;
    c->rank = 0;
    c->size = 1;
    *out = c;
    return GT_OK;
}

/* ---- the environment ---------------------------------------------------- */

/* *out = the variable's value as an int in [lo, hi]; 0 when unset, 1 when
 * set and good, an error when set and bad. */
static int env_int(const char *name, int lo, int hi, int *out, int *found, gt_error *err)
{
    const char *v = getenv(name);
    *found = 0;
    if (!v)
        return GT_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || errno || x < lo || x > hi)
        return gt_error_set(err, GT_EINVAL, "%s='%s': not an integer in [%d, %d]", name, v, lo,
                            hi);
    *out = (int)x;
    *found = 1;
    return GT_OK;
}

static int env_triplet(const char *rank_v, const char *size_v, const char *local_v,
                       dist_env *out, int *found, gt_error *err)
{
    int fr, fs, fl, rank = 0, size = 1, local = 0;
    GT_TRY(env_int(size_v, 1, DIST_MAX_RANKS, &size, &fs, err));
    GT_TRY(env_int(rank_v, 0, DIST_MAX_RANKS - 1, &rank, &fr, err));
    GT_TRY(env_int(local_v, 0, DIST_MAX_RANKS - 1, &local, &fl, err));
    *found = fs || fr;
    if (!*found)
        return GT_OK;
    if (!fs || !fr)
        return gt_error_set(err, GT_EINVAL, "%s and %s go together: only %s is set", rank_v,
                            size_v, fs ? size_v : rank_v);
    if (rank >= size)
        return gt_error_set(err, GT_EINVAL, "%s=%d is not a rank of %s=%d", rank_v, rank, size_v,
                            size);
    out->rank = rank;
    out->size = size;
    out->local_rank = fl ? local : rank;
    return GT_OK;
}

int dist_env_read(dist_env *out, gt_error *err)
{
    int found;
    memset(out, 0, sizeof *out);
    out->size = 1;
    out->from = "none";
    GT_TRY(env_triplet("GIANT_RANK", "GIANT_WORLD_SIZE", "GIANT_LOCAL_RANK", out, &found, err));
    if (found) {
        out->from = "giant";
        return GT_OK;
    }
    GT_TRY(env_triplet("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", out, &found, err));
    if (found)
        out->from = "slurm";
    return GT_OK;
}

int dist_shard(int batch, int rank, int size, int *lo, int *n, gt_error *err)
{
    if (size < 1 || rank < 0 || rank >= size)
        return gt_error_set(err, GT_EINVAL, "rank %d of %d", rank, size);
    if (batch < 1 || batch % size != 0)
        return gt_error_set(err, GT_EINVAL,
                            "train.batch %d is not a multiple of the %d ranks: every rank "
                            "takes the same share of a batch",
                            batch, size);
    *n = batch / size;
    *lo = rank * *n;
    return GT_OK;
}

int dist_open(const dist_spec *spec, nn_backend *b, dist_comm **out, gt_error *err)
{
    *out = NULL;
    if (!spec || !b)
        return gt_error_set(err, GT_EINVAL, "dist_open: NULL spec or backend");
    if (spec->size < 1 || spec->size > DIST_MAX_RANKS || spec->rank < 0 ||
        spec->rank >= spec->size)
        return gt_error_set(err, GT_EINVAL, "dist_open: rank %d of %d", spec->rank, spec->size);
    if (spec->size == 1)
        return dist_local_create(b, out, err);
    const char *kind = spec->kind && spec->kind[0] ? spec->kind : "auto";
    int cuda = strcmp(b->name, "cuda") == 0;
    if (strcmp(kind, "auto") == 0)
        kind = cuda ? "nccl" : "shm";
    if (!spec->id || !spec->id[0])
        return gt_error_set(err, GT_EINVAL, "dist_open: %s ranks need the group's id "
                            "(GIANT_DIST_ID or --dist-id)", kind);
    if (strcmp(kind, "nccl") == 0) {
        if (!cuda)
            return gt_error_set(err, GT_EINVAL, "dist_open: nccl needs a CUDA device, not %s",
                                b->name);
        return dist_nccl_create(b, spec->rank, spec->size, spec->id, spec->timeout_s, out, err);
    }
    if (strcmp(kind, "shm") == 0)
        return dist_shm_attach(spec->id, spec->rank, spec->size, b, spec->timeout_s, out, err);
    return gt_error_set(err, GT_EINVAL, "dist_open: unknown kind '%s' (shm, nccl or auto)", kind);
}

#ifndef GIANT_HAVE_NCCL
int dist_nccl_available(void) { return 0; }

int dist_nccl_create(nn_backend *b, int rank, int size, const char *id_path, double timeout_s,
                     dist_comm **out, gt_error *err)
{
    (void)b;
    (void)rank;
    (void)size;
    (void)id_path;
    (void)timeout_s;
    *out = NULL;
    return gt_error_set(err, GT_EUNSUPPORTED,
                        "this build has no NCCL (a CUDA build with nccl.h and libnccl): "
                        "multi-GPU training is not available");
}
#endif
