/* runs_internal: what runs.c, runs_read.c and runs_api.c share (the one
 * owner of the runs tables, in three files); included by them only. */
#ifndef RUNS_INTERNAL_H
#define RUNS_INTERNAL_H

#include <stdint.h>

#include "gt_error.h"

/* The acceptance test of the run that was trained against its current
 * best pair: one row or none. */
#define CURRENT_ACCEPTANCE                                                                  \
    " FROM acceptance_tests a WHERE a.run_id = ?1"                                          \
    " AND a.energy_ckpt = (SELECT id FROM checkpoints WHERE run_id = ?1 AND stage = 'energy'" \
    " AND is_best = 1)"                                                                     \
    " AND a.shower_ckpt = (SELECT id FROM checkpoints WHERE run_id = ?1 AND stage = 'shower'" \
    " AND is_best = 1)"

/* A run id that names no run. */
static inline int runs_no_run(gt_error *err, int64_t id)
{
    return gt_error_set(err, GT_ENOTFOUND, "run %lld does not exist", (long long)id);
}

#endif
