/* dist: the collectives data-parallel training needs, behind one small
 * interface with three implementations:
 *
 *   local  one rank; every collective is a no-op (what a NULL communicator
 *          means too, so single-process training never calls anything);
 *   shm    several ranks on one machine, threads of one process or
 *          processes, over one shared-memory segment (the CPU build's
 *          multi-rank training, `giant train --ranks N`, and the tests that
 *          prove the multi-rank logic on a machine without GPUs);
 *   nccl   one process per GPU over NCCL, launched by `giant train --gpus N`
 *          or by Slurm (srun); compiled only in a CUDA build that found NCCL.
 *
 * Every buffer is memory of the backend the communicator was made for
 * (nn_alloc): the shm implementation stages it through host slots with
 * nn_copy_d2h / nn_copy_h2d, so it serves the CPU and the CUDA backend alike;
 * NCCL works on the device pointers on the backend's stream.
 *
 * Bit-identical results on every rank: dist_allreduce_sum leaves exactly the
 * same floats on every rank.  shm sums each element in rank order, 0 first
 * ((x0 + x1) + x2) + ..., computed once and copied to all; NCCL computes
 * each element once along its ring or tree and forwards the result.  The
 * order of shm's sums never depends on timing; NCCL's depends on its choice
 * of algorithm (NCCL_ALGO, NCCL_PROTO: fix them for the same bits from run
 * to run; engine/dist/README.md).
 *
 * Every collective must be called by every rank, in the same order, with
 * the same sizes.  A rank that fails calls dist_abort: the others' pending
 * and later collectives then fail with GT_ECANCELLED instead of waiting
 * forever. */
#ifndef DIST_H
#define DIST_H

#include <stddef.h>

#include "gt_error.h"
#include "nn_backend.h"

#define DIST_MAX_RANKS 64

typedef struct dist_comm dist_comm;

/* NULL is the one-rank communicator: rank 0 of 1, "local". */
int dist_rank(const dist_comm *c);
int dist_size(const dist_comm *c);
const char *dist_kind(const dist_comm *c);

/* buf[0..n) <- the sum over ranks of every rank's buf[0..n), fp32,
 * bit-identical on every rank.  n may be 0. */
int dist_allreduce_sum(dist_comm *c, float *buf, size_t n, gt_error *err);

/* bytes of buf on root -> buf on every rank. */
int dist_broadcast(dist_comm *c, void *buf, size_t bytes, int root, gt_error *err);

/* Returns once every rank has called it. */
int dist_barrier(dist_comm *c, gt_error *err);

/* Marks the group failed: every rank's pending or later collective returns
 * GT_ECANCELLED.  Safe on NULL and more than once. */
void dist_abort(dist_comm *c);

void dist_destroy(dist_comm *c); /* NULL ok */

/* ---- local -------------------------------------------------------------- */

int dist_local_create(nn_backend *b, dist_comm **out, gt_error *err);

/* ---- shm ---------------------------------------------------------------- *
 * A group is one shared mapping: a header (process-shared robust mutex and
 * condition variable, barrier generation, abort flag, the members' pids)
 * and size + 1 slots of slot_floats floats (one per rank, one for results).
 * Collectives move data in chunks of a slot.
 *
 * Anonymous: made in one process, shared by its threads and by children it
 * forks afterwards.  Named: a POSIX shared-memory object (shm_open) that
 * processes started by exec attach to by name. */
typedef struct dist_shm_group dist_shm_group;

/* slot_floats 0 = the default (1 Mi floats, 4 MiB per slot). */
int dist_shm_group_create(int size, size_t slot_floats, dist_shm_group **out, gt_error *err);
/* name: "/giant-..." (shm_open rules: one leading slash, no other). */
int dist_shm_group_create_named(const char *name, int size, size_t slot_floats,
                                dist_shm_group **out, gt_error *err);
/* Rank `rank` of a group; each rank joins once.  The comm does not own the
 * group: destroy every comm first, then the group. */
int dist_shm_join(dist_shm_group *g, int rank, nn_backend *b, dist_comm **out, gt_error *err);
/* Maps a named group (waiting up to timeout_s for its creator) and joins
 * it; the comm owns that mapping.  size must be the group's. */
int dist_shm_attach(const char *name, int rank, int size, nn_backend *b, double timeout_s,
                    dist_comm **out, gt_error *err);
/* What dist_abort does, from outside the ranks (the launcher, when a rank's
 * process died). */
void dist_shm_group_abort(dist_shm_group *g);
/* Unmaps (and for a named group, unlinks the name). NULL ok. */
void dist_shm_group_destroy(dist_shm_group *g);

/* ---- nccl --------------------------------------------------------------- *
 * 1 when this build has NCCL (a CUDA build that found nccl.h and libnccl). */
int dist_nccl_available(void);

/* Rank `rank` of `size` on the CUDA backend b (one GPU per rank).  Rank 0
 * makes the NCCL unique id and writes it to id_path (atomically: a
 * temporary file renamed); the others wait up to timeout_s for the file.
 * id_path must be on a file system every rank sees (the launcher's
 * temporary folder, or a shared folder under Slurm).  Without NCCL in the
 * build: GT_EUNSUPPORTED; b not a CUDA backend: GT_EINVAL. */
int dist_nccl_create(nn_backend *b, int rank, int size, const char *id_path, double timeout_s,
                     dist_comm **out, gt_error *err);

/* ---- who am I ----------------------------------------------------------- *
 * The rank of this process, from the environment: GIANT_RANK,
 * GIANT_WORLD_SIZE, GIANT_LOCAL_RANK (set by `giant train --ranks/--gpus`),
 * else Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID.  Neither: rank 0
 * of 1 (from = "none").  Malformed or inconsistent values: GT_EINVAL naming
 * the variable. */
typedef struct dist_env {
    int rank, size, local_rank;
    const char *from;  /* "giant", "slurm" or "none" */
} dist_env;

int dist_env_read(dist_env *out, gt_error *err);

/* What a launched rank needs to join its group, whatever the kind. */
typedef struct dist_spec {
    const char *kind;   /* "shm", "nccl" or "auto" (nccl on a CUDA backend, else shm) */
    const char *id;     /* shm: the group's name; nccl: the unique id's file */
    int rank, size;
    double timeout_s;   /* waiting for the group's creator or rank 0 */
} dist_spec;

/* Opens rank spec->rank's communicator on backend b (size 1: the local
 * one).  An unknown kind, a missing id, or shm/nccl on the wrong backend:
 * GT_EINVAL naming it. */
int dist_open(const dist_spec *spec, nn_backend *b, dist_comm **out, gt_error *err);

/* The contiguous rows [*lo, *lo + *n) of a global batch of `batch` rows that
 * rank `rank` of `size` computes.  batch must be a multiple of size (every
 * shard the same size, so averaging the shards' mean gradients is the mean
 * gradient of the whole batch): GT_EINVAL otherwise. */
int dist_shard(int batch, int rank, int size, int *lo, int *n, gt_error *err);

#endif
