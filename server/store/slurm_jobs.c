#include "slurm_jobs.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* An update of run ?1's job: every one stamps updated_at. */
#define UPDATE_JOB(set) "UPDATE slurm_jobs SET " set ", updated_at = " NOW " WHERE run_id = ?1"

int slurm_jobs_submitted(store *s, int64_t run, long long job_id, const char *token_hash,
                         gt_error *err)
{
    return store_exec(s, "recording a Slurm job",
                      "INSERT INTO slurm_jobs (run_id, job_id, state, active, token_hash,"
                      " submissions, submitted_at) VALUES (?1, ?2, 'PENDING', 1, ?3, 1, " NOW ")"
                      " ON CONFLICT (run_id) DO UPDATE SET job_id = ?2, state = 'PENDING',"
                      " reason = NULL, node = NULL, active = 1, token_hash = ?3,"
                      " submissions = submissions + 1, restarts = 0, scancel_sent = 0,"
                      " reported = NULL, report_error = NULL, submitted_at = " NOW ","
                      " updated_at = " NOW,
                      STORE_ARGS(STORE_INT(run), STORE_INT(job_id), STORE_TEXT(token_hash)),
                      err);
}

int slurm_jobs_observe(store *s, int64_t run, const char *state, const char *reason,
                       const char *node, gt_error *err)
{
    return store_exec(s, "updating a Slurm job",
                      "UPDATE slurm_jobs SET state = ?2, reason = ?3,"
                      " node = COALESCE(NULLIF(?4, ''), node), updated_at = " NOW
                      " WHERE run_id = ?1 AND (state IS NOT ?2 OR reason IS NOT ?3"
                      " OR (NULLIF(?4, '') IS NOT NULL AND node IS NOT ?4))",
                      STORE_ARGS(STORE_INT(run), STORE_TEXT(state), STORE_TEXT(reason),
                                 STORE_TEXT(node)),
                      err);
}

int slurm_jobs_finish(store *s, int64_t run, const char *state, const char *reason,
                      gt_error *err)
{
    return store_exec(s, "finishing a Slurm job",
                      UPDATE_JOB("state = ?2, reason = ?3, active = 0"),
                      STORE_ARGS(STORE_INT(run), STORE_TEXT(state), STORE_TEXT(reason)), err);
}

int slurm_jobs_mark_scancel(store *s, int64_t run, gt_error *err)
{
    return store_exec(s, "recording scancel", UPDATE_JOB("scancel_sent = 1"),
                      STORE_ARGS(STORE_INT(run)), err);
}

int slurm_jobs_count_restart(store *s, int64_t run, gt_error *err)
{
    return store_exec(s, "counting a restart",
                      UPDATE_JOB("restarts = restarts + 1, reported = NULL, report_error = NULL"),
                      STORE_ARGS(STORE_INT(run)), err);
}

int slurm_jobs_report(store *s, int64_t run, const char *outcome, const char *error,
                      gt_error *err)
{
    return store_exec(s, "recording the trainer's report",
                      UPDATE_JOB("reported = ?2, report_error = ?3"),
                      STORE_ARGS(STORE_INT(run), STORE_TEXT(outcome), STORE_TEXT(error)), err);
}

int slurm_jobs_next_to_submit(store *s, int64_t *run, gt_error *err)
{
    return store_int64(s, "finding a run to submit",
                       "SELECT r.id FROM runs r WHERE r.executor = 'slurm'"
                       " AND r.status = 'queued' AND r.cancel_requested = 0"
                       " AND NOT EXISTS (SELECT 1 FROM slurm_jobs j WHERE j.run_id = r.id"
                       " AND j.active = 1) ORDER BY r.id LIMIT 1",
                       STORE_NO_ARGS, run, err);
}

int slurm_jobs_active(store *s, json_t **rows, gt_error *err)
{
    return store_rows_json(s, "listing active Slurm jobs",
                           "SELECT j.run_id, j.job_id, j.state, j.scancel_sent, j.reported,"
                           " j.report_error, r.status, r.cancel_requested"
                           " FROM slurm_jobs j JOIN runs r ON r.id = j.run_id"
                           " WHERE j.active = 1 ORDER BY j.run_id LIMIT 1000",
                           STORE_NO_ARGS, rows, err);
}

int slurm_jobs_get(store *s, int64_t run, json_t **row, gt_error *err)
{
    return store_row_json(s, "reading a Slurm job",
                          "SELECT job_id, state, reason, node, active, submissions, restarts,"
                          " submitted_at, updated_at FROM slurm_jobs WHERE run_id = ?",
                          STORE_ARGS(STORE_INT(run)), row, err);
}

int slurm_jobs_run_of_token(store *s, const char *token_hash, int64_t *run, gt_error *err)
{
    return store_int64(s, "finding a job's token",
                       "SELECT run_id FROM slurm_jobs WHERE token_hash = ?",
                       STORE_ARGS(STORE_TEXT(token_hash)), run, err);
}
