/* engine/dist's NCCL communicator on real GPUs (built only when the CUDA
 * build found NCCL; skipped, exit 77, without a GPU):
 *
 *  - one rank on GPU 0: all-reduce leaves the buffer as it is, broadcast and
 *    barrier return;
 *  - with two or more GPUs, two processes (one per GPU) exchanging the unique
 *    id through a file: the all-reduce gives both the same bits, equal to
 *    the two-term sum; a broadcast from rank 1 arrives on rank 0.
 *
 * Every CUDA call happens in a forked child: the parent never initialises
 * CUDA, which a child of it could not use. */
#include "check.h"
#include "cuda_backend.h"
#include "cuda_devices.h"
#include "dist.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 100000

static int gpu_count(void)
{
    gt_device_info d[16];
    int n = 0;
    gt_error err;
    if (cuda_devices_query(d, 16, &n, &err) != GT_OK)
        return 0;
    return n;
}

/* One rank; exit status 0 on success. */
static int rank_main(int rank, int size, const char *id_path)
{
    gt_error err;
    nn_backend *b = NULL;
    dist_comm *c = NULL;
    if (cuda_backend_create(rank, &b, &err) ||
        dist_nccl_create(b, rank, size, id_path, 60.0, &c, &err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        return 10;
    }
    float *h = malloc(N * sizeof(float)), *d = NULL;
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 101) * 0.1f + (float)rank * 1e-3f;
    if (nn_alloc(b, N * sizeof(float), (void **)&d, &err) ||
        nn_copy_h2d(b, d, h, N * sizeof(float), &err) ||
        dist_allreduce_sum(c, d, N, &err) || nn_copy_d2h(b, h, d, N * sizeof(float), &err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        return 11;
    }
    for (int i = 0; i < N; i++) {
        float e = (float)(i % 101) * 0.1f;
        if (size == 2) {
            volatile float a = e, b1 = e + 1e-3f;
            e = a + b1;
        }
        if (memcmp(&h[i], &e, sizeof e) != 0) {
            fprintf(stderr, "rank %d element %d: %.9g, not %.9g\n", rank, i, h[i], e);
            return 12;
        }
    }
    int root = size - 1, v = rank == root ? 4242 : -1;
    int *dv = NULL;
    if (nn_alloc(b, sizeof v, (void **)&dv, &err) || nn_copy_h2d(b, dv, &v, sizeof v, &err) ||
        dist_broadcast(c, dv, sizeof v, root, &err) || nn_copy_d2h(b, &v, dv, sizeof v, &err) ||
        dist_barrier(c, &err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        return 13;
    }
    if (v != 4242)
        return 14;
    nn_free(b, d);
    nn_free(b, dv);
    free(h);
    dist_destroy(c);
    nn_backend_close(b);
    return 0;
}

static void run_group(int size)
{
    char dir[] = "/tmp/giant-test-nccl.XXXXXX", id[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(id, sizeof id, "%s/id", dir);
    pid_t pid[2];
    for (int r = 0; r < size; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(r, size, id));
    }
    for (int r = 0; r < size; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%d ranks: rank %d status %d", size, r,
                  st);
    }
    unlink(id);
    rmdir(dir);
    printf("nccl: %d rank(s): all-reduce, broadcast and barrier ok\n", size);
}

int main(void)
{
    CHECK(dist_nccl_available());
    /* the device count, in a child (it initialises CUDA) */
    pid_t p = fork();
    if (p == 0)
        _exit(gpu_count() > 9 ? 9 : gpu_count());
    int st = 0;
    waitpid(p, &st, 0);
    int gpus = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
    if (gpus == 0)
        check_skip("no CUDA device: the NCCL communicator was built and linked, not run");
    run_group(1);
    if (gpus >= 2)
        run_group(2);
    else
        printf("NOTE: one GPU: the two-rank NCCL test needs two (bench/multigpu.sh)\n");
    return check_finish();
}
