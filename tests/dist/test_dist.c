/* engine/dist on the CPU backend:
 *
 *  - the one-rank communicator (and NULL) leaves buffers alone;
 *  - shm between threads: all-reduce in rank order, bit-identical on every
 *    rank, over several chunks of a slot with a ragged last one; values
 *    chosen so that any other order gives other bits; broadcast from every
 *    root; barriers;
 *  - shm between forked processes (anonymous) and between processes that
 *    attach by name;
 *  - a rank that aborts makes the others' collectives fail instead of
 *    waiting, and so does a member process that is gone;
 *  - bad arguments: group sizes, ranks, a rank joining twice, names, roots,
 *    sharding, the environment of a launched rank;
 *  - NCCL: unavailable in this build (GT_EUNSUPPORTED) or refusing a CPU
 *    backend (tests/dist/test_dist_nccl.c runs it on GPUs). */
#include "check.h"
#include "cpu_backend.h"
#include "dist.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_ELEM 1000   /* 1000 floats through 64-float slots: 16 chunks, the last of 40 */
#define SLOT 64
#define RANKS 3

/* Rank r's buffer: magnitudes that cancel, so that the sum's bits depend on
 * the order of the additions. */
static float value(int r, int i)
{
    static const float big[RANKS] = {1e8f, -1e8f, 1.0f};
    float sign = (i % 2) ? -1.0f : 1.0f;
    return sign * big[r] + 0.37f * (float)(i % 17) * (float)(r + 1);
}

/* The rank-order sum ((v0 + v1) + v2), in volatile steps so the compiler
 * keeps the order. */
static float expect(int i)
{
    volatile float s = value(0, i);
    for (int r = 1; r < RANKS; r++)
        s = s + value(r, i);
    return s;
}

typedef struct rank_arg {
    dist_shm_group *g;
    int rank;
    int fail_at;      /* -1, or abort before this collective */
    int rc;           /* first failure */
    float *out;       /* [N_ELEM] the all-reduce result (backend memory) */
    unsigned char bc[3][300];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    gt_error err;
    nn_backend *b = NULL;
    dist_comm *c = NULL;
    a->rc = cpu_backend_create(&b, &err);
    if (!a->rc)
        a->rc = dist_shm_join(a->g, a->rank, b, &c, &err);
    if (a->rc) {
        fprintf(stderr, "rank %d: %s\n", a->rank, err.message);
        dist_shm_group_abort(a->g);
        nn_backend_close(b);
        return NULL;
    }
    if (a->fail_at == 0) {
        dist_abort(c);
        a->rc = GT_ECANCELLED;
        goto out;
    }
    float *buf = NULL;
    a->rc = nn_alloc(b, N_ELEM * sizeof(float), (void **)&buf, &err);
    for (int i = 0; !a->rc && i < N_ELEM; i++)
        buf[i] = value(a->rank, i);
    if (!a->rc)
        a->rc = dist_allreduce_sum(c, buf, N_ELEM, &err);
    if (!a->rc)
        memcpy(a->out, buf, N_ELEM * sizeof(float));
    nn_free(b, buf);
    /* broadcast from every root, through backend memory */
    for (int root = 0; !a->rc && root < RANKS; root++) {
        unsigned char *d = NULL;
        a->rc = nn_alloc(b, 300, (void **)&d, &err);
        for (int i = 0; !a->rc && i < 300; i++)
            d[i] = (unsigned char)(a->rank == root ? (i * 7 + root) : 0xee);
        if (!a->rc)
            a->rc = dist_broadcast(c, d, 300, root, &err);
        if (!a->rc)
            memcpy(a->bc[root], d, 300);
        nn_free(b, d);
    }
    for (int k = 0; !a->rc && k < 5; k++)
        a->rc = dist_barrier(c, &err);
out:
    dist_destroy(c);
    nn_backend_close(b);
    return NULL;
}

/* RANKS threads of rank_main on a new group, rank fail (-1: none)
 * aborting before its first collective; a[r] holds rank r's results and
 * out[r] its sums. */
static void run_ranks(rank_arg a[RANKS], float (*out)[N_ELEM], int fail)
{
    gt_error err;
    dist_shm_group *g = NULL;
    CHECK_EQ_INT(dist_shm_group_create(RANKS, SLOT, &g, &err), GT_OK);
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].g = g;
        a[r].rank = r;
        a[r].fail_at = r == fail ? 0 : -1;
        a[r].out = out[r];
        CHECK(pthread_create(&th[r], NULL, rank_main, &a[r]) == 0);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(th[r], NULL);
    dist_shm_group_destroy(g);
}

static void test_threads(void)
{
    rank_arg a[RANKS];
    static float out[RANKS][N_ELEM];
    run_ranks(a, out, -1);
    int wrong = 0, other_order = 0;
    for (int r = 0; r < RANKS; r++)
        CHECK_EQ_INT(a[r].rc, GT_OK);
    for (int i = 0; i < N_ELEM; i++) {
        float e = expect(i);
        volatile float rv = value(2, i);
        rv = rv + value(1, i);
        rv = rv + value(0, i);
        float rev = rv;
        other_order += memcmp(&rev, &e, sizeof e) != 0;
        for (int r = 0; r < RANKS; r++)
            wrong += memcmp(&out[r][i], &e, sizeof e) != 0;
    }
    /* the check has teeth: the reverse order gives other bits for many */
    CHECK_MSG(other_order > N_ELEM / 4, "only %d of %d sums depend on the order", other_order,
              N_ELEM);
    CHECK_MSG(wrong == 0, "%d of %d results differ from the rank-order sum", wrong,
              RANKS * N_ELEM);
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0 && memcmp(out[0], out[2], sizeof out[0]) == 0);
    for (int root = 0; root < RANKS; root++)
        for (int r = 0; r < RANKS; r++)
            for (int i = 0; i < 300; i++)
                if (a[r].bc[root][i] != (unsigned char)(i * 7 + root)) {
                    CHECK_MSG(0, "broadcast from %d: rank %d byte %d is %d", root, r, i,
                              a[r].bc[root][i]);
                    i = 300;
                }
    printf("shm threads: %d ranks, %d floats in %d-float chunks: rank-order sums on every rank "
           "(%d of them differ in the reverse order)\n",
           RANKS, N_ELEM, SLOT, other_order);
}

/* Rank 1 aborts before its first collective: the others fail, promptly. */
static void test_abort(void)
{
    rank_arg a[RANKS];
    static float out[RANKS][N_ELEM];
    run_ranks(a, out, 1);
    for (int r = 0; r < RANKS; r++)
        CHECK_EQ_INT(a[r].rc, GT_ECANCELLED);
}

/* A process rank: exit status 0 when its all-reduce gave the rank-order sums. */
/* b: the parent's backend, made before the fork (a forked child of a
 * process that ran OpenMP regions must not start its own: libgomp is not
 * fork-safe; the CPU backend's copies are plain memcpy). */
static int process_rank(nn_backend *b, dist_shm_group *g, const char *name, int rank)
{
    gt_error err;
    dist_comm *c = NULL;
    int rc = g ? dist_shm_join(g, rank, b, &c, &err)
               : dist_shm_attach(name, rank, RANKS, b, 10.0, &c, &err);
    if (rc) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        return 11;
    }
    float *buf = NULL;
    if (nn_alloc(b, N_ELEM * sizeof(float), (void **)&buf, &err))
        return 12;
    for (int i = 0; i < N_ELEM; i++)
        buf[i] = value(rank, i);
    if (dist_allreduce_sum(c, buf, N_ELEM, &err))
        return 13;
    for (int i = 0; i < N_ELEM; i++) {
        float e = expect(i);
        if (memcmp(&buf[i], &e, sizeof e) != 0)
            return 14;
    }
    if (dist_barrier(c, &err))
        return 15;
    nn_free(b, buf);
    dist_destroy(c);
    return 0;
}

static void test_processes(int named)
{
    gt_error err;
    dist_shm_group *g = NULL;
    char name[64];
    snprintf(name, sizeof name, "/giant-test-dist-%ld", (long)getpid());
    if (named)
        CHECK_EQ_INT(dist_shm_group_create_named(name, RANKS, SLOT, &g, &err), GT_OK);
    else
        CHECK_EQ_INT(dist_shm_group_create(RANKS, SLOT, &g, &err), GT_OK);
    if (!g)
        return;
    nn_backend *pb = NULL;
    CHECK_EQ_INT(cpu_backend_create(&pb, &err), GT_OK);
    pid_t pid[RANKS];
    for (int r = 0; r < RANKS; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(process_rank(pb, named ? NULL : g, name, r));
    }
    for (int r = 0; r < RANKS; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s process rank %d: status %d",
                  named ? "named" : "forked", r, st);
    }
    if (named) {
        /* a second group of the same name is refused while this one lives */
        dist_shm_group *g2 = NULL;
        CHECK_EQ_INT(dist_shm_group_create_named(name, RANKS, SLOT, &g2, &err), GT_EIO);
    }
    nn_backend_close(pb);
    dist_shm_group_destroy(g);
    if (named) {
        /* unlinked: attaching now times out with the name */
        nn_backend *b = NULL;
        dist_comm *c = NULL;
        CHECK_EQ_INT(cpu_backend_create(&b, &err), GT_OK);
        CHECK_EQ_INT(dist_shm_attach(name, 0, RANKS, b, 0.1, &c, &err), GT_ENOTFOUND);
        CHECK(strstr(err.message, name) != NULL);
        nn_backend_close(b);
    }
}

/* A member process that is gone (here: joined, then exited and was reaped)
 * turns the next barrier into an error within about a second. */
static void test_member_gone(void)
{
    gt_error err;
    dist_shm_group *g = NULL;
    CHECK_EQ_INT(dist_shm_group_create(2, SLOT, &g, &err), GT_OK);
    nn_backend *b = NULL;
    CHECK_EQ_INT(cpu_backend_create(&b, &err), GT_OK);
    pid_t pid = fork();
    if (pid == 0) {
        dist_comm *c = NULL;
        _exit(dist_shm_join(g, 1, b, &c, &err) ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    dist_comm *c = NULL;
    CHECK_EQ_INT(dist_shm_join(g, 0, b, &c, &err), GT_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(dist_barrier(c, &err), GT_ECANCELLED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK_MSG(strstr(err.message, "rank 1") != NULL, "%s", err.message);
    CHECK_MSG(s < 5.0, "noticed after %.1f s", s);
    /* and the group stays failed */
    float x = 1.0f;
    CHECK_EQ_INT(dist_allreduce_sum(c, &x, 1, &err), GT_ECANCELLED);
    dist_destroy(c);
    nn_backend_close(b);
    dist_shm_group_destroy(g);
}

static void set_env(const char *k, const char *v)
{
    if (v)
        setenv(k, v, 1);
    else
        unsetenv(k);
}

static void test_env(void)
{
    const char *vars[] = {"GIANT_RANK", "GIANT_WORLD_SIZE", "GIANT_LOCAL_RANK", "SLURM_PROCID",
                          "SLURM_NTASKS", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    gt_error err;
    dist_env e;
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_OK);
    CHECK(e.rank == 0 && e.size == 1 && strcmp(e.from, "none") == 0);
    set_env("SLURM_PROCID", "3");
    set_env("SLURM_NTASKS", "8");
    set_env("SLURM_LOCALID", "1");
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_OK);
    CHECK(e.rank == 3 && e.size == 8 && e.local_rank == 1 && strcmp(e.from, "slurm") == 0);
    /* giant's own variables win over Slurm's */
    set_env("GIANT_RANK", "1");
    set_env("GIANT_WORLD_SIZE", "2");
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_OK);
    CHECK(e.rank == 1 && e.size == 2 && e.local_rank == 1 && strcmp(e.from, "giant") == 0);
    set_env("GIANT_RANK", "2");
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_EINVAL);
    CHECK(strstr(err.message, "GIANT_RANK=2") != NULL);
    set_env("GIANT_RANK", "x1");
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_EINVAL);
    set_env("GIANT_RANK", NULL);
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_EINVAL); /* size without rank */
    CHECK(strstr(err.message, "only GIANT_WORLD_SIZE") != NULL);
    set_env("GIANT_WORLD_SIZE", "65");
    set_env("GIANT_RANK", "0");
    CHECK_EQ_INT(dist_env_read(&e, &err), GT_EINVAL);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_bad_arguments(void)
{
    gt_error err;
    nn_backend *b = NULL;
    CHECK_EQ_INT(cpu_backend_create(&b, &err), GT_OK);
    dist_shm_group *g = NULL;
    CHECK_EQ_INT(dist_shm_group_create(0, 0, &g, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_group_create(DIST_MAX_RANKS + 1, 0, &g, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_group_create(2, 10, &g, &err), GT_EINVAL); /* not a multiple of 16 */
    CHECK_EQ_INT(dist_shm_group_create_named("no-slash", 2, 0, &g, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_group_create_named("/a/b", 2, 0, &g, &err), GT_EINVAL);
    CHECK(g == NULL);
    CHECK_EQ_INT(dist_shm_group_create(2, SLOT, &g, &err), GT_OK);
    dist_comm *c = NULL, *c2 = NULL;
    CHECK_EQ_INT(dist_shm_join(g, 2, b, &c, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_join(g, -1, b, &c, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_join(g, 0, NULL, &c, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_shm_join(g, 0, b, &c, &err), GT_OK);
    CHECK_EQ_INT(dist_shm_join(g, 0, b, &c2, &err), GT_EINVAL);
    CHECK(strstr(err.message, "joined already") != NULL);
    CHECK(dist_rank(c) == 0 && dist_size(c) == 2 && strcmp(dist_kind(c), "shm") == 0);
    char x[4] = {0};
    CHECK_EQ_INT(dist_broadcast(c, x, 4, 2, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_broadcast(c, x, 4, -1, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_allreduce_sum(c, NULL, 4, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_allreduce_sum(c, NULL, 0, &err), GT_OK); /* nothing to do */
    dist_destroy(c);
    dist_shm_group_destroy(g);

    /* one rank: NULL and the local communicator leave buffers alone */
    float v[3] = {1.5f, -2.0f, 3.25f};
    CHECK_EQ_INT(dist_allreduce_sum(NULL, v, 3, &err), GT_OK);
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f);
    CHECK(dist_rank(NULL) == 0 && dist_size(NULL) == 1 && strcmp(dist_kind(NULL), "local") == 0);
    CHECK_EQ_INT(dist_local_create(b, &c, &err), GT_OK);
    CHECK_EQ_INT(dist_allreduce_sum(c, v, 3, &err), GT_OK);
    CHECK_EQ_INT(dist_broadcast(c, v, sizeof v, 0, &err), GT_OK);
    CHECK_EQ_INT(dist_broadcast(c, v, sizeof v, 1, &err), GT_EINVAL);
    CHECK_EQ_INT(dist_barrier(c, &err), GT_OK);
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f);
    CHECK(dist_size(c) == 1 && strcmp(dist_kind(c), "local") == 0);
    dist_abort(c);
    dist_abort(NULL);
    dist_destroy(c);
    dist_destroy(NULL);

    /* sharding */
    int lo = -1, n = -1;
    CHECK_EQ_INT(dist_shard(128, 1, 4, &lo, &n, &err), GT_OK);
    CHECK(lo == 32 && n == 32);
    CHECK_EQ_INT(dist_shard(100, 0, 3, &lo, &n, &err), GT_EINVAL);
    CHECK(strstr(err.message, "not a multiple of the 3 ranks") != NULL);
    CHECK_EQ_INT(dist_shard(128, 4, 4, &lo, &n, &err), GT_EINVAL);

    /* dist_open: one rank is the local communicator; a group needs an id
     * and a known kind; nccl needs a CUDA backend */
    dist_spec sp = {"shm", NULL, 0, 1, 0.1};
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_OK);
    CHECK(strcmp(dist_kind(c), "local") == 0);
    dist_destroy(c);
    sp.size = 2;
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_EINVAL);
    CHECK(strstr(err.message, "GIANT_DIST_ID") != NULL);
    sp.id = "/giant-test-no-such-group";
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_ENOTFOUND);
    sp.kind = "mpi";
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_EINVAL);
    CHECK(strstr(err.message, "unknown kind 'mpi'") != NULL);
    sp.kind = "nccl";
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_EINVAL);
    CHECK(strstr(err.message, "CUDA") != NULL);
    sp.rank = 2;
    CHECK_EQ_INT(dist_open(&sp, b, &c, &err), GT_EINVAL);

    /* NCCL: not in this build, or not on a CPU backend */
    CHECK_EQ_INT(dist_nccl_create(b, 0, 1, "/nonexistent/id", 1.0, &c, &err),
                 dist_nccl_available() ? GT_EINVAL : GT_EUNSUPPORTED);
    printf("nccl in this build: %s (%s)\n", dist_nccl_available() ? "yes" : "no", err.message);
    nn_backend_close(b);
}

static double t_start;

static void lap(const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (what)
        printf("  %-22s %.2f s\n", what, t - t_start);
    t_start = t;
}

int main(void)
{
    lap(NULL);
    test_bad_arguments();
    lap("bad arguments");
    test_env();
    test_threads();
    lap("threads");
    test_abort();
    lap("abort");
    test_processes(0);
    lap("forked processes");
    test_processes(1);
    lap("named processes");
    test_member_gone();
    lap("member gone");
    return check_finish();
}
