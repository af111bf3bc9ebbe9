/* dist_shm: ranks on one machine over one shared mapping (dist.h).
 *
 * Layout: header | slot 0 | ... | slot size-1 | result slot, each slot
 * slot_floats floats (64-byte aligned).  One collective moves a buffer in
 * chunks of a slot:
 *
 *   all-reduce: each rank copies its chunk into its slot; barrier; each rank
 *               sums its share of the elements over the slots in rank order
 *               into the result slot; barrier; each rank copies the result
 *               back.  The next chunk's first barrier keeps the result slot
 *               from being overwritten before every rank has read it.
 *   broadcast:  root copies into its own slot; barrier; the others copy
 *               out; barrier.
 *
 * Why the order is fixed: element i of the result is always
 * ((slot0[i] + slot1[i]) + slot2[i]) + ..., whichever rank computes it and
 * whenever, and every rank copies the same result bytes.  The file is built
 * with -ffp-contract=off like the engine core (no fused adds to worry about,
 * but the rule is the same everywhere sums must not move).
 *
 * The barrier is a sense-reversing counter barrier on atomics in the
 * mapping, and nothing else: no mutex or condition variable, because a
 * process killed inside pthread_cond_wait can leave a process-shared
 * condition variable's internal lock taken forever (seen: SIGKILL of one
 * rank left the other stuck in __condvar_acquire_lock), while an atomic
 * counter cannot be left half-updated.  A waiter spins with sched_yield,
 * then sleeps in steps up to 1 ms; every 200 ms it checks whether a member
 * process or the group's creator is gone (kill(pid, 0) == ESRCH).  The
 * launcher also sets the abort flag when it reaps a failed rank. */
#include "dist_internal.h"
#include "gt_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x67696d73686d3031ull /* "gimshm01" */
#define SHM_DEFAULT_SLOT ((size_t)1 << 20)
#define SHM_ALIGN 64

struct dist_shm_group {
    /* written once by the creator, before anyone else looks */
    uint64_t magic;   /* set last (release): an attacher waits for it */
    int size;
    size_t slot_floats;
    size_t map_bytes;
    char name[64];    /* "" = anonymous */
    pid_t creator;    /* a named group's creator (the launcher); 0 = anonymous */
    /* atomics (__atomic builtins, sequentially consistent) */
    unsigned long generation;
    int arrived;
    int aborted;
    int pid[DIST_MAX_RANKS]; /* 0 = not joined yet */
};

typedef struct shm_comm {
    dist_comm base;
    dist_shm_group *g;
    int owns_map;     /* attached by name: unmap on destroy */
} shm_comm;

static size_t header_bytes(void)
{
    return (sizeof(dist_shm_group) + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
}

static float *slot(dist_shm_group *g, int i)
{
    return (float *)((char *)g + header_bytes()) + (size_t)i * g->slot_floats;
}

static int map_size(int size, size_t slot_floats, size_t *bytes, gt_error *err)
{
    size_t per = slot_floats * sizeof(float);
    if (slot_floats > ((size_t)1 << 28) || per % SHM_ALIGN != 0)
        return gt_error_set(err, GT_EINVAL,
                            "dist shm: slot of %zu floats (a multiple of 16, at most 2^28)",
                            slot_floats);
    *bytes = header_bytes() + (size_t)(size + 1) * per;
    return GT_OK;
}

static int init_header(dist_shm_group *g, int size, size_t slot_floats, size_t bytes,
                       const char *name, gt_error *err)
{
    (void)err;
    g->size = size;
    g->slot_floats = slot_floats;
    g->map_bytes = bytes;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "");
    g->creator = name ? getpid() : 0;
    __atomic_store_n(&g->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    return GT_OK;
}

static int check_size(int size, gt_error *err)
{
    if (size < 1 || size > DIST_MAX_RANKS)
        return gt_error_set(err, GT_EINVAL, "dist shm: %d ranks (1 to %d)", size, DIST_MAX_RANKS);
    return GT_OK;
}

int dist_shm_group_create(int size, size_t slot_floats, dist_shm_group **out, gt_error *err)
{
    *out = NULL;
    GT_TRY(check_size(size, err));
    if (!slot_floats)
        slot_floats = SHM_DEFAULT_SLOT;
    size_t bytes = 0;
    GT_TRY(map_size(size, slot_floats, &bytes, err));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return gt_error_set(err, GT_ENOMEM, "dist shm: mapping %zu bytes: %s", bytes,
                            strerror(errno));
    dist_shm_group *g = p;
    int rc = init_header(g, size, slot_floats, bytes, NULL, err);
    if (rc) {
        munmap(p, bytes);
        return rc;
    }
    *out = g;
    return GT_OK;
}

static int check_name(const char *name, gt_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 2 || n >= 64 || name[0] != '/' || strchr(name + 1, '/'))
        return gt_error_set(err, GT_EINVAL,
                            "dist shm: name '%s' must be '/' and 1 to 62 characters without '/'",
                            name ? name : "(null)");
    return GT_OK;
}

int dist_shm_group_create_named(const char *name, int size, size_t slot_floats,
                                dist_shm_group **out, gt_error *err)
{
    *out = NULL;
    GT_TRY(check_size(size, err));
    GT_TRY(check_name(name, err));
    if (!slot_floats)
        slot_floats = SHM_DEFAULT_SLOT;
    size_t bytes = 0;
    GT_TRY(map_size(size, slot_floats, &bytes, err));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return gt_error_set(err, GT_EIO, "dist shm: creating %s: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return gt_error_set(err, GT_ENOMEM, "dist shm: sizing %s to %zu bytes: %s", name, bytes,
                            strerror(e));
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(name);
        return gt_error_set(err, GT_ENOMEM, "dist shm: mapping %s: %s", name, strerror(e));
    }
    int rc = init_header(p, size, slot_floats, bytes, name, err);
    if (rc) {
        munmap(p, bytes);
        shm_unlink(name);
        return rc;
    }
    *out = p;
    return GT_OK;
}

static const dist_ops shm_ops;

static int join(dist_shm_group *g, int rank, nn_backend *b, int owns, dist_comm **out,
                gt_error *err)
{
    *out = NULL;
    if (!g || !b)
        return gt_error_set(err, GT_EINVAL, "dist shm: NULL group or backend");
    if (rank < 0 || rank >= g->size)
        return gt_error_set(err, GT_EINVAL, "dist shm: rank %d of %d", rank, g->size);
    shm_comm *c = calloc(1, sizeof *c);
    if (!c)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    int none = 0;
    int taken = !__atomic_compare_exchange_n(&g->pid[rank], &none, (int)getpid(), 0,
                                             __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (taken) {
        free(c);
        return gt_error_set(err, GT_EINVAL, "dist shm: rank %d has joined already", rank);
    }
    c->base.ops = &shm_ops;
    c->base.b = b;
    c->base.rank = rank;
    c->base.size = g->size;
    c->g = g;
    c->owns_map = owns;
    *out = &c->base;
    return GT_OK;
}

int dist_shm_join(dist_shm_group *g, int rank, nn_backend *b, dist_comm **out, gt_error *err)
{
    return join(g, rank, b, 0, out, err);
}

int dist_shm_attach(const char *name, int rank, int size, nn_backend *b, double timeout_s,
                    dist_comm **out, gt_error *err)
{
    *out = NULL;
    GT_TRY(check_size(size, err));
    GT_TRY(check_name(name, err));
    double until = gt_clock_s() + (timeout_s > 0 ? timeout_s : 0);
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= header_bytes()) {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED)
                return gt_error_set(err, GT_EIO, "dist shm: mapping %s: %s", name,
                                    strerror(errno));
            dist_shm_group *g = p;
            if (__atomic_load_n(&g->magic, __ATOMIC_ACQUIRE) == SHM_MAGIC) {
                if (g->size != size || g->map_bytes != (size_t)st.st_size) {
                    int gs = g->size;
                    munmap(p, (size_t)st.st_size);
                    return gt_error_set(err, GT_EINVAL, "dist shm: %s is a group of %d ranks, "
                                        "not %d", name, gs, size);
                }
                int rc = join(g, rank, b, 1, out, err);
                if (rc)
                    munmap(p, (size_t)st.st_size);
                return rc;
            }
            munmap(p, (size_t)st.st_size);
        } else if (fd >= 0) {
            close(fd);
        }
        if (gt_clock_s() >= until)
            return gt_error_set(err, GT_ENOTFOUND, "dist shm: no group %s after %.0f s", name,
                                timeout_s);
        struct timespec d = {0, 20 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
}

static void set_aborted(dist_shm_group *g)
{
    __atomic_store_n(&g->aborted, 1, __ATOMIC_SEQ_CST);
}

static int gone(pid_t p)
{
    return p > 0 && p != getpid() && kill(p, 0) != 0 && errno == ESRCH;
}

/* 1 + the rank of a member process that no longer exists, -1 when the
 * group's creator is gone, else 0.  Threads of one process share a pid,
 * which is this one. */
static int member_gone(const dist_shm_group *g)
{
    for (int r = 0; r < g->size; r++)
        if (gone(__atomic_load_n(&g->pid[r], __ATOMIC_SEQ_CST)))
            return r + 1;
    return gone(g->creator) ? -1 : 0;
}

static int barrier(shm_comm *c, gt_error *err)
{
    dist_shm_group *g = c->g;
    if (__atomic_load_n(&g->aborted, __ATOMIC_SEQ_CST))
        return gt_error_set(err, GT_ECANCELLED, "dist: another rank failed (group aborted)");
    unsigned long gen = __atomic_load_n(&g->generation, __ATOMIC_SEQ_CST);
    if (__atomic_add_fetch(&g->arrived, 1, __ATOMIC_SEQ_CST) == g->size) {
        /* the last one in: reset the count before releasing the others, so
         * that a rank racing into the next barrier counts from 0 */
        __atomic_store_n(&g->arrived, 0, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&g->generation, 1, __ATOMIC_SEQ_CST);
        return GT_OK;
    }
    long spins = 0, sleep_ns = 1000;
    double next_check = 0;
    int why = 0;
    while (__atomic_load_n(&g->generation, __ATOMIC_SEQ_CST) == gen) {
        if (__atomic_load_n(&g->aborted, __ATOMIC_SEQ_CST))
            return gt_error_set(err, GT_ECANCELLED, "dist: another rank failed (group aborted)");
        if (spins < 2000) {
            spins++;
            sched_yield();
            continue;
        }
        struct timespec d = {0, sleep_ns};
        nanosleep(&d, NULL);
        if (sleep_ns < 1000 * 1000)
            sleep_ns *= 2;
        double t = gt_clock_s();
        if (t >= next_check) {
            next_check = t + 0.2;
            if ((why = member_gone(g)) != 0) {
                set_aborted(g);
                if (why > 0)
                    return gt_error_set(err, GT_ECANCELLED, "dist: rank %d's process is gone",
                                        why - 1);
                return gt_error_set(err, GT_ECANCELLED,
                                    "dist: the process that started the ranks is gone");
            }
        }
    }
    return GT_OK;
}

static int shm_barrier(dist_comm *base, gt_error *err)
{
    return barrier((shm_comm *)base, err);
}

static int shm_allreduce(dist_comm *base, float *buf, size_t n, gt_error *err)
{
    shm_comm *c = (shm_comm *)base;
    dist_shm_group *g = c->g;
    const int R = g->size, me = base->rank;
    float *mine = slot(g, me), *res = slot(g, R);
    for (size_t off = 0; off < n; off += g->slot_floats) {
        size_t m = n - off < g->slot_floats ? n - off : g->slot_floats;
        GT_TRY(nn_copy_d2h(base->b, mine, buf + off, m * sizeof(float), err));
        GT_TRY(barrier(c, err));
        /* this rank's share of the elements; every element in rank order */
        size_t lo = m * (size_t)me / (size_t)R, hi = m * (size_t)(me + 1) / (size_t)R;
        const float *s0 = slot(g, 0);
        for (size_t i = lo; i < hi; i++)
            res[i] = s0[i];
        for (int r = 1; r < R; r++) {
            const float *sr = slot(g, r);
            for (size_t i = lo; i < hi; i++)
                res[i] += sr[i];
        }
        GT_TRY(barrier(c, err));
        GT_TRY(nn_copy_h2d(base->b, buf + off, res, m * sizeof(float), err));
    }
    return GT_OK;
}

static int shm_broadcast(dist_comm *base, void *buf, size_t bytes, int root, gt_error *err)
{
    shm_comm *c = (shm_comm *)base;
    dist_shm_group *g = c->g;
    size_t cap = g->slot_floats * sizeof(float);
    /* the root's own slot, not the result slot: an all-reduce just before
     * may still have ranks copying its result out (it ends without a
     * barrier), while the slots are free once its second barrier passed */
    char *res = (char *)slot(g, root), *p = buf;
    for (size_t off = 0; off < bytes; off += cap) {
        size_t m = bytes - off < cap ? bytes - off : cap;
        if (base->rank == root)
            GT_TRY(nn_copy_d2h(base->b, res, p + off, m, err));
        GT_TRY(barrier(c, err));
        if (base->rank != root)
            GT_TRY(nn_copy_h2d(base->b, p + off, res, m, err));
        GT_TRY(barrier(c, err));
    }
    return GT_OK;
}

static void shm_abort(dist_comm *base) { set_aborted(((shm_comm *)base)->g); }

static void shm_destroy(dist_comm *base)
{
    shm_comm *c = (shm_comm *)base;
    if (c->owns_map)
        munmap(c->g, c->g->map_bytes);
    free(c);
}

static const dist_ops shm_ops = {"shm", shm_allreduce, shm_broadcast, shm_barrier, shm_abort,
                                 shm_destroy};

void dist_shm_group_abort(dist_shm_group *g)
{
    if (g)
        set_aborted(g);
}

void dist_shm_group_destroy(dist_shm_group *g)
{
    if (!g)
        return;
    char name[64];
    snprintf(name, sizeof name, "%s", g->name);
    munmap(g, g->map_bytes);
    if (name[0])
        shm_unlink(name);
}
