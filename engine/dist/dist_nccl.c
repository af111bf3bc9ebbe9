/* dist_nccl: one process per GPU over NCCL (dist.h).  Compiled only when
 * the CUDA build found NCCL (GIANT_HAVE_NCCL); dist.c has the stub that
 * says so otherwise.
 *
 * Every collective is enqueued on the CUDA backend's own stream, so it is
 * ordered after the backward pass that wrote the gradients and before the
 * optimizer that reads them, with no host synchronisation (the optimizer's
 * norm read-back synchronises anyway).  NCCL's all-reduce computes each
 * element once and forwards the result (ring: reduce-scatter then
 * all-gather; tree: reduce then broadcast), so every rank holds the same
 * bits.  Which algorithm NCCL picks depends on the topology and the size;
 * NCCL_ALGO=Ring NCCL_PROTO=Simple make the order the same from run to run
 * (bench/multigpu.sh sets them for its determinism check).
 *
 * The unique id goes through a file (rank 0 writes it to a temporary name
 * and renames it; the others poll until it is there): a folder every rank
 * sees, which `giant train --gpus N` makes in $TMPDIR and Slurm jobs put on
 * a shared file system. */
#include "dist_internal.h"
#include "gt_clock.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_backend.h"

typedef struct nccl_comm {
    dist_comm base;
    ncclComm_t comm;
    cudaStream_t stream;
    float *one;       /* one device float: the barrier's all-reduce */
} nccl_comm;

int dist_nccl_available(void) { return 1; }

static int nccl_fail(gt_error *err, const char *what, ncclResult_t r)
{
    return gt_error_set(err, r == ncclUnhandledCudaError ? GT_EDEVICE : GT_EIO, "nccl %s: %s",
                        what, ncclGetErrorString(r));
}

static int write_id(const char *path, const ncclUniqueId *id, gt_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return gt_error_set(err, GT_EINVAL, "nccl id path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return gt_error_set(err, GT_EIO, "nccl id: creating %s: %s", tmp, strerror(errno));
    int ok = fwrite(id, sizeof *id, 1, f) == 1;
    ok = (fflush(f) == 0) && ok && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return gt_error_set(err, GT_EIO, "nccl id: writing %s: %s", path, strerror(e));
    }
    return GT_OK;
}

static int read_id(const char *path, double timeout_s, ncclUniqueId *id, gt_error *err)
{
    double until = gt_clock_s() + timeout_s;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, 1, sizeof *id, f);
            fclose(f);
            if (got == sizeof *id)
                return GT_OK;
        }
        if (gt_clock_s() >= until)
            return gt_error_set(err, GT_ENOTFOUND,
                                "nccl id: %s did not appear within %.0f s (is rank 0 running, "
                                "and is the folder shared?)",
                                path, timeout_s);
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
}

static int nccl_allreduce(dist_comm *base, float *buf, size_t n, gt_error *err)
{
    nccl_comm *c = (nccl_comm *)base;
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, c->stream);
    return r == ncclSuccess ? GT_OK : nccl_fail(err, "all-reduce", r);
}

static int nccl_broadcast(dist_comm *base, void *buf, size_t bytes, int root, gt_error *err)
{
    nccl_comm *c = (nccl_comm *)base;
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->stream);
    return r == ncclSuccess ? GT_OK : nccl_fail(err, "broadcast", r);
}

static int nccl_barrier(dist_comm *base, gt_error *err)
{
    nccl_comm *c = (nccl_comm *)base;
    ncclResult_t r = ncclAllReduce(c->one, c->one, 1, ncclFloat32, ncclSum, c->comm, c->stream);
    if (r != ncclSuccess)
        return nccl_fail(err, "barrier", r);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return gt_error_set(err, GT_EDEVICE, "nccl barrier: %s", cudaGetErrorString(e));
    return GT_OK;
}

static void nccl_abort(dist_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    if (c->comm) {
        ncclCommAbort(c->comm);
        c->comm = NULL;
    }
}

static void nccl_destroy(dist_comm *base)
{
    nccl_comm *c = (nccl_comm *)base;
    if (c->comm) {
        cudaStreamSynchronize(c->stream);
        ncclCommDestroy(c->comm);
    }
    if (c->one)
        nn_free(base->b, c->one);
    free(c);
}

static const dist_ops nccl_ops = {"nccl", nccl_allreduce, nccl_broadcast, nccl_barrier,
                                  nccl_abort, nccl_destroy};

int dist_nccl_create(nn_backend *b, int rank, int size, const char *id_path, double timeout_s,
                     dist_comm **out, gt_error *err)
{
    *out = NULL;
    if (!b || !cuda_backend_is(b))
        return gt_error_set(err, GT_EINVAL, "dist nccl: needs a CUDA backend");
    if (size < 1 || size > DIST_MAX_RANKS || rank < 0 || rank >= size)
        return gt_error_set(err, GT_EINVAL, "dist nccl: rank %d of %d", rank, size);
    if (!id_path || !id_path[0])
        return gt_error_set(err, GT_EINVAL, "dist nccl: no file for the unique id");
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    c->base.ops = &nccl_ops;
    c->base.b = b;
    c->base.rank = rank;
    c->base.size = size;
    c->stream = (cudaStream_t)cuda_backend_stream(b);
    int rc;
    ncclUniqueId id;
    cudaError_t ce = cudaSetDevice(b->device);
    if (ce != cudaSuccess) {
        rc = gt_error_set(err, GT_EDEVICE, "dist nccl: cudaSetDevice(%d): %s", b->device,
                          cudaGetErrorString(ce));
        goto fail;
    }
    if ((rc = nn_alloc(b, 64, (void **)&c->one, err)) ||
        (rc = nn_memset(b, c->one, 0, 64, err)))
        goto fail;
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            rc = nccl_fail(err, "unique id", r);
            goto fail;
        }
        if ((rc = write_id(id_path, &id, err)))
            goto fail;
    } else if ((rc = read_id(id_path, timeout_s, &id, err))) {
        goto fail;
    }
    ncclResult_t r = ncclCommInitRank(&c->comm, size, id, rank);
    if (r != ncclSuccess) {
        c->comm = NULL;
        rc = nccl_fail(err, "init", r);
        goto fail;
    }
    *out = &c->base;
    return GT_OK;
fail:
    nccl_destroy(&c->base);
    return rc;
}
